// Command app is the HTTP suite's sample payments app on idemhttp (tests/http/README.md): POST /payments behind
// the middleware, GET /payments/<id> beside it, a stand-in authentication in front of both.
//
// Environment: DATABASE_URL, LISTEN_ADDR (127.0.0.1:PORT), IDEM_LEASE (seconds, default 30), IDEM_WAIT (seconds,
// default none), IDEM_OFF=1 (no middleware at all: the benchmark's baseline), IDEM_TX=1 (the middleware's
// transactional mode: the handler's SQL runs in the key's own transaction).
package main

import (
	"context"
	"fmt"
	"log"
	"math"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/idem-keys/idemhttp"
	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
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
		lease, err := seconds("IDEM_LEASE", env("IDEM_LEASE", "30"))
		if err != nil {
			log.Fatal(err)
		}
		wait, err := seconds("IDEM_WAIT", env("IDEM_WAIT", "0"))
		if err != nil {
			log.Fatal(err)
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
	log.Printf("sample app (go, idemhttp %s%s) listening on %s", idemhttpVersion(), mode, addr)
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

// seconds reads a number of seconds ("4", "0.5"); a trailing "s" ("4s") is taken too, for now, as the suite sent it.
func seconds(name, value string) (time.Duration, error) {
	n, err := strconv.ParseFloat(strings.TrimSuffix(value, "s"), 64)
	if err != nil || n < 0 || math.IsNaN(n) || n*float64(time.Second) > math.MaxInt64 {
		return 0, fmt.Errorf("%s=%q: want seconds, a number of 0 or more (4, 0.5)", name, value)
	}
	return time.Duration(n * float64(time.Second)), nil
}

// idemhttpVersion is the version of idemhttp this program was built with, from its build information.
func idemhttpVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/idem-keys/idemhttp" {
				return dep.Version
			}
		}
	}
	return "(unknown version)"
}

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
