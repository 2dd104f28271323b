package idemhttp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A new key runs the handler and stores its answer; the same request again replays it byte for byte, with the
// allow-listed headers only, without running the handler.
func TestClaimThenReplay(t *testing.T) {
	var calls int32
	var seen []*Attempt
	f := newFixture(t, Options{Retention: time.Hour}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		atomic.AddInt32(&calls, 1)
		seen = append(seen, FromContext(r.Context()))
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/payments/1")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Add("Link", "</a>; rel=a")
		w.Header().Add("Link", "</b>; rel=b")
		w.Header().Set("X-Request-Id", "not stored")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "{ \"b\": 1,  \"a\": %d, \"echo\": %q }", len(body), body) // spacing a jsonb would lose
	}))
	first := f.post(`"k-1"`, `{"amount": 1000, "currency": "EUR"}`)
	expect(t, first, 201, "claimed", "")
	a := seen[0]
	if a == nil || a.Scope != f.scope || a.Key != "k-1" || a.Outcome != "claimed" || a.Token <= 0 || a.Recovered() {
		t.Fatalf("attempt %+v", a)
	}
	if first.header.Get("X-Request-Id") != "not stored" || first.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("first answer's headers %v", first.header)
	}
	// The bare form of the same key, the same JSON reordered and respaced, 1000.0 for 1000.
	again := f.post("k-1", `{"currency":"EUR","amount":1000.0}`)
	expect(t, again, 201, "replay", "")
	if again.body != first.body {
		t.Errorf("replay body %q, first %q", again.body, first.body)
	}
	h := again.header
	if h.Get("Idempotent-Replayed") != "true" || h.Get("Content-Type") != "application/json" ||
		h.Get("Location") != "/payments/1" || h.Get("Etag") != `"v1"` || h.Get("Link") != "</a>; rel=a, </b>; rel=b" ||
		h.Get("X-Request-Id") != "" {
		t.Errorf("replay headers %v", h)
	}
	if calls != 1 {
		t.Errorf("handler ran %d times", calls)
	}
	if f.lookup("k-1") != "replay" {
		t.Errorf("idem_lookup: %q", f.lookup("k-1"))
	}
}

// The fingerprint beyond the contract's vectors (contract_test.go): the target as sent, not decoded; JSON only when
// declared so; a Content-Type's parameters do not count.
func TestKeyReused(t *testing.T) {
	f := newFixture(t, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	expect(t, f.do("POST", "/pay/x?a=1", "application/json", `{"n": 1}`, "k"), 201, "claimed", "")
	for name, r := range map[string]reply{
		"the path encoded otherwise":  f.do("POST", "/pay%2Fx?a=1", "application/json", `{"n": 1}`, "k"),
		"the same JSON, not declared": f.do("POST", "/pay/x?a=1", "text/plain", `{"n": 1}`, "k"),
	} {
		if r.status != 422 || r.problemCode() != "key-reused" || r.outcome() != "mismatch" {
			t.Errorf("%s: %d %q %s", name, r.status, r.outcome(), r.body)
		}
	}
	expect(t, f.do("POST", "/pay/x?a=1", "application/json; charset=utf-8", `{ "n" : 1.00 }`, "k"), 201, "replay", "")
}

// Bodies PostgreSQL cannot read as jsonb count by their bytes, whatever their Content-Type says.
func TestBytesFingerprint(t *testing.T) {
	var calls int32
	f := newFixture(t, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		atomic.AddInt32(&calls, 1)
		body, _ := io.ReadAll(r.Body) // the handler reads the body the middleware already read
		w.Write(body)
	}))
	for i, body := range []string{`{"a":`, `"\u0000"`, "\xff\xfe", "", "amount=1000"} {
		key := fmt.Sprintf("k%d", i)
		first := f.post(key, body)
		expect(t, first, 200, "claimed", "")
		if first.body != body {
			t.Errorf("%q: the handler read %q", body, first.body)
		}
		expect(t, f.post(key, body), 200, "replay", "")
		if body != "" {
			expect(t, f.post(key, body+" "), 422, "mismatch", "key-reused")
		}
	}
	expect(t, f.do("POST", "/", "text/plain", "a", "t"), 200, "claimed", "")
	expect(t, f.do("POST", "/", "text/plain", "a", "t"), 200, "replay", "")
	expect(t, f.do("POST", "/", "text/plain", "a\n", "t"), 422, "mismatch", "key-reused")
	if calls != 6 {
		t.Errorf("handler ran %d times, want 6", calls)
	}
}

