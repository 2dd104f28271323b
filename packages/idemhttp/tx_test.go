package idemhttp

// The transactional mode (Options.Transactional): the claim, the handler's writes and the finish commit together
// or not at all. The handler writes rows of idemhttp_test_writes through Tx(r.Context()); most fixtures run on a
// pool of one connection, so a connection the middleware failed to give back would make the next request fail
// (503 store-unavailable after storeTimeout), and settle checks that none is held after each request.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

var writesTable sync.Once

// smallPool is a pool of at most size connections on $DATABASE_URL, with the tables the handlers write: rows of
// idemhttp_test_writes, and idemhttp_test_guard, whose deferred primary key makes a COMMIT fail when a handler
// inserts its scope twice.
func smallPool(t *testing.T, size int32) *pgxpool.Pool {
	t.Helper()
	writesTable.Do(func() {
		for _, ddl := range []string{
			`CREATE TABLE IF NOT EXISTS idemhttp_test_writes (scope text NOT NULL, key text NOT NULL, note text)`,
			`CREATE TABLE IF NOT EXISTS idemhttp_test_guard (scope text PRIMARY KEY DEFERRABLE INITIALLY DEFERRED)`,
		} {
			if _, err := pool.Exec(context.Background(), ddl); err != nil {
				t.Fatal(err)
			}
		}
	})
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = size
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Close waits for every connection to be given back: one the middleware kept would hang the tests.
		closed := make(chan struct{})
		go func() { p.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Error("the pool could not close: a connection is still held")
		}
	})
	return p
}

// txFixture is a fixture in the transactional mode on a pool of size connections.
func txFixture(t *testing.T, size int32, opts Options, handler http.Handler) (*fixture, *pgxpool.Pool) {
	t.Helper()
	p := smallPool(t, size)
	opts.Transactional = true
	return newFixtureOn(t, p, opts, handler), p
}

// settled fails the test when a connection of p is still held once the request has been answered.
func settled(t *testing.T, p *pgxpool.Pool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second) // a panic's rollback runs before the client sees the connection drop
	for p.Stat().AcquiredConns() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := p.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connection(s) still held: not given back to the pool", n)
	}
}

// write is what the handlers of these tests do: one row under their key, in the request's transaction.
func write(t *testing.T, r *http.Request, note string) {
	a := FromContext(r.Context())
	tx := Tx(r.Context())
	if tx == nil || a.Tx != tx {
		t.Errorf("Tx(ctx) %v, Attempt.Tx %v: the transactional mode's transaction is missing", tx, a.Tx)
		return
	}
	if _, err := tx.Exec(r.Context(), `INSERT INTO idemhttp_test_writes VALUES ($1, $2, $3)`, a.Scope, a.Key, note); err != nil {
		t.Errorf("the handler's write: %v", err)
	}
}

