package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4/pgxpool"
)

// Store is the idem_keys API seen from Go: one method per SQL function, bind parameters only.
type Store struct {
	pool  *pgxpool.Pool
	scope string // the tenant would go here; this demo has one
	lease string // a PostgreSQL interval, e.g. "30s"
}

// Claim is the part of idem_result this service reads.
type Claim struct {
	Outcome    string
	Token      int64
	StatusCode int
	Response   []byte // the body exactly as first sent (bytea: jsonb would reorder and respace it)
	Headers    map[string]string
	RetryAfter int
}

func (s *Store) Claim(ctx context.Context, key string, request []byte) (*Claim, error) {
	// Fields by name, never (r).*: a newer idem_result may grow columns.
	const sql = `SELECT (r).outcome, (r).token, (r).status_code, (r).response_bytes, (r).headers, (r).retry_after
	               FROM (SELECT idem_claim($1, $2, $3::jsonb, lease => $4::interval) AS r) s`
	var (
		c                      Claim
		token                  *int64
		status, retryAfter     *int32
		response, headersJSONB []byte
	)
	err := s.pool.QueryRow(ctx, sql, s.scope, key, string(request), s.lease).
		Scan(&c.Outcome, &token, &status, &response, &headersJSONB, &retryAfter)
	if err != nil {
		return nil, err
	}
	if token != nil {
		c.Token = *token
	}
	if status != nil {
		c.StatusCode = int(*status)
	}
	if retryAfter != nil {
		c.RetryAfter = int(*retryAfter)
	}
	c.Response = response
	if headersJSONB != nil {
		if err := json.Unmarshal(headersJSONB, &c.Headers); err != nil {
			return nil, err
		}
	}
	return &c, nil
}

func (s *Store) Finish(ctx context.Context, key string, token int64, status int, body []byte, headers map[string]string) error {
	headersJSON, err := json.Marshal(headers)
	if err != nil {
		return err
	}
	var response []byte // NULL for an empty body (204)
	if len(body) > 0 {
		response = body
	}
	// The bytea overload: a replay must repeat the body byte for byte (clients hash, sign or length-check it);
	// jsonb would store it reordered and respaced.
	_, err = s.pool.Exec(ctx, `SELECT idem_finish($1, $2, $3, $4, $5::bytea, headers => $6::jsonb)`,
		s.scope, key, token, status, response, string(headersJSON))
	return err
}

func (s *Store) Release(ctx context.Context, key string, token int64) (bool, error) {
	var released bool
	err := s.pool.QueryRow(ctx, `SELECT idem_release($1, $2, $3)`, s.scope, key, token).Scan(&released)
	return released, err
}

// StaleClaim is an unfinished key whose owner's lease ran out: its owner most likely died.
type StaleClaim struct {
	Key   string
	Token int64
}

func (s *Store) Stale(ctx context.Context) ([]StaleClaim, error) {
	rows, err := s.pool.Query(ctx, `SELECT key, token FROM idem_stale() WHERE scope = $1`, s.scope)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var stale []StaleClaim
	for rows.Next() {
		var c StaleClaim
		if err := rows.Scan(&c.Key, &c.Token); err != nil {
			return nil, err
		}
		stale = append(stale, c)
	}
	return stale, rows.Err()
}

type claimKey struct{}

// ClaimFrom tells the wrapped handler whether it is doing the work for the first time ("claimed") or taking over
// from a dead owner ("recovered", so it must reconcile before acting).
func ClaimFrom(ctx context.Context) *Claim {
	c, _ := ctx.Value(claimKey{}).(*Claim)
	return c
}

// Idempotency runs next at most once per Idempotency-Key and replays its answer to every retry.
//
// The contract with next: 400, 429 and 503 promise that nothing happened, so the key is released (a client may
// fix its request and reuse the key, as with Stripe); any other status below 500 is the final answer and is
// stored; any other 5xx means "outcome unknown", so the claim is left to run out its lease and the next retry
// recovers it and reconciles.
func Idempotency(store *Store, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			writeJSON(w, http.StatusBadRequest, errorBody("the Idempotency-Key header is required"))
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil || !json.Valid(body) {
			writeJSON(w, http.StatusBadRequest, errorBody("the body must be JSON"))
			return
		}
		// Not r.Context(): a client that hangs up must not cancel a charge half-way, or its retry would wait
		// for the lease instead of getting the answer.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()

		claim, err := store.Claim(ctx, key, body)
		if err != nil {
			log.Printf("idem_claim %q: %v", key, err)
			writeJSON(w, http.StatusInternalServerError, errorBody("internal error"))
			return
		}
		w.Header().Set("Idempotency-Outcome", claim.Outcome) // for people and the e2e harness
		switch claim.Outcome {
		case "replay":
			for name, value := range claim.Headers {
				w.Header().Set(name, value)
			}
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(claim.StatusCode)
			w.Write(claim.Response)
			return
		case "in_progress":
			w.Header().Set("Retry-After", strconv.Itoa(claim.RetryAfter))
			writeJSON(w, http.StatusConflict, errorBody("a request with this Idempotency-Key is in progress"))
			return
		case "mismatch":
			writeJSON(w, http.StatusUnprocessableEntity,
				errorBody("this Idempotency-Key was used with a different request"))
			return
		}

		rec := &recorder{header: http.Header{}, status: http.StatusOK}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(rec, r.WithContext(context.WithValue(ctx, claimKey{}, claim)))

		switch {
		case rec.status == http.StatusBadRequest || rec.status == http.StatusTooManyRequests ||
			rec.status == http.StatusServiceUnavailable:
			if _, err := store.Release(ctx, key, claim.Token); err != nil {
				log.Printf("idem_release %q: %v", key, err)
			}
		case rec.status >= 500:
			// Outcome unknown: keep the claim; after its lease a retry or the reconciler settles it.
		default:
			if err := store.Finish(ctx, key, claim.Token, rec.status, rec.body.Bytes(), rec.stored()); err != nil {
				log.Printf("idem_finish %q: %v", key, err)
				var pgErr *pgconn.PgError
				if errors.As(err, &pgErr) && pgErr.Code == "55000" {
					// We were presumed dead and another request took the key over: its answer is the one
					// that counts, so send the client back for it.
					w.Header().Set("Retry-After", "1")
					writeJSON(w, http.StatusConflict, errorBody("a request with this Idempotency-Key is in progress"))
					return
				}
				writeJSON(w, http.StatusInternalServerError, errorBody("internal error"))
				return
			}
		}
		rec.copyTo(w)
	})
}

// recorder holds the wrapped handler's answer until it is stored, so a client never sees an answer that a
// retry could not replay.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) WriteHeader(status int)      { r.status = status }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }

// stored is the headers a replay must repeat (one value each, which is all this service sets).
func (r *recorder) stored() map[string]string {
	headers := map[string]string{}
	for name := range r.header {
		headers[name] = r.header.Get(name)
	}
	return headers
}

func (r *recorder) copyTo(w http.ResponseWriter) {
	for name, values := range r.header {
		w.Header()[name] = values
	}
	w.WriteHeader(r.status)
	w.Write(r.body.Bytes())
}

func errorBody(message string) map[string]string { return map[string]string{"error": message} }

func writeJSON(w http.ResponseWriter, status int, v interface{}) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
