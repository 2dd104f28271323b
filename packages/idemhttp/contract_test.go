package idemhttp

// The contract the five middlewares share, as data in the repository's contract/ directory (IDEM_CONTRACT_DIR
// elsewhere, as when the tests run on the module as downloaded): the key grammar, the problem answers, the SQL texts
// and the fingerprint vectors. The package keeps its own constants; these tests prove they equal the contract.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// loadContract decodes contract/<name> into v.
func loadContract(t *testing.T, name string, v any) {
	t.Helper()
	dir := os.Getenv("IDEM_CONTRACT_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "contract") // packages/idemhttp in the repository
	}
	raw, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("the contract: %v (set IDEM_CONTRACT_DIR to the repository's contract directory)", err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("contract %s: %v", name, err)
	}
}

func TestKeysContract(t *testing.T) {
	var contract struct {
		MaxLength int `json:"max_length"`
		Cases     []struct {
			Name, Value string
			Key         *string
		}
	}
	loadContract(t, "keys.json", &contract)
	if contract.MaxLength != maxKeyLength || len(contract.Cases) == 0 {
		t.Fatalf("max_length %d (the package's %d), %d cases", contract.MaxLength, maxKeyLength, len(contract.Cases))
	}
	for _, c := range contract.Cases {
		key, ok := parseKey(c.Value)
		if c.Key == nil && ok {
			t.Errorf("%s: parseKey(%q) = %q, want malformed", c.Name, c.Value, key)
		}
		if c.Key != nil && (!ok || key != *c.Key) {
			t.Errorf("%s: parseKey(%q) = %q, %v; want %q", c.Name, c.Value, key, ok, *c.Key)
		}
	}
}

// Every problem of the contract is in the package's table and answered with exactly its bytes, status, Content-Type
// and Retry-After; the table has no other.
func TestProblemsContract(t *testing.T) {
	var contract struct {
		ContentType string `json:"content_type"`
		Problems    []struct {
			Code, Title, Detail, Body string
			Status                    int
			RetryAfter                json.RawMessage `json:"retry_after"`
		}
	}
	loadContract(t, "problems.json", &contract)
	seen := map[string]bool{}
	for _, c := range contract.Problems {
		seen[c.Code] = true
		p, ok := problems[c.Code]
		if !ok {
			t.Errorf("%s: not in the package's table", c.Code)
			continue
		}
		if p.Status != c.Status || titles[p.Status] != c.Title || p.Detail != c.Detail {
			t.Errorf("%s: %d %q %q; the contract: %d %q %q", c.Code, p.Status, titles[p.Status], p.Detail, c.Status, c.Title, c.Detail)
		}
		w, retryAfter := httptest.NewRecorder(), ""
		switch string(c.RetryAfter) {
		case "null":
			writeProblem(w, c.Code)
		case `"lease"`: // the rest of the claim's lease, at least 1
			writeInProgress(w, 7)
			retryAfter = "7"
			last := httptest.NewRecorder()
			writeInProgress(last, 0)
			if last.Header().Get("Retry-After") != "1" {
				t.Errorf("%s in the lease's last second: Retry-After %q, want 1", c.Code, last.Header().Get("Retry-After"))
			}
		default:
			writeProblem(w, c.Code)
			retryAfter = string(c.RetryAfter)
		}
		h := w.Header()
		if w.Code != c.Status || w.Body.String() != c.Body || h.Get("Content-Type") != contract.ContentType ||
			h.Get("Retry-After") != retryAfter || h.Get("Content-Length") != strconv.Itoa(len(c.Body)) {
			t.Errorf("%s: answered %d %v %s; the contract: %d, Retry-After %q, %s", c.Code, w.Code, h, w.Body, c.Status, retryAfter, c.Body)
		}
	}
	for code := range problems {
		if !seen[code] {
			t.Errorf("%s: in the package's table, not in the contract", code)
		}
	}
}

// The package's SQL is the contract's, whitespace folded.
func TestSQLContract(t *testing.T) {
	var contract struct {
		Statements map[string]struct{ SQL string }
	}
	loadContract(t, "sql.json", &contract)
	ours := map[string]string{"claim_json": claimJSONSQL, "claim_bytes": claimBytesSQL, "finish": finishSQL, "release": releaseSQL}
	space := regexp.MustCompile(`\s+`)
	fold := func(sql string) string { return space.ReplaceAllString(strings.TrimSpace(sql), " ") }
	for name, statement := range contract.Statements {
		sql, ok := ours[name]
		if !ok {
			t.Errorf("%s: the package sends no such statement", name)
			continue
		}
		if fold(sql) != fold(statement.SQL) {
			t.Errorf("%s:\n ours     %s\n contract %s", name, fold(sql), fold(statement.SQL))
		}
		delete(ours, name)
	}
	for name := range ours {
		t.Errorf("%s: not in the contract", name)
	}
}

// contractRequest is one request of a fingerprint vector.
type contractRequest struct {
	Method, Target, Body string
	ContentType          string `json:"content_type"`
	ContentEncoding      string `json:"content_encoding"`
}

// send sends r with Idempotency-Key key to the fixture's server.
func (f *fixture) send(r contractRequest, key string) reply {
	f.t.Helper()
	req, err := http.NewRequest(r.Method, f.server.URL+r.Target, strings.NewReader(r.Body))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", r.ContentType)
	if r.ContentEncoding != "" {
		req.Header.Set("Content-Encoding", r.ContentEncoding) // only a header: the body is sent as it is
	}
	resp, err := f.server.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, string(body)}
}

// The fingerprint vectors through the claim, in both modes, against the database: a second request that is the same
// replays the first one's answer; another one gets 422 key-reused.
func TestFingerprintsContract(t *testing.T) {
	var contract struct {
		Vectors []struct {
			Name          string
			First, Second contractRequest
			Same          bool
		}
	}
	loadContract(t, "fingerprints.json", &contract)
	for _, transactional := range []bool{false, true} {
		t.Run(fmt.Sprintf("transactional %v", transactional), func(t *testing.T) {
			var calls int32
			f := newFixture(t, Options{Transactional: transactional}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, "answer %d", atomic.AddInt32(&calls, 1))
			}))
			for i, v := range contract.Vectors {
				key := fmt.Sprintf("vector-%d", i)
				first := f.send(v.First, key)
				expect(t, first, 201, "claimed", "")
				second := f.send(v.Second, key)
				if v.Same && (second.status != 201 || second.outcome() != "replay" || second.body != first.body) {
					t.Errorf("%s: the second got %d %q %q, want the replay of %q", v.Name, second.status, second.outcome(), second.body, first.body)
				}
				if !v.Same && (second.status != 422 || second.outcome() != "mismatch" || second.problemCode() != "key-reused") {
					t.Errorf("%s: the second got %d %q %s, want 422 key-reused", v.Name, second.status, second.outcome(), second.body)
				}
			}
		})
	}
}