// writes counts the committed rows the handlers wrote under a key of the fixture's scope.
func (f *fixture) writes(key string) int {
	f.t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM idemhttp_test_writes WHERE scope = $1 AND key = $2`,
		f.scope, key).Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

// One transaction: while the handler runs, neither its write nor the claim can be seen from outside; once the
// answer is out, both are committed with it, and the retry replays it without running the handler.
func TestTxCommitsOnce(t *testing.T) {
	var calls int32
	var f *fixture
	var outside struct {
		writes int
		lookup string
	}
	f, p := txFixture(t, 1, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		atomic.AddInt32(&calls, 1)
		write(t, r, "first")
		// A savepoint is the handler's to use; a nested transaction commits into the request's.
		sp, err := Tx(r.Context()).Begin(r.Context())
		if err == nil {
			_, err = sp.Exec(r.Context(), `INSERT INTO idemhttp_test_writes VALUES ($1, $2, 'savepoint')`, f.scope, "k")
		}
		if err == nil {
			err = sp.Commit(r.Context())
		}
		if err != nil {
			t.Errorf("savepoint: %v", err)
		}
		// The usual pgx habit does nothing: the middleware ends the transaction.
		if err := Tx(r.Context()).Rollback(r.Context()); !errors.Is(err, ErrTxManaged) {
			t.Errorf("Rollback: %v, want ErrTxManaged", err)
		}
		if err := FromContext(r.Context()).Tx.Commit(r.Context()); !errors.Is(err, ErrTxManaged) {
			t.Errorf("Commit: %v, want ErrTxManaged", err)
		}
		outside.writes, outside.lookup = f.writes("k"), f.lookup("k")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"paid": true}`)
	}))
	first := f.post("k", "{}")
	expect(t, first, 201, "claimed", "")
	settled(t, p)
	if outside.writes != 0 || outside.lookup != "" {
		t.Errorf("seen from outside while the handler ran: %d writes, idem_lookup %q", outside.writes, outside.lookup)
	}
	if n := f.writes("k"); n != 2 {
		t.Errorf("%d rows committed, want 2", n)
	}
	again := f.post("k", "{}")
	expect(t, again, 201, "replay", "")
	settled(t, p)
	if again.body != first.body || calls != 1 || f.writes("k") != 2 {
		t.Errorf("replay %q, handler ran %d times, %d rows", again.body, calls, f.writes("k"))
	}
	// The outcomes that need no handler end their transaction too: on one connection the next request works.
	expect(t, f.post("k", `{"other": 1}`), 422, "mismatch", "key-reused")
	settled(t, p)
	expect(t, f.post("k2", "{}"), 201, "claimed", "")
	settled(t, p)

	// Outside the mode there is no transaction.
	plain := newFixture(t, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if Tx(r.Context()) != nil || FromContext(r.Context()).Tx != nil {
			t.Error("a transaction outside the transactional mode")
		}
	}))
	expect(t, plain.post("k", "{}"), 200, "claimed", "")
}

// A JSON body PostgreSQL cannot read aborts the claim's transaction: the bytes form runs in a new one, on the
// one connection of the pool, so the first went back.
func TestTxBytesFingerprint(t *testing.T) {
	f, p := txFixture(t, 1, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		write(t, r, "bytes")
		w.WriteHeader(http.StatusCreated)
	}))
	for i, body := range []string{`{"a":`, `"\u0000"`} {
		key := fmt.Sprintf("k%d", i)
		expect(t, f.post(key, body), 201, "claimed", "")
		settled(t, p)
		expect(t, f.post(key, body), 201, "replay", "")
		expect(t, f.post(key, body+" "), 422, "mismatch", "key-reused")
		settled(t, p)
		if f.writes(key) != 1 {
			t.Errorf("%q: %d rows", body, f.writes(key))
		}
	}
}

// A panic rolls everything back: the handler's write and the claim vanish, the key is free at once, and the
// panic goes on, the same value.
func TestTxPanicRollsBack(t *testing.T) {
	var calls int32
	p := smallPool(t, 1)
	f := newFixture(t, Options{}, http.NotFoundHandler()) // for its scope and logger
	mw, err := New(p, Options{Scope: func(*http.Request) string { return f.scope }, Logger: f.log, Transactional: true})
	if err != nil {
		t.Fatal(err)
	}
	handler := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		write(t, r, "before the panic")
		if atomic.AddInt32(&calls, 1) == 1 {
			w.WriteHeader(http.StatusCreated) // held, never sent
			panic("boom")
		}
		w.WriteHeader(http.StatusCreated)
	}))
	w, recovered := postRecovering(handler)
	if recovered != "boom" || w.Body.Len() != 0 {
		t.Fatalf("recovered %v, body %q", recovered, w.Body.String())
	}
	settled(t, p)
	if f.lookup("k") != "" || f.writes("k") != 0 {
		t.Fatalf("after the panic: idem_lookup %q, %d rows", f.lookup("k"), f.writes("k"))
	}
	if w, recovered = postRecovering(handler); recovered != nil || w.Code != 201 || w.Header().Get("Idempotency-Outcome") != "" {
		t.Fatalf("after the panic: %v %d", recovered, w.Code)
	}
	settled(t, p)
	if f.lookup("k") != "replay" || f.writes("k") != 1 {
		t.Errorf("idem_lookup %q, %d rows", f.lookup("k"), f.writes("k"))
	}
}