func TestRequestsWithoutIdempotency(t *testing.T) {
	var calls int32
	var attempt *Attempt
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		atomic.AddInt32(&calls, 1)
		attempt = FromContext(r.Context())
		w.WriteHeader(http.StatusTeapot)
	})
	f := newFixture(t, Options{}, handler)
	r := f.do("GET", "/payments/1", "", "", "k") // a method not configured: untouched, key or not
	if r.status != 418 || attempt != nil || r.outcome() != "" {
		t.Errorf("GET: %d %v", r.status, attempt)
	}
	expect(t, f.do("PUT", "/", "", "", "k"), 418, "", "")
	expect(t, f.do("POST", "/", "", ""), 400, "", "key-missing")
	for _, bad := range [][]string{{""}, {`"unclosed`}, {"a b"}, {`"a";p=1`}, {strings.Repeat("k", 256)}, {"k", "k"}} {
		expect(t, f.do("POST", "/", "", "", bad...), 400, "", "key-malformed")
	}
	if calls != 2 {
		t.Errorf("handler ran %d times, want 2", calls)
	}

	optional := newFixture(t, Options{KeyOptional: true, Methods: []string{"PUT"}}, handler)
	r = optional.do("PUT", "/", "", "")
	if r.status != 418 || attempt != nil {
		t.Errorf("no key, KeyOptional: %d %v", r.status, attempt)
	}
	expect(t, optional.do("PUT", "/", "", "", "a b"), 400, "", "key-malformed") // whatever KeyOptional says
	expect(t, optional.do("PUT", "/", "", "", "k"), 418, "claimed", "")
	expect(t, optional.do("POST", "/", "", ""), 418, "", "") // not a configured method any more
}

func TestScopeMissing(t *testing.T) {
	var calls int32
	f := newFixture(t, Options{Scope: func(*http.Request) string { return "" }}, http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) { atomic.AddInt32(&calls, 1) }))
	expect(t, f.post("k", "{}"), 500, "", "scope-missing")
	if calls != 0 || !f.log.has("no scope") {
		t.Errorf("calls %d, log %v", calls, f.log.lines)
	}
}

func TestStoreUnavailable(t *testing.T) {
	var calls int32
	f := newFixtureOn(t, failingDB{"idem_claim"}, Options{}, http.HandlerFunc(
		func(http.ResponseWriter, *http.Request) { atomic.AddInt32(&calls, 1) }))
	for _, body := range []string{"{}", "not JSON"} {
		r := f.post("k", body)
		expect(t, r, 503, "", "store-unavailable")
		if r.header.Get("Retry-After") != "1" {
			t.Errorf("Retry-After %q", r.header.Get("Retry-After"))
		}
	}
	if calls != 0 || !f.log.has("simulated") {
		t.Errorf("calls %d, log %v", calls, f.log.lines)
	}
}

// An answer that cannot be stored is not sent: the client gets 500 store-failed, and the key stays claimed until
// its lease ends.
func TestStoreFailed(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 2<<20) // over idem_keys.max_response_bytes (1MB by default)
	f := newFixture(t, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(big) }))
	expect(t, f.post("k", "{}"), 500, "claimed", "store-failed")
	if !f.log.has("54000") {
		t.Errorf("log %v", f.log.lines)
	}
	expect(t, f.post("k", "{}"), 409, "in_progress", "request-in-progress")

	gone := newFixtureOn(t, failingDB{"idem_finish"}, Options{}, http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	expect(t, gone.post("k", "{}"), 500, "claimed", "store-failed")
	if gone.lookup("k") != "in_progress" {
		t.Errorf("idem_lookup %q, want in_progress", gone.lookup("k"))
	}
}

// A duplicate while the first attempt runs: 409 with Retry-After, or with Wait the first attempt's answer.
func TestInProgress(t *testing.T) {
	for _, wait := range []time.Duration{0, 5 * time.Second} {
		t.Run(fmt.Sprintf("wait %v", wait), func(t *testing.T) {
			started, finish := make(chan struct{}), make(chan struct{})
			f := newFixture(t, Options{Lease: time.Minute, Wait: wait}, http.HandlerFunc(
				func(w http.ResponseWriter, r *http.Request) {
					close(started)
					<-finish
					w.WriteHeader(http.StatusAccepted)
					io.WriteString(w, "done")
				}))
			firstDone := make(chan reply)
			go func() { firstDone <- f.post("k", "{}") }()
			<-started
			if wait == 0 {
				r := f.post("k", "{}")
				expect(t, r, 409, "in_progress", "request-in-progress")
				if ra := r.header.Get("Retry-After"); ra != "60" && ra != "59" {
					t.Errorf("Retry-After %q, want the lease's rest", ra)
				}
				close(finish)
			} else {
				time.AfterFunc(300*time.Millisecond, func() { close(finish) })
				r := f.post("k", "{}")
				expect(t, r, 202, "replay", "")
				if r.body != "done" {
					t.Errorf("body %q", r.body)
				}
			}
			expect(t, <-firstDone, 202, "claimed", "")
		})
	}
}

