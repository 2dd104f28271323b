// Command payments is a small payment API on idem_keys: POST /payments charges a card at most once per
// Idempotency-Key, however often the client retries and even if this process dies half-way. The idempotency is
// the idemhttp middleware (packages/idemhttp); the charge, its reconciliation and the reconciler are here.
//
// Settings come from the environment: LISTEN_ADDR, DATABASE_URL, PROVIDER_URL, IDEM_LEASE (a PostgreSQL interval),
// IDEM_RECONCILE_EVERY (seconds, 0 = off) and IDEM_TEST_HOOKS=1 (crash hooks for the e2e harness).
package main

import (
	"context"
	"encoding/json"
	"log"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/idem-keys/idemhttp"
	"github.com/jackc/pgx/v5/pgxpool"
)

// scope is the one scope this demo claims in: it has a single tenant. A service with several returns the
// authenticated tenant from Options.Scope instead, so that one tenant's keys are never another's.
const scope = "payments"

func main() {
	pool, err := pgxpool.New(context.Background(), env("DATABASE_URL", "postgres://postgres@127.0.0.1:25329/postgres"))
	if err != nil {
		log.Fatalf("connect: %v", err)
	}
	defer pool.Close()
	// pgxpool.New connects lazily: a server that cannot be reached stops the service here, not at its first request.
	if err := pool.Ping(context.Background()); err != nil {
		log.Fatalf("connect: %v", err)
	}

	lease, err := interval(pool, env("IDEM_LEASE", "30s"))
	if err != nil {
		log.Fatalf("IDEM_LEASE: %v", err)
	}
	idempotency, err := idemhttp.New(pool, idemhttp.Options{
		Scope:         func(*http.Request) string { return scope },
		Lease:         lease,
		OutcomeHeader: "Idempotency-Outcome", // for people and the e2e harness
		// The defaults for the rest: POST and PATCH take keys, a key is required, 429 and 503 release it.
	})
	if err != nil {
		log.Fatal(err)
	}
	provider := &Provider{baseURL: env("PROVIDER_URL", "http://127.0.0.1:8090"), client: &http.Client{Timeout: 10 * time.Second}}
	testHooks := os.Getenv("IDEM_TEST_HOOKS") == "1"

	mux := http.NewServeMux()
	mux.Handle("/payments", postOnly(idempotency(&Payments{provider: provider, testHooks: testHooks})))

	every, err := strconv.ParseFloat(env("IDEM_RECONCILE_EVERY", "30"), 64)
	if err != nil {
		log.Fatalf("IDEM_RECONCILE_EVERY: %v", err)
	}
	if every > 0 {
		go reconcileLoop(pool, provider, time.Duration(every*float64(time.Second)))
	}

	addr := env("LISTEN_ADDR", "127.0.0.1:8081")
	log.Printf("payments (go) listening on %s", addr)
	server := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second} // no slowloris
	log.Fatal(server.ListenAndServe())
}

// interval reads a PostgreSQL interval ("30s", "1 minute") as the server does: IDEM_LEASE takes the same values
// in the three services.
func interval(pool *pgxpool.Pool, value string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var seconds float64
	err := pool.QueryRow(ctx, `SELECT extract(epoch FROM $1::interval)::float8`, value).Scan(&seconds)
	return time.Duration(seconds * float64(time.Second)), err
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

func errorBody(message string) map[string]string { return map[string]string{"error": message} }

func writeJSON(w http.ResponseWriter, status int, v interface{}) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
