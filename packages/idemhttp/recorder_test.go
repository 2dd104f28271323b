package idemhttp

import (
	"net/http"
	"reflect"
	"testing"
)

func TestRecorderAsNetHTTP(t *testing.T) {
	rec := newRecorder()
	var _ http.Flusher = rec
	rec.Header().Set("Location", "/a")
	rec.WriteHeader(http.StatusEarlyHints) // dropped: a replay could not repeat it
	rec.WriteHeader(http.StatusCreated)
	rec.WriteHeader(http.StatusOK)        // ignored: the first final status counts
	rec.Header().Set("Location", "/late") // ignored: the header was sent with the status
	rec.Write([]byte("ab"))
	rec.Flush() // nothing: the answer is held
	rec.Write([]byte("c"))
	status, header := rec.result()
	if status != http.StatusCreated || header.Get("Location") != "/a" || rec.body.String() != "abc" {
		t.Errorf("got %d %v %q", status, header, rec.body.String())
	}

	rec = newRecorder()
	rec.Write([]byte("x"))
	if status, _ := rec.result(); status != http.StatusOK {
		t.Errorf("Write without WriteHeader: %d", status)
	}
	if status, _ := newRecorder().result(); status != http.StatusOK {
		t.Errorf("nothing written: %d", status)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("WriteHeader(42) did not panic")
			}
		}()
		newRecorder().WriteHeader(42)
	}()
}

func TestStoredHeaders(t *testing.T) {
	header := http.Header{}
	header.Set("Content-Type", "application/json")
	header.Add("Link", "</a>; rel=a")
	header.Add("Link", "</b>; rel=b")
	header.Set("Set-Cookie", "s=1")
	header.Set("X-Request-Id", "r1")
	header.Set("Etag", `"v1"`)
	c, _ := Options{Scope: scopeOf}.config()
	want := map[string]string{"Content-Type": "application/json", "Link": "</a>; rel=a, </b>; rel=b", "ETag": `"v1"`}
	if got := storedHeaders(header, c.storedHeaders); !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	c, _ = Options{Scope: scopeOf, StoredHeaders: []string{"x-request-id"}}.config()
	if got := storedHeaders(header, c.storedHeaders); !reflect.DeepEqual(got, map[string]string{"x-request-id": "r1"}) {
		t.Errorf("got %v", got)
	}
}