// A retryable status rolls everything back, and its answer goes to the client: the key is free, nothing written.
func TestTxRetryableRollsBack(t *testing.T) {
	var calls int32
	f, p := txFixture(t, 1, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		write(t, r, "retryable")
		if atomic.AddInt32(&calls, 1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "try again")
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	r := f.post("k", `{"n": 1}`)
	expect(t, r, 503, "claimed", "")
	settled(t, p)
	if r.body != "try again" || r.header.Get("Retry-After") != "1" {
		t.Errorf("the handler's answer is lost: %q %v", r.body, r.header)
	}
	if f.lookup("k") != "" || f.writes("k") != 0 {
		t.Errorf("after a 503: idem_lookup %q, %d rows", f.lookup("k"), f.writes("k"))
	}
	expect(t, f.post("k", `{"n": 2}`), 201, "claimed", "") // free, even for another body
	settled(t, p)
	if f.writes("k") != 1 {
		t.Errorf("%d rows", f.writes("k"))
	}
}

// A COMMIT that fails (here a deferred unique check) answers 503 commit-failed with Retry-After 1: nothing is
// stored, the handler's write is gone, the key is free.
func TestTxCommitFails(t *testing.T) {
	var calls int32
	f, p := txFixture(t, 1, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		write(t, r, "doomed")
		if atomic.AddInt32(&calls, 1) == 1 {
			scope := FromContext(r.Context()).Scope
			if _, err := Tx(r.Context()).Exec(r.Context(), `INSERT INTO idemhttp_test_guard VALUES ($1), ($1)`, scope); err != nil {
				t.Errorf("the deferred check failed early: %v", err)
			}
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "paid")
	}))
	r := f.post("k", "{}")
	expect(t, r, 503, "claimed", "commit-failed")
	settled(t, p)
	if r.header.Get("Retry-After") != "1" || !f.log.has("23505") {
		t.Errorf("Retry-After %q, log %v", r.header.Get("Retry-After"), f.log.lines)
	}
	if f.lookup("k") != "" || f.writes("k") != 0 {
		t.Errorf("after a failed commit: idem_lookup %q, %d rows", f.lookup("k"), f.writes("k"))
	}
	r = f.post("k", "{}")
	expect(t, r, 201, "claimed", "")
	settled(t, p)
	if r.body != "paid" || f.writes("k") != 1 {
		t.Errorf("retry: %q, %d rows", r.body, f.writes("k"))
	}
}

// LeaveUnsettled commits the handler's write and the claim without an answer: the key stays claimed until its
// lease ends, and the next request then runs recovered (and sees the write).
func TestTxUnsettled(t *testing.T) {
	var calls int32
	f, p := txFixture(t, 1, Options{Lease: time.Second}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := FromContext(r.Context())
		if atomic.AddInt32(&calls, 1) == 1 {
			write(t, r, "maybe")
			a.LeaveUnsettled()
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, "maybe charged")
			return
		}
		var seen int
		if err := Tx(r.Context()).QueryRow(r.Context(), `SELECT count(*) FROM idemhttp_test_writes WHERE scope = $1 AND key = $2`,
			a.Scope, a.Key).Scan(&seen); err != nil || seen != 1 || !a.Recovered() {
			t.Errorf("the recovered attempt: %v, saw %d rows, outcome %q", err, seen, a.Outcome)
		}
		w.WriteHeader(http.StatusCreated)
	}))
	r := f.post("k", "{}")
	expect(t, r, 502, "claimed", "")
	settled(t, p)
	if r.body != "maybe charged" || f.lookup("k") != "in_progress" || f.writes("k") != 1 {
		t.Errorf("unsettled: %q, idem_lookup %q, %d rows", r.body, f.lookup("k"), f.writes("k"))
	}
	expect(t, f.post("k", "{}"), 409, "in_progress", "request-in-progress")
	time.Sleep(1200 * time.Millisecond) // past the lease
	expect(t, f.post("k", "{}"), 201, "recovered", "")
	expect(t, f.post("k", "{}"), 201, "replay", "")
	settled(t, p)
}

