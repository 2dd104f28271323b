package idemhttp

// Connections that die under the middleware: a COMMIT whose answer never arrives (503 commit-unknown), one already
// lost before its COMMIT (503 commit-failed), and the pool's sessions terminated mid-run, as a PostgreSQL restart or a failover ends them, in both modes. The pools
// here carry an application_name of their own, and only their sessions are terminated.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

var doomedTable sync.Once

// namedPool is smallPool whose sessions carry an application_name of their own, returned with it.
func namedPool(t *testing.T, size int32) (*pgxpool.Pool, string) {
	t.Helper()
	smallPool(t, 1) // the tables
	doomedTable.Do(func() {
		// A row of idemhttp_test_doomed ends its session when its transaction commits: the COMMIT's answer is a FATAL
		// 57P01 and a closed connection, and nothing was committed.
		for _, ddl := range []string{
			`CREATE TABLE IF NOT EXISTS idemhttp_test_doomed (note text)`,
			`CREATE OR REPLACE FUNCTION idemhttp_test_doomed_die() RETURNS trigger LANGUAGE plpgsql AS $$
			  BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$`,
			`DO $$ BEGIN
			  IF NOT EXISTS (SELECT FROM pg_trigger WHERE tgname = 'idemhttp_test_doomed_at_commit') THEN
			    CREATE CONSTRAINT TRIGGER idemhttp_test_doomed_at_commit AFTER INSERT ON idemhttp_test_doomed
			      DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION idemhttp_test_doomed_die();
			  END IF; END $$`,
		} {
			if _, err := pool.Exec(context.Background(), ddl); err != nil {
				t.Fatal(err)
			}
		}
	})
	var random [6]byte
	rand.Read(random[:])
	name := "idemhttp-test-" + hex.EncodeToString(random[:])
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = size
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, name
}

// terminate ends every session named name, waiting for each; how many there were. Materialized: the name filter
// runs first, so no other session is ever signalled.
func terminate(t *testing.T, name string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `WITH named AS MATERIALIZED (
	    SELECT pid FROM pg_stat_activity WHERE application_name = $1)
	  SELECT count(*) FROM named WHERE pg_terminate_backend(pid, 5000)`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A COMMIT whose answer never comes (the session ends during it): 503 commit-unknown, Retry-After 1, logged as
// unknown; here nothing was committed, so the retry with the key runs afresh and writes one row; the dead
// connection was not pooled, and the next request works.
func TestTxCommitUnknown(t *testing.T) {
	p, _ := namedPool(t, 1)
	var calls int32
	f := newFixtureOn(t, p, Options{Transactional: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		write(t, r, "paid")
		if atomic.AddInt32(&calls, 1) == 1 {
			if _, err := Tx(r.Context()).Exec(r.Context(), `INSERT INTO idemhttp_test_doomed VALUES ('dies at COMMIT')`); err != nil {
				t.Error(err)
			}
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "paid")
	}))
	r := f.post("k", "{}")
	expect(t, r, 503, "claimed", "commit-unknown")
	settled(t, p)
	if r.body != string(problemBody("commit-unknown")) || r.header.Get("Retry-After") != "1" {
		t.Errorf("body %s, Retry-After %q", r.body, r.header.Get("Retry-After"))
	}
	if !f.log.has("the outcome is unknown") || !f.log.has("a retry with the same Idempotency-Key") {
		t.Errorf("log %v", f.log.lines)
	}
	if f.lookup("k") != "" || f.writes("k") != 0 {
		t.Errorf("after the session ended in COMMIT: idem_lookup %q, %d rows", f.lookup("k"), f.writes("k"))
	}
	expect(t, f.post("k", "{}"), 201, "claimed", "")
	settled(t, p)
	if f.writes("k") != 1 {
		t.Errorf("%d rows after the retry, want 1", f.writes("k"))
	}
	expect(t, f.post("k2", "{}"), 201, "claimed", "")
	settled(t, p)
}

