// Command payments is a small payment API on idem_keys: POST /payments charges a card at most once per
// Idempotency-Key, however often the client retries and even if this process dies half-way.
//
// Settings come from the environment: LISTEN_ADDR, DATABASE_URL, PROVIDER_URL, IDEM_LEASE (a PostgreSQL interval),
// IDEM_RECONCILE_EVERY (seconds, 0 = off) and IDEM_TEST_HOOKS=1 (crash hooks for the e2e harness).
package main

import (
	"context"
	"log"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v4/pgxpool"
)

func main() {
	pool, err := pgxpool.Connect(context.Background(), env("DATABASE_URL", "postgres://postgres@127.0.0.1:25329/postgres"))
	if err != nil {
		log.Fatalf("connect: %v", err)
	}
	defer pool.Close()

	store := &Store{pool: pool, scope: "payments", lease: env("IDEM_LEASE", "30s")}
	provider := &Provider{baseURL: env("PROVIDER_URL", "http://127.0.0.1:8090"), client: &http.Client{Timeout: 10 * time.Second}}
	testHooks := os.Getenv("IDEM_TEST_HOOKS") == "1"

	mux := http.NewServeMux()
	mux.Handle("/payments", postOnly(Idempotency(store, &Payments{provider: provider, testHooks: testHooks})))

	every, err := strconv.ParseFloat(env("IDEM_RECONCILE_EVERY", "30"), 64)
	if err != nil {
		log.Fatalf("IDEM_RECONCILE_EVERY: %v", err)
	}
	if every > 0 {
		go reconcileLoop(store, provider, time.Duration(every*float64(time.Second)))
	}

	addr := env("LISTEN_ADDR", "127.0.0.1:8081")
	log.Printf("payments (go) listening on %s", addr)
	server := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second} // no slowloris
	log.Fatal(server.ListenAndServe())
}

func postOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeJSON(w, http.StatusMethodNotAllowed, errorBody("method not allowed"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