// A retryable answer releases the key: it goes to the client, and the next request runs again, even with
// another body.
func TestRetryableReleases(t *testing.T) {
	var calls int32
	f := newFixture(t, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch atomic.AddInt32(&calls, 1) {
		case 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
		case 2:
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.WriteHeader(http.StatusCreated)
		}
	}))
	r := f.post("k", `{"n": 1}`)
	expect(t, r, 503, "claimed", "")
	if r.header.Get("Retry-After") != "1" {
		t.Errorf("the handler's own headers are lost: %v", r.header)
	}
	expect(t, f.post("k", `{"n": 2}`), 429, "claimed", "")
	expect(t, f.post("k", `{"n": 3}`), 201, "claimed", "")
	expect(t, f.post("k", `{"n": 3}`), 201, "replay", "")

	// Statuses not listed are answers, errors too; RetryableStatuses replaces the list.
	var otherCalls int32
	other := newFixture(t, Options{RetryableStatuses: []int{502}}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/503":
			w.WriteHeader(http.StatusServiceUnavailable)
		case atomic.AddInt32(&otherCalls, 1) == 1:
			w.WriteHeader(http.StatusBadGateway)
		default:
			w.WriteHeader(http.StatusCreated)
		}
	}))
	expect(t, other.do("POST", "/503", "", "", "a"), 503, "claimed", "")
	expect(t, other.do("POST", "/503", "", "", "a"), 503, "replay", "")
	expect(t, other.do("POST", "/502", "", "", "b"), 502, "claimed", "")
	expect(t, other.do("POST", "/502", "", "", "b"), 201, "claimed", "")
}

// A handler that panics releases the key, and the panic goes on, the same value.
func TestPanicReleases(t *testing.T) {
	for _, value := range []any{"boom", http.ErrAbortHandler} {
		t.Run(fmt.Sprint(value), func(t *testing.T) {
			var calls int32
			f := newFixture(t, Options{}, http.NotFoundHandler()) // for its scope and logger
			mw, err := New(pool, Options{Scope: func(*http.Request) string { return f.scope }, Logger: f.log})
			if err != nil {
				t.Fatal(err)
			}
			handler := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if atomic.AddInt32(&calls, 1) == 1 {
					w.WriteHeader(http.StatusCreated) // held, never sent
					panic(value)
				}
				w.WriteHeader(http.StatusOK)
			}))
			w, recovered := postRecovering(handler)
			if recovered != value || w.Body.Len() != 0 {
				t.Fatalf("recovered %v, body %q", recovered, w.Body.String())
			}
			if f.lookup("k") != "" {
				t.Fatalf("idem_lookup %q: the key was not released", f.lookup("k"))
			}
			w, recovered = postRecovering(handler)
			if recovered != nil || w.Code != 200 {
				t.Fatalf("after the panic: %v %d", recovered, w.Code)
			}
		})
	}
}

// LeaveUnsettled, then a panic: the handler said it cannot tell what happened, so the key is not released.
func TestUnsettledThenPanic(t *testing.T) {
	f := newFixture(t, Options{}, http.NotFoundHandler())
	mw, err := New(pool, Options{Scope: func(*http.Request) string { return f.scope }, Logger: f.log})
	if err != nil {
		t.Fatal(err)
	}
	handler := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		FromContext(r.Context()).LeaveUnsettled()
		panic("after the charge, maybe")
	}))
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not go on")
			}
		}()
		req := httptest.NewRequest("POST", "/", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "k")
		handler.ServeHTTP(httptest.NewRecorder(), req)
	}()
	if f.lookup("k") != "in_progress" {
		t.Errorf("idem_lookup %q, want in_progress: the key was released", f.lookup("k"))
	}
}