// A connection already lost when the COMMIT is due (its session terminated while the handler held it, and seen
// closed): the server rolled the transaction back with the session, so the COMMIT is not sent and the answer is 503
// commit-failed, nothing committed, logged as such; the retry with the key runs afresh and writes one row. The
// handler leaves the key unsettled, so that the COMMIT comes with no idem_finish before it (a finish on the lost
// connection fails first: 500 store-failed, TestTxConnectionLost).
func TestTxConnectionLostBeforeCommit(t *testing.T) {
	p, name := namedPool(t, 1)
	var calls int32
	f := newFixtureOn(t, p, Options{Transactional: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		write(t, r, "paid")
		if atomic.AddInt32(&calls, 1) == 1 {
			if n := terminate(t, name); n != 1 {
				t.Errorf("%d sessions terminated, want the handler's", n)
			}
			// pgx reads the termination on the next statement, and closes the connection.
			if _, err := Tx(r.Context()).Exec(r.Context(), `SELECT 1`); err == nil || !Tx(r.Context()).Conn().IsClosed() {
				t.Errorf("after the session ended: %v, closed %v", err, Tx(r.Context()).Conn().IsClosed())
			}
			FromContext(r.Context()).LeaveUnsettled()
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "paid")
	}))
	r := f.post("k", "{}")
	expect(t, r, 503, "claimed", "commit-failed")
	settled(t, p)
	if r.body != string(problemBody("commit-failed")) || r.header.Get("Retry-After") != "1" {
		t.Errorf("body %s, Retry-After %q", r.body, r.header.Get("Retry-After"))
	}
	if !f.log.has("the connection was lost before the COMMIT: nothing was committed") {
		t.Errorf("log %v", f.log.lines)
	}
	if f.lookup("k") != "" || f.writes("k") != 0 {
		t.Errorf("after the connection was lost: idem_lookup %q, %d rows", f.lookup("k"), f.writes("k"))
	}
	expect(t, f.post("k", "{}"), 201, "claimed", "")
	settled(t, p)
	if f.writes("k") != 1 || p.Stat().TotalConns() != 1 {
		t.Errorf("%d rows after the retry, want 1; %d connections", f.writes("k"), p.Stat().TotalConns())
	}
}

// The pool's sessions terminated while a request is inside its handler (in the transactional mode holding its
// connection): a few answers fail while dead connections are found and dropped, then new keys get 201 again, each
// with one row; no dead connection stays in the pool.
func TestSessionsTerminated(t *testing.T) {
	for _, transactional := range []bool{false, true} {
		t.Run(fmt.Sprintf("transactional %v", transactional), func(t *testing.T) {
			p, name := namedPool(t, 2)
			entered, release := make(chan struct{}), make(chan struct{})
			f := newFixtureOn(t, p, Options{Transactional: transactional}, http.HandlerFunc(
				func(w http.ResponseWriter, r *http.Request) {
					ctx, a := r.Context(), FromContext(r.Context())
					if a.Key == "held" {
						close(entered)
						<-release
					}
					var db DB = p
					if tx := Tx(ctx); tx != nil {
						db = tx
					}
					if _, err := db.Exec(ctx, `INSERT INTO idemhttp_test_writes VALUES ($1, $2, 'paid')`, a.Scope, a.Key); err != nil {
						w.Header().Set("Retry-After", "1")
						w.WriteHeader(http.StatusServiceUnavailable) // releases the key, rolls back
						return
					}
					w.WriteHeader(http.StatusCreated)
				}))
			var warm sync.WaitGroup
			for _, key := range []string{"w1", "w2"} {
				warm.Add(1)
				go func(key string) {
					defer warm.Done()
					if r := f.post(key, "{}"); r.status != 201 {
						t.Errorf("%s: %d %s", key, r.status, r.body)
					}
				}(key)
			}
			warm.Wait()

			held := make(chan reply)
			go func() { held <- f.post("held", "{}") }()
			<-entered
			if n := terminate(t, name); n < 1 {
				t.Fatalf("%d sessions terminated", n)
			}
			close(release)
			// Default mode: its write may have reached a new connection, and its finish a dead one (500 store-failed).
			if r := <-held; (r.status != 201 && r.status != 500 && r.status != 503) || (r.status == 201 && f.writes("held") != 1) {
				t.Errorf("held: %d %s, %d rows", r.status, r.body, f.writes("held"))
			}

			var statuses []string
			for i := 0; i < 10 && !strings.HasSuffix(strings.Join(statuses, ","), "201,201,201"); i++ {
				key := fmt.Sprintf("after-%d", i)
				r := f.post(key, "{}")
				statuses = append(statuses, fmt.Sprint(r.status))
				if (r.status != 201 && r.status != 503) || (r.status == 201) != (f.writes(key) == 1) {
					t.Errorf("%s: %d %s, %d rows", key, r.status, r.body, f.writes(key))
				}
			}
			if !strings.HasSuffix(strings.Join(statuses, ","), "201,201,201") {
				t.Fatalf("answers after the sessions ended: %v", statuses)
			}
			settled(t, p)
		})
	}
}
