// Command app is the HTTP suite's sample payments app on idemhttp (tests/http/README.md): POST /payments behind
// the middleware, GET /payments/<id> beside it, a stand-in authentication in front of both.
//
// Environment: DATABASE_URL, LISTEN_ADDR (127.0.0.1:PORT), IDEM_LEASE (a PostgreSQL interval, default 30s),
// IDEM_WAIT (an interval, default none), IDEM_OFF=1 (no middleware at all: the benchmark's baseline), IDEM_TX=1
// (the middleware's transactional mode: the handler's SQL runs in the key's own transaction).
package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/idem-keys/idemhttp"
	"github.com/jackc/pgx/v4/pgxpool"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool, err := pgxpool.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatalf("connect: %v", err)
	}
	defer pool.Close()
	if err := createTable(ctx, pool); err != nil {
		log.Fatalf("payments table: %v", err)
	}

	payments := &payments{pool: pool}
	var create http.Handler = http.HandlerFunc(payments.create)
	if os.Getenv("IDEM_OFF") != "1" {
		lease, err := duration(ctx, pool, env("IDEM_LEASE", "30s"))
		if err != nil {
			log.Fatalf("IDEM_LEASE: %v", err)
		}
		wait, err := duration(ctx, pool, env("IDEM_WAIT", "0"))
		if err != nil {
			log.Fatalf("IDEM_WAIT: %v", err)
		}
		idempotency, err := idemhttp.New(pool, idemhttp.Options{
			Scope:         func(r *http.Request) string { return tenantOf(r.Context()) },
			Lease:         lease,
			Wait:          wait,
			OutcomeHeader: "Idempotency-Outcome",
			Transactional: os.Getenv("IDEM_TX") == "1",
		})
		if err != nil {
			log.Fatal(err)
		}
		// Both routes go through the middleware, which lets the GET pass untouched.
		create = idempotency(create)
		payments.show = idempotency(http.HandlerFunc(payments.read))
	} else {
		payments.show = http.HandlerFunc(payments.read)
	}

	mux := http.NewServeMux()
	mux.Handle("/payments", create)
	mux.Handle("/payments/", payments.show)
	addr := env("LISTEN_ADDR", "127.0.0.1:8080")
	server := &http.Server{Addr: addr, Handler: recovering(authenticate(mux)), ReadHeaderTimeout: 5 * time.Second}
	mode := ""
	if os.Getenv("IDEM_OFF") == "1" {
		mode = ", IDEM_OFF"
	} else if os.Getenv("IDEM_TX") == "1" {
		mode = ", transactional"
	}
	log.Printf("sample app (go, idemhttp %s%s) listening on %s", idemhttp.Version, mode, addr)
	log.Fatal(server.ListenAndServe())
}

// createTable creates the payments table if it is missing, and commit_guard, whose unique check is deferred to
// COMMIT (cus_commit_fails inserts one row twice to make a COMMIT fail). CREATE TABLE IF NOT EXISTS alone is not
// race-safe (two apps starting together can both try and one fails on the catalog's unique index), so it runs
// under a transaction-level advisory lock.
func createTable(ctx context.Context, pool *pgxpool.Pool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) // a no-op after Commit
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('idem_keys sample app: payments table'))`); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS payments (
	    id bigserial PRIMARY KEY, tenant text NOT NULL, idempotency_key text, amount bigint NOT NULL,
	    currency text NOT NULL, customer_id text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS commit_guard (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// duration reads a PostgreSQL interval ("30s", "1 minute") the way the server would, so the app takes the same
// values as the other two apps.
func duration(ctx context.Context, pool *pgxpool.Pool, interval string) (time.Duration, error) {
	var seconds float64
	if err := pool.QueryRow(ctx, `SELECT extract(epoch FROM $1::interval)::float8`, interval).Scan(&seconds); err != nil {
		return 0, err
	}
	if seconds < 0 {
		return 0, fmt.Errorf("%q is negative", interval)
	}
	return time.Duration(seconds * float64(time.Second)), nil
}

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
