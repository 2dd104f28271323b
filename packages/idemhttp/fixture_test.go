package idemhttp

// What the tests of middleware_test.go share. They run against the database in $DATABASE_URL (idem_keys
// installed): the middleware is a thin layer over the SQL API, and only the real API tells whether the layer
// is right. Each test claims in a scope of its own, so they run on a shared database, beside anything.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

var pool *pgxpool.Pool

func TestMain(m *testing.M) {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		fmt.Fprintln(os.Stderr, "idemhttp tests: DATABASE_URL must name a database with idem_keys installed")
		os.Exit(2)
	}
	var err error
	if pool, err = pgxpool.New(context.Background(), url); err != nil {
		fmt.Fprintln(os.Stderr, "idemhttp tests:", err)
		os.Exit(2)
	}
	code := m.Run()
	pool.Close()
	os.Exit(code)
}

// testLogger collects what the middleware logs, so a test can check that a failure was logged.
type testLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *testLogger) Printf(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}

func (l *testLogger) has(part string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, part) {
			return true
		}
	}
	return false
}

// fixture is one middleware in a fresh scope, in front of handler, behind a real HTTP server.
type fixture struct {
	t      *testing.T
	scope  string
	log    *testLogger
	server *httptest.Server
}

// postRecovering sends POST / with Idempotency-Key k and "{}" straight to handler, and returns what the
// recorder got with the value of a panic that went through the middleware (nil when there was none).
func postRecovering(handler http.Handler) (w *httptest.ResponseRecorder, recovered any) {
	defer func() { recovered = recover() }()
	w = httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "k")
	handler.ServeHTTP(w, req)
	return w, nil
}

func newFixture(t *testing.T, opts Options, handler http.Handler) *fixture {
	t.Helper()
	return newFixtureOn(t, pool, opts, handler)
}

// newFixtureOn is newFixture on another DB than the pool (one that fails).
func newFixtureOn(t *testing.T, db DB, opts Options, handler http.Handler) *fixture {
	t.Helper()
	var random [6]byte
	rand.Read(random[:])
	f := &fixture{t: t, scope: "idemhttp-test-" + hex.EncodeToString(random[:]), log: &testLogger{}}
	if opts.Scope == nil {
		opts.Scope = func(*http.Request) string { return f.scope }
	}
	if opts.OutcomeHeader == "" {
		opts.OutcomeHeader = "Idempotency-Outcome"
	}
	opts.Logger = f.log
	mw, err := New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	f.server = httptest.NewServer(mw(handler))
	t.Cleanup(f.server.Close)
	return f
}

type reply struct {
	status int
	header http.Header
	body   string
}

func (r reply) outcome() string { return r.header.Get("Idempotency-Outcome") }

// problemCode is the code of a problem+json answer, or "" for any other answer.
func (r reply) problemCode() string {
	if r.header.Get("Content-Type") != "application/problem+json" {
		return ""
	}
	var p problem
	json.Unmarshal([]byte(r.body), &p)
	return p.Code
}

// do sends one request. keys are Idempotency-Key field values (none, one, or several fields).
func (f *fixture) do(method, target, contentType, body string, keys ...string) reply {
	f.t.Helper()
	req, err := http.NewRequest(method, f.server.URL+target, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for _, k := range keys {
		req.Header.Add("Idempotency-Key", k)
	}
	resp, err := f.server.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, string(raw)}
}

func (f *fixture) post(key, body string) reply {
	f.t.Helper()
	return f.do("POST", "/payments", "application/json", body, key)
}

// lookup is idem_lookup's outcome for a key of the fixture's scope, "" for an unknown key.
func (f *fixture) lookup(key string) string {
	f.t.Helper()
	var outcome *string
	if err := pool.QueryRow(context.Background(), `SELECT (idem_lookup($1, $2)).outcome`, f.scope, key).Scan(&outcome); err != nil {
		f.t.Fatal(err)
	}
	if outcome == nil {
		return ""
	}
	return *outcome
}

func expect(t *testing.T, got reply, status int, outcome, code string) {
	t.Helper()
	if got.status != status || got.outcome() != outcome || got.problemCode() != code {
		t.Fatalf("got %d outcome=%q code=%q %s; want %d outcome=%q code=%q",
			got.status, got.outcome(), got.problemCode(), got.body, status, outcome, code)
	}
}

// failingDB fails every call whose SQL contains failOn (on the pool otherwise), as a database that went away
// would.
type failingDB struct{ failOn string }

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

var errGone = errors.New("connection refused (simulated)")

func (d failingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if strings.Contains(sql, d.failOn) {
		return errRow{errGone}
	}
	return pool.QueryRow(ctx, sql, args...)
}

func (d failingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if strings.Contains(sql, d.failOn) {
		return pgconn.CommandTag{}, errGone
	}
	return pool.Exec(ctx, sql, args...)
}
