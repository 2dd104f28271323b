package main

import (
	"context"
	"encoding/json"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// reconcile settles every key whose owner died without finishing: if the provider holds a charge under the key,
// the key is finished with the answer the owner would have given; if not, nothing was charged and the key is
// released for the client's retry. It runs with the dead owner's token, so a retry that recovers the key at the
// same moment wins and our finish is refused (55000), which is fine.
//
// Releasing is safe even if the "dead" owner was only slow and charges after we looked: its finish is then
// refused, its client retries, and the provider, idempotent by reference, returns that same charge.
//
// The middleware has no part in this: the reconciler is the application's, because only the application can
// ask its provider what happened. It calls the SQL API directly, with bind parameters only.
func reconcile(ctx context.Context, pool *pgxpool.Pool, provider *Provider) (finished, released int) {
	stale, err := staleClaims(ctx, pool)
	if err != nil {
		log.Printf("reconcile: idem_stale: %v", err)
		return 0, 0
	}
	for _, s := range stale {
		ch, err := provider.Lookup(ctx, s.key)
		if err != nil {
			log.Printf("reconcile %q: %v (next pass)", s.key, err)
			continue
		}
		if ch == nil {
			var ok bool
			if err := pool.QueryRow(ctx, `SELECT idem_release($1, $2, $3)`, scope, s.key, s.token).Scan(&ok); err != nil {
				log.Printf("reconcile %q: idem_release: %v", s.key, err)
			} else if ok {
				released++
			}
			continue
		}
		status, headers, body := paymentAnswer(ch)
		headersJSON, _ := json.Marshal(headers)
		// bytea, as the middleware stores it: a replay repeats the body byte for byte.
		if _, err := pool.Exec(ctx, `SELECT idem_finish($1, $2, $3, $4, $5::bytea, headers => $6::jsonb)`,
			scope, s.key, s.token, status, body, string(headersJSON)); err != nil {
			log.Printf("reconcile %q: idem_finish: %v", s.key, err)
			continue
		}
		finished++
	}
	return finished, released
}

// staleClaim is an unfinished key whose owner's lease ran out: its owner most likely died.
type staleClaim struct {
	key   string
	token int64
}

func staleClaims(ctx context.Context, pool *pgxpool.Pool) ([]staleClaim, error) {
	rows, err := pool.Query(ctx, `SELECT key, token FROM idem_stale() WHERE scope = $1`, scope)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var stale []staleClaim
	for rows.Next() {
		var c staleClaim
		if err := rows.Scan(&c.key, &c.token); err != nil {
			return nil, err
		}
		stale = append(stale, c)
	}
	return stale, rows.Err()
}

func reconcileLoop(pool *pgxpool.Pool, provider *Provider, every time.Duration) {
	for range time.Tick(every) {
		ctx, cancel := context.WithTimeout(context.Background(), every)
		if finished, released := reconcile(ctx, pool, provider); finished+released > 0 {
			log.Printf("reconcile: %d finished, %d released", finished, released)
		}
		cancel()
	}
}