// A handler that ran past its lease, while another request took the key over, may not store its late answer:
// its client gets 409 lease-lost, and a retry gets the answer of the request that took over.
func TestFencedLateFinish(t *testing.T) {
	var calls int32
	slowStarted, slowGo := make(chan struct{}), make(chan struct{})
	f := newFixture(t, Options{Lease: time.Second}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if atomic.AddInt32(&calls, 1) == 1 {
			close(slowStarted)
			<-slowGo
			io.WriteString(w, "late")
			return
		}
		if !FromContext(r.Context()).Recovered() {
			t.Errorf("the takeover is not recovered")
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "took over")
	}))
	slow := make(chan reply)
	go func() { slow <- f.post("k", "{}") }()
	<-slowStarted
	time.Sleep(1200 * time.Millisecond) // past the lease
	expect(t, f.post("k", "{}"), 201, "recovered", "")
	close(slowGo)
	late := <-slow
	expect(t, late, 409, "claimed", "lease-lost")
	if late.header.Get("Retry-After") != "1" || !f.log.has("55000") {
		t.Errorf("Retry-After %q, log %v", late.header.Get("Retry-After"), f.log.lines)
	}
	r := f.post("k", "{}")
	expect(t, r, 201, "replay", "")
	if r.body != "took over" {
		t.Errorf("replay %q", r.body)
	}
}

// LeaveUnsettled: the answer goes out unstored, the key stays claimed until its lease ends, and the next
// request then runs recovered.
func TestLeaveUnsettled(t *testing.T) {
	var calls int32
	f := newFixture(t, Options{Lease: time.Second}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := FromContext(r.Context())
		if atomic.AddInt32(&calls, 1) == 1 {
			a.LeaveUnsettled()
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, "maybe charged")
			return
		}
		if !a.Recovered() {
			t.Errorf("outcome %q, want recovered", a.Outcome)
		}
		w.WriteHeader(http.StatusCreated)
	}))
	r := f.post("k", "{}")
	expect(t, r, 502, "claimed", "")
	if r.body != "maybe charged" {
		t.Errorf("body %q", r.body)
	}
	expect(t, f.post("k", "{}"), 409, "in_progress", "request-in-progress")
	time.Sleep(1200 * time.Millisecond) // past the lease
	expect(t, f.post("k", "{}"), 201, "recovered", "")
	expect(t, f.post("k", "{}"), 201, "replay", "")
}

// A client that hangs up cancels nothing: the handler finishes on a context that is not cancelled, the answer
// is stored, and the retry gets it.
func TestClientHangsUp(t *testing.T) {
	handlerErr := make(chan error, 1)
	f := newFixture(t, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(400 * time.Millisecond)
		handlerErr <- r.Context().Err()
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "stored")
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", f.server.URL+"/", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "k")
	if _, err := f.server.Client().Do(req); err == nil {
		t.Fatal("the client did not give up")
	}
	if err := <-handlerErr; err != nil {
		t.Errorf("the handler's context: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.lookup("k") != "replay" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	r := f.do("POST", "/", "", "{}", "k")
	expect(t, r, 201, "replay", "")
	if r.body != "stored" {
		t.Errorf("body %q", r.body)
	}
}

// An empty answer is stored with a NULL body and replayed empty.
func TestEmptyAnswer(t *testing.T) {
	f := newFixture(t, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"e"`)
		w.WriteHeader(http.StatusNoContent)
	}))
	expect(t, f.post("k", "{}"), 204, "claimed", "")
	r := f.post("k", "{}")
	expect(t, r, 204, "replay", "")
	if r.body != "" || r.header.Get("Etag") != `"e"` {
		t.Errorf("%q %v", r.body, r.header)
	}
	var stored *[]byte
	pool.QueryRow(context.Background(), `SELECT (idem_lookup($1, 'k')).response_bytes`, f.scope).Scan(&stored)
	if stored != nil {
		t.Errorf("stored body %q, want NULL", *stored)
	}
}

// The body as the client sent it reaches the handler, after the middleware read it; a body the server cannot
// read is refused before any claim.
func TestBody(t *testing.T) {
	f := newFixture(t, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(w, r.Body)
	}))
	if r := f.post("k", `{"x": [1, 2]}`); r.body != `{"x": [1, 2]}` {
		t.Errorf("the handler read %q", r.body)
	}
	mw, err := New(pool, Options{Scope: func(*http.Request) string { return f.scope }, Logger: f.log})
	if err != nil {
		t.Fatal(err)
	}
	limited := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 4)
		mw(http.NotFoundHandler()).ServeHTTP(w, r)
	})
	w := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/", strings.NewReader("12345"))
	req.Header.Set("Idempotency-Key", "big")
	limited.ServeHTTP(w, req)
	expect(t, reply{w.Code, w.Header(), w.Body.String()}, 413, "", "body-too-large")
	if f.lookup("big") != "" {
		t.Error("a body too large was claimed")
	}
}
