package idemhttp

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// nowhere is a DB that is never reached: New must not touch the database.
type nowhere struct{}

func (nowhere) QueryRow(context.Context, string, ...any) pgx.Row { panic("unexpected query") }
func (nowhere) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	panic("unexpected exec")
}

func scopeOf(*http.Request) string { return "s" }

func TestNewRefusesBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		db   DB
		opts Options
		want string
	}{
		{"no pool", nil, Options{Scope: scopeOf}, "pool is required"},
		{"no scope", nowhere{}, Options{}, "Scope is required"},
		{"negative lease", nowhere{}, Options{Scope: scopeOf, Lease: -time.Second}, "Options.Lease is negative (-1s)"},
		{"negative wait", nowhere{}, Options{Scope: scopeOf, Wait: -time.Millisecond}, "Options.Wait is negative (-1ms)"},
		{"negative retention", nowhere{}, Options{Scope: scopeOf, Retention: -time.Hour}, "Options.Retention is negative (-1h0m0s)"},
		{"negative body limit", nowhere{}, Options{Scope: scopeOf, MaxBodyBytes: -1}, "Options.MaxBodyBytes is negative (-1)"},
		{"retryable status 600", nowhere{}, Options{Scope: scopeOf, RetryableStatuses: []int{600}}, "Options.RetryableStatuses: 600 is not an HTTP status"},
		{"retryable status 99", nowhere{}, Options{Scope: scopeOf, RetryableStatuses: []int{503, 99}}, "Options.RetryableStatuses: 99 is not an HTTP status"},
		{"transactional without Begin", nowhere{}, Options{Scope: scopeOf, Transactional: true}, "needs a db with Begin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mw, err := New(tc.db, tc.opts)
			if err == nil || mw != nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	c, err := Options{Scope: scopeOf}.config()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.methods) != 2 || !c.methods["POST"] || !c.methods["PATCH"] {
		t.Errorf("methods %v", c.methods)
	}
	if len(c.retryable) != 2 || !c.retryable[429] || !c.retryable[503] {
		t.Errorf("retryable %v", c.retryable)
	}
	if len(c.storedHeaders) != 6 || c.storedHeaders["Etag"] != "ETag" || c.storedHeaders["Content-Type"] != "Content-Type" {
		t.Errorf("stored headers %v", c.storedHeaders)
	}
	if c.keyOptional || c.transactional || c.outcomeHeader != "" || c.logger == nil || c.lease != 0 || c.wait != 0 || c.retention != 0 {
		t.Errorf("config %+v", c)
	}
	c, err = Options{Scope: scopeOf, Methods: []string{"put"}, RetryableStatuses: []int{}, StoredHeaders: []string{}}.config()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.methods) != 1 || !c.methods["PUT"] || len(c.retryable) != 0 || len(c.storedHeaders) != 0 {
		t.Errorf("config %+v", c)
	}
}

// A duration goes to make_interval as float8 seconds; 0 is NULL, the server's setting (or no wait).
func TestSeconds(t *testing.T) {
	if seconds(0) != nil {
		t.Error("0 must be NULL, the server's default")
	}
	for d, want := range map[time.Duration]float64{1500 * time.Millisecond: 1.5, 4 * time.Second: 4, time.Microsecond: 1e-6, 24 * time.Hour: 86400} {
		if got := seconds(d); got != want {
			t.Errorf("seconds(%v) = %v, want %v", d, got, want)
		}
	}
}

func TestIsJSON(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/json": true, "application/json; charset=utf-8": true, "Application/JSON": true,
		"application/problem+json": true, "application/merge-patch+json;x": true, "text/json": false,
		"application/jsonx": false, "text/plain": false, "": false, "application/x-www-form-urlencoded": false,
	} {
		if isJSON(ct) != want {
			t.Errorf("isJSON(%q) != %v", ct, want)
		}
	}
}

// An empty body, invalid UTF-8 or a NUL byte go to the bytes fingerprint without a claim that would only fail.
func TestJSONText(t *testing.T) {
	for body, want := range map[string]bool{
		`{"a": 1}`: true, `"é"`: true, "": false, "{\xff}": false, "{\"a\": \"\x00\"}": false, "not json": true,
	} {
		if jsonText([]byte(body)) != want {
			t.Errorf("jsonText(%q) != %v", body, want)
		}
	}
}

func TestUncompressed(t *testing.T) {
	for encoding, want := range map[string]bool{"": true, "identity": true, " Identity ": true, "gzip": false, "br": false} {
		if uncompressed(encoding) != want {
			t.Errorf("uncompressed(%q) != %v", encoding, want)
		}
	}
}