// A duplicate while the first request's transaction is open: 409 at once (its claim cannot be seen, so
// Retry-After is 1), or, with Wait, the first one's answer once it commits.
func TestTxInProgress(t *testing.T) {
	for _, wait := range []time.Duration{0, 5 * time.Second} {
		t.Run(fmt.Sprintf("wait %v", wait), func(t *testing.T) {
			started, finish := make(chan struct{}), make(chan struct{})
			f, p := txFixture(t, 2, Options{Lease: time.Minute, Wait: wait}, http.HandlerFunc(
				func(w http.ResponseWriter, r *http.Request) {
					write(t, r, "first")
					close(started)
					<-finish
					w.WriteHeader(http.StatusAccepted)
					io.WriteString(w, "done")
				}))
			firstDone := make(chan reply)
			go func() { firstDone <- f.post("k", "{}") }()
			<-started
			if wait == 0 {
				start := time.Now()
				r := f.post("k", "{}")
				expect(t, r, 409, "in_progress", "request-in-progress")
				if took := time.Since(start); r.header.Get("Retry-After") != "1" || took > 2*time.Second {
					t.Errorf("Retry-After %q after %v: want 1, at once", r.header.Get("Retry-After"), took)
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
			settled(t, p)
			if f.writes("k") != 1 {
				t.Errorf("%d rows", f.writes("k"))
			}
		})
	}
}

// failingTxDB begins real transactions on p, whose statements fail when their SQL contains failOn; with
// failBegin, BEGIN itself fails.
type failingTxDB struct {
	p         *pgxpool.Pool
	failOn    string
	failBegin bool
}

func (d failingTxDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return d.p.QueryRow(ctx, sql, args...)
}

func (d failingTxDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return d.p.Exec(ctx, sql, args...)
}

func (d failingTxDB) Begin(ctx context.Context) (pgx.Tx, error) {
	if d.failBegin {
		return nil, errGone
	}
	tx, err := d.p.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return failingTx{tx, d.failOn}, nil
}

type failingTx struct {
	pgx.Tx
	failOn string
}

func (tx failingTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if strings.Contains(sql, tx.failOn) {
		return errRow{errGone}
	}
	return tx.Tx.QueryRow(ctx, sql, args...)
}

func (tx failingTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if strings.Contains(sql, tx.failOn) {
		return pgconn.CommandTag{}, errGone
	}
	return tx.Tx.Exec(ctx, sql, args...)
}

// No BEGIN, or a claim that fails in the transaction: 503 store-unavailable, the handler not called, the
// connection back in the pool. A finish that fails: 500 store-failed, and (unlike the default mode, where the
// key stays claimed) nothing kept: no write, the key free.
func TestTxStoreFailures(t *testing.T) {
	var calls int32
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		atomic.AddInt32(&calls, 1)
		write(t, r, "unstored")
		w.WriteHeader(http.StatusCreated)
	})
	p := smallPool(t, 1)
	for _, db := range []failingTxDB{{p: p, failBegin: true}, {p: p, failOn: "idem_claim"}} {
		f := newFixtureOn(t, db, Options{Transactional: true}, handler)
		for _, body := range []string{"{}", "not JSON"} {
			r := f.post("k", body)
			expect(t, r, 503, "", "store-unavailable")
			settled(t, p)
			if r.header.Get("Retry-After") != "1" || !f.log.has("simulated") {
				t.Errorf("Retry-After %q, log %v", r.header.Get("Retry-After"), f.log.lines)
			}
		}
	}
	if calls != 0 {
		t.Errorf("the handler ran %d times", calls)
	}

	f := newFixtureOn(t, failingTxDB{p: p, failOn: "idem_finish"}, Options{Transactional: true}, handler)
	expect(t, f.post("k", "{}"), 500, "claimed", "store-failed")
	settled(t, p)
	if f.lookup("k") != "" || f.writes("k") != 0 {
		t.Errorf("after store-failed: idem_lookup %q, %d rows", f.lookup("k"), f.writes("k"))
	}
}

