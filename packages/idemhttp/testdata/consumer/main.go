// Command consumer is a program that uses idemhttp as a Go user's would; test.sh builds it in a throwaway module
// that requires github.com/idem-keys/idemhttp at one version, resolved from a module proxy. Run without arguments, it
// prints the version of idemhttp it was built with; with a database URL, it serves a payments route on :8080.
package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"runtime/debug"

	"github.com/idem-keys/idemhttp"
	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	if len(os.Args) < 2 {
		info, ok := debug.ReadBuildInfo()
		if !ok {
			log.Fatal("no build information")
		}
		for _, dep := range info.Deps {
			if dep.Path == "github.com/idem-keys/idemhttp" {
				fmt.Println(dep.Version)
				return
			}
		}
		log.Fatal("idemhttp is not among the dependencies")
	}
	pool, err := pgxpool.New(context.Background(), os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	idempotency, err := idemhttp.New(pool, idemhttp.Options{
		Scope:         func(*http.Request) string { return "consumer" },
		Transactional: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe(":8080", idempotency(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := idemhttp.Tx(r.Context()).Exec(r.Context(), `SELECT 1`); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))))
}
