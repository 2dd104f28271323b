package idemhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is the part of a pgx v5 connection pool the middleware uses; *pgxpool.Pool satisfies it. Give it a pool,
// not a transaction: by default the claim must commit on its own before the handler runs, so that a duplicate
// sees it; in the transactional mode the middleware begins its transactions on the pool itself.
type DB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// TxDB is a DB that can begin a transaction on a connection of its own: what Options.Transactional needs, and
// *pgxpool.Pool is one. The middleware ends each transaction it begins, once, with Commit or Rollback, and
// relies on them to give the connection back: pgxpool returns it to the pool only when it is idle, and pgx
// closes a connection whose ROLLBACK failed, so none goes back in a transaction.
type TxDB interface {
	DB
	Begin(ctx context.Context) (pgx.Tx, error)
}

// claim is the part of idem_result the middleware reads.
type claim struct {
	outcome    string
	token      int64
	status     int
	body       []byte // response_bytes: the body exactly as first sent
	headers    map[string]string
	retryAfter int
}

// The SQL every middleware sends, as contract/sql.json has it (contract_test.go compares them). Fields by name,
// never r.*: a newer idem_result may grow columns. Every value is a bind parameter; a duration is seconds as a
// float8, or NULL for the server's setting, made an interval by make_interval.
const (
	claimJSONSQL = `SELECT r.outcome, r.token, r.status_code, r.response_bytes, r.headers, r.retry_after
	  FROM idem_claim($1, $2, jsonb_build_object('method', $3::text, 'target', $4::text, 'body', $5::jsonb),
	                  lease => make_interval(secs => $6::float8), wait => make_interval(secs => $7::float8)) AS r`
	claimBytesSQL = `SELECT r.outcome, r.token, r.status_code, r.response_bytes, r.headers, r.retry_after
	  FROM idem_claim($1, $2, $3::bytea, lease => make_interval(secs => $4::float8),
	                  wait => make_interval(secs => $5::float8)) AS r`
	finishSQL = `SELECT idem_finish($1, $2, $3::bigint, $4::integer, $5::bytea, headers => $6::jsonb,
	                                retention => make_interval(secs => $7::float8))`
	releaseSQL = `SELECT idem_release($1, $2, $3::bigint) AS released`
)

// request is what the fingerprint covers: method, target (path and query as sent) and body.
type request struct {
	method, target string
	body           []byte
	json           bool // Content-Type application/json or application/*+json
}

// claimKey runs idem_claim. A JSON body is fingerprinted by its canonical JSON, so key order, spacing and 1.0
// against 1 do not make another request; a body PostgreSQL cannot read as jsonb (bad JSON 22P02, \u0000
// 22P05) and every other body counts by its bytes. An empty body, invalid UTF-8 or a NUL byte cannot be jsonb
// text at all, so they go to the bytes form without the round trip that would only fail.
//
// When the JSON form fails that way, reopen (when not nil) gives the DB for the bytes form: in the transactional
// mode the failed statement has aborted the transaction, so it takes a new one. It costs nothing on the common
// path, where a savepoint around every JSON claim would cost two round trips.
func claimKey(ctx context.Context, db DB, c *config, scope, key string, req request, reopen func() (DB, error)) (*claim, error) {
	if req.json && jsonText(req.body) {
		row := db.QueryRow(ctx, claimJSONSQL, scope, key, req.method, req.target, string(req.body),
			seconds(c.lease), seconds(c.wait))
		cl, err := scanClaim(row)
		if code := sqlState(err); code != "22P02" && code != "22P05" && code != "22021" {
			return cl, err
		}
		if reopen != nil {
			if db, err = reopen(); err != nil {
				return nil, err
			}
		}
	}
	fingerprint := make([]byte, 0, len(req.method)+len(req.target)+2+len(req.body))
	fingerprint = append(append(append(append(fingerprint, req.method...), ' '), req.target...), '\n')
	fingerprint = append(fingerprint, req.body...)
	row := db.QueryRow(ctx, claimBytesSQL, scope, key, fingerprint, seconds(c.lease), seconds(c.wait))
	return scanClaim(row)
}

func scanClaim(row pgx.Row) (*claim, error) {
	var (
		cl                 claim
		token              *int64
		status, retryAfter *int32
		headers            []byte
	)
	if err := row.Scan(&cl.outcome, &token, &status, &cl.body, &headers, &retryAfter); err != nil {
		return nil, err
	}
	if token != nil {
		cl.token = *token
	}
	if status != nil {
		cl.status = int(*status)
	}
	if retryAfter != nil {
		cl.retryAfter = int(*retryAfter)
	}
	if headers != nil {
		var err error
		if cl.headers, err = decodeHeaders(headers); err != nil {
			return nil, err
		}
	}
	return &cl, nil
}

// decodeHeaders reads the stored headers object. Values are strings when this package stored them; another
// writer (a reconciler in SQL) may have stored numbers, which are repeated as their JSON text.
func decodeHeaders(raw []byte) (map[string]string, error) {
	var values map[string]json.RawMessage
	if err := json.Unmarshal(raw, &values); err != nil {
		return nil, fmt.Errorf("stored headers: %w", err)
	}
	headers := make(map[string]string, len(values))
	for name, value := range values {
		var s string
		if json.Unmarshal(value, &s) != nil {
			s = string(value)
		}
		headers[name] = s
	}
	return headers, nil
}

// finishKey stores the answer with idem_finish: the bytea overload, so a replay repeats the body byte for byte
// (jsonb would reorder and respace it); an empty body is stored as NULL.
func finishKey(ctx context.Context, db DB, c *config, a *Attempt, status int, body []byte, headers map[string]string) error {
	headersJSON, err := json.Marshal(headers)
	if err != nil {
		return err
	}
	if len(body) == 0 {
		body = nil
	}
	_, err = db.Exec(ctx, finishSQL, a.Scope, a.Key, a.Token, int32(status), body, string(headersJSON),
		seconds(c.retention))
	return err
}

// releaseKey gives the key back with idem_release; false means the token no longer owned it.
func releaseKey(ctx context.Context, db DB, a *Attempt) (bool, error) {
	var released bool
	err := db.QueryRow(ctx, releaseSQL, a.Scope, a.Key, a.Token).Scan(&released)
	return released, err
}

// seconds is a duration as the float8 seconds of the SQL's make_interval, or NULL (the server's setting; no
// wait) for 0. A float64 is sent as a number under every protocol, the simple one (some poolers) included.
func seconds(d time.Duration) any {
	if d == 0 {
		return nil
	}
	return d.Seconds()
}

// sqlState is the SQLSTATE of a PostgreSQL error, or "" for any other error.
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// jsonText tells whether a body could be jsonb text: not empty, valid UTF-8 and without a NUL byte (which no
// PostgreSQL text holds). The five middlewares apply the same test.
func jsonText(body []byte) bool {
	return len(body) > 0 && utf8.Valid(body) && bytes.IndexByte(body, 0) < 0
}