// The connection dies under the handler (here its backend is terminated): the finish fails, so does ROLLBACK,
// and that connection is destroyed, not returned to the pool; the next request gets a new one.
func TestTxConnectionLost(t *testing.T) {
	var calls int32
	f, p := txFixture(t, 1, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		write(t, r, "lost")
		if atomic.AddInt32(&calls, 1) == 1 {
			var pid int32
			tx := Tx(r.Context())
			if err := tx.QueryRow(r.Context(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				t.Error(err)
			}
			var done bool
			if err := pool.QueryRow(r.Context(), `SELECT pg_terminate_backend($1, 5000)`, pid).Scan(&done); err != nil || !done {
				t.Errorf("pg_terminate_backend: %v %v", done, err)
			}
		}
		w.WriteHeader(http.StatusCreated)
	}))
	expect(t, f.post("k", "{}"), 500, "claimed", "store-failed")
	settled(t, p)
	if f.lookup("k") != "" || f.writes("k") != 0 || !f.log.has("ROLLBACK") {
		t.Errorf("idem_lookup %q, %d rows, log %v", f.lookup("k"), f.writes("k"), f.log.lines)
	}
	expect(t, f.post("k", "{}"), 201, "claimed", "")
	settled(t, p)
	if f.writes("k") != 1 || p.Stat().TotalConns() != 1 {
		t.Errorf("%d rows, %d connections", f.writes("k"), p.Stat().TotalConns())
	}
}

// With Wait, a duplicate whose first request rolls back (a retryable status) wins the key and runs.
func TestTxWaitThenRollback(t *testing.T) {
	var calls int32
	started, finish := make(chan struct{}), make(chan struct{})
	f, p := txFixture(t, 2, Options{Wait: 5 * time.Second}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		write(t, r, "attempt")
		if atomic.AddInt32(&calls, 1) == 1 {
			close(started)
			<-finish
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	firstDone := make(chan reply)
	go func() { firstDone <- f.post("k", "{}") }()
	<-started
	time.AfterFunc(300*time.Millisecond, func() { close(finish) })
	expect(t, f.post("k", "{}"), 201, "claimed", "")
	expect(t, <-firstDone, 503, "claimed", "")
	settled(t, p)
	if f.writes("k") != 1 {
		t.Errorf("%d rows, want the second attempt's only", f.writes("k"))
	}
}

// The transaction is the handler's until it returns. A goroutine that outlives it and then uses the Tx, or a
// savepoint begun on it, gets ErrTxEnded: by then the connection is back in the pool, where a statement would run
// in another request's transaction, or commit on its own; before the COMMIT it would run inside the transaction the
// middleware is ending (pgx refuses a statement only once its transaction has ended).
func TestTxEndedAfterHandler(t *testing.T) {
	late := make(chan struct{})
	type use struct {
		what string
		err  error
	}
	uses := make(chan use, 4)
	f, p := txFixture(t, 1, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, a, tx := r.Context(), FromContext(r.Context()), Tx(r.Context())
		write(t, r, "paid")
		savepoint, err := tx.Begin(ctx) // left open: it commits with the transaction
		if err != nil {
			t.Error(err)
			return
		}
		go func() {
			<-late
			insert := `INSERT INTO idemhttp_test_writes VALUES ($1, $2, 'late')`
			_, err := tx.Exec(ctx, insert, a.Scope, a.Key)
			uses <- use{"Exec", err}
			_, err = savepoint.Exec(ctx, insert, a.Scope, a.Key)
			uses <- use{"the savepoint's Exec", err}
			uses <- use{"QueryRow", tx.QueryRow(ctx, `SELECT 1`).Scan(new(int))}
			if tx.Conn() != nil {
				uses <- use{"Conn", errors.New("the connection, still handed out")}
			} else {
				uses <- use{"Conn", ErrTxEnded}
			}
		}()
		w.WriteHeader(http.StatusCreated)
	}))
	expect(t, f.post("k", "{}"), 201, "claimed", "")
	settled(t, p)
	close(late)
	for i := 0; i < 4; i++ {
		if u := <-uses; !errors.Is(u.err, ErrTxEnded) {
			t.Errorf("%s after the handler returned: %v, want ErrTxEnded", u.what, u.err)
		}
	}
	if n := f.writes("k"); n != 1 {
		t.Errorf("%d rows, want the handler's one", n)
	}
}
