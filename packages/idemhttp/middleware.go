package idemhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// New returns the middleware: wrap a handler with it, after authentication (Options.Scope reads the
// authenticated request). db is a pgx v5 pool (*pgxpool.Pool) on a database where idem_keys is installed.
// It fails only on a nil db or bad options (no Scope, a negative duration, a retryable status that is no
// HTTP status, Transactional with a db that cannot begin a transaction).
func New(db DB, opts Options) (func(http.Handler) http.Handler, error) {
	if db == nil {
		return nil, errors.New("idemhttp: a database pool is required")
	}
	c, err := opts.config()
	if err != nil {
		return nil, err
	}
	var txdb TxDB
	if c.transactional {
		var ok bool
		if txdb, ok = db.(TxDB); !ok {
			return nil, fmt.Errorf("idemhttp: Options.Transactional needs a db with Begin(ctx) (pgx.Tx, error), "+
				"such as *pgxpool.Pool; %T has none", db)
		}
	}
	return func(next http.Handler) http.Handler {
		return &middleware{db: db, txdb: txdb, c: c, next: next}
	}, nil
}

type middleware struct {
	db   DB
	txdb TxDB // the same db, in the transactional mode; nil otherwise
	c    *config
	next http.Handler
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !m.c.methods[r.Method] {
		m.next.ServeHTTP(w, r)
		return
	}
	fields := r.Header.Values("Idempotency-Key")
	if len(fields) == 0 {
		if m.c.keyOptional {
			m.next.ServeHTTP(w, r)
		} else {
			writeProblem(w, "key-missing")
		}
		return
	}
	key, ok := parseKey(fields[0])
	if !ok || len(fields) > 1 {
		writeProblem(w, "key-malformed")
		return
	}
	scope := m.c.scope(r)
	if scope == "" {
		m.c.logger.Printf("idemhttp: %s %s: the scope function gave no scope; answered 500", r.Method, r.URL.Path)
		writeProblem(w, "scope-missing")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, m.c.maxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeProblem(w, "body-too-large")
		} else {
			writeProblem(w, "body-unreadable")
		}
		return
	}

	// Not r.Context(): a client hanging up must not cancel the claim (its retry would then find the key
	// claimed by nobody until the lease ends) nor, below, the finish that stores the answer it will retry for.
	// The same holds for the transactional mode's BEGIN, whose connection stays with the request until the end.
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout+m.c.wait)
	req := request{
		method: r.Method, target: target(r), body: body,
		json: isJSON(r.Header.Get("Content-Type")) && uncompressed(r.Header.Get("Content-Encoding")),
	}
	var (
		tx pgx.Tx // the transactional mode's, open until run ends it or the outcome needs no handler
		cl *claim
	)
	if m.txdb != nil {
		tx, cl, err = m.beginClaim(ctx, scope, key, req)
	} else {
		cl, err = claimKey(ctx, m.db, m.c, scope, key, req, nil)
	}
	cancel()
	if err != nil {
		m.c.logger.Printf("idemhttp: idem_claim(%q, %q): %v; answered 503", scope, key, err)
		writeProblem(w, "store-unavailable")
		return
	}
	if tx != nil && cl.outcome != "claimed" && cl.outcome != "recovered" {
		m.rollback(tx, scope, key, "outcome "+cl.outcome) // nothing was written: the handler does not run
	}
	if m.c.outcomeHeader != "" {
		w.Header().Set(m.c.outcomeHeader, cl.outcome)
	}
	switch cl.outcome {
	case "claimed", "recovered":
		a := &Attempt{Scope: scope, Key: key, Outcome: cl.outcome, Token: cl.token}
		if tx != nil {
			a.Tx = handlerTx{tx: tx, ended: &a.txEnded}
		}
		m.run(w, r, body, a, tx)
	case "replay":
		if cl.status < 100 || cl.status > 599 { // idem_finish refuses such a status: not ours to guess at
			m.c.logger.Printf("idemhttp: idem_claim(%q, %q): replay without a status; answered 503", scope, key)
			writeProblem(w, "store-unavailable")
			return
		}
		replay(w, cl)
	case "in_progress":
		writeInProgress(w, cl.retryAfter)
	case "mismatch":
		writeProblem(w, "key-reused")
	default:
		m.c.logger.Printf("idemhttp: idem_claim(%q, %q): unknown outcome %q; answered 503", scope, key, cl.outcome)
		writeProblem(w, "store-unavailable")
	}
}

// run calls the handler for a claimed key, then stores its answer, releases the key or leaves it, and only
// then sends the answer. tx is the request's transaction in the transactional mode (nil otherwise): run ends
// it, whatever happens.
func (m *middleware) run(w http.ResponseWriter, r *http.Request, body []byte, a *Attempt, tx pgx.Tx) {
	rec := newRecorder()
	returned := false
	defer func() {
		a.txEnded.Store(true) // the transaction is the handler's no more, whether it returned or panicked
		if returned {
			return
		}
		// The handler panicked (http.ErrAbortHandler included) or called runtime.Goexit: nothing happened
		// that a retry should not redo, as far as we can tell, so the key goes back. No recover(): the panic
		// goes on to net/http, or to the application's own recovery middleware, with its stack intact.
		switch {
		case a.unsettled.Load() && tx != nil:
			// A handler that said "maybe" and then panicked still meant it: its writes and the claim commit.
			m.commit(tx, a, "LeaveUnsettled and a panic")
		case a.unsettled.Load():
		case tx != nil:
			m.rollback(tx, a.Scope, a.Key, "the handler panicked") // its writes and the claim vanish
		default:
			m.release(a, "the handler panicked")
		}
	}()
	inner := r.WithContext(context.WithValue(detached{r.Context()}, attemptKey{}, a))
	inner.Body = io.NopCloser(bytes.NewReader(body)) // read once for the fingerprint, whole again for the handler
	m.next.ServeHTTP(rec, inner)
	returned = true
	a.txEnded.Store(true)

	status, header := rec.result()
	switch {
	case a.unsettled.Load():
		// Outcome unknown: the claim runs out its lease, and the next request recovers the key and reconciles.
		// In the transactional mode it commits first, with the handler's writes.
		if tx != nil && !m.commitOrAnswer(w, tx, a, "LeaveUnsettled (answer "+strconv.Itoa(status)+")") {
			return
		}
	case m.c.retryable[status]:
		if tx != nil {
			m.rollback(tx, a.Scope, a.Key, "retryable status "+strconv.Itoa(status))
		} else {
			m.release(a, "retryable status "+strconv.Itoa(status))
		}
	default:
		var db DB = m.db
		if tx != nil {
			db = tx
		}
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		err := finishKey(ctx, db, m.c, a, status, rec.body.Bytes(), storedHeaders(header, m.c.storedHeaders))
		cancel()
		if err != nil && tx != nil {
			// Nothing is kept, the handler's writes included, and the key is free again.
			m.rollback(tx, a.Scope, a.Key, "idem_finish failed")
		}
		if sqlState(err) == "55000" {
			// Another request took the key over after our lease ended: its answer is the one that counts.
			m.c.logger.Printf("idemhttp: idem_finish(%q, %q): %v: the lease was lost, this answer (%d) is not stored",
				a.Scope, a.Key, err, status)
			writeProblem(w, "lease-lost")
			return
		}
		if err != nil {
			// Left claimed (by default): after its lease the next request recovers the key and reconciles.
			m.c.logger.Printf("idemhttp: idem_finish(%q, %q): %v: this answer (%d) is not stored; answered 500",
				a.Scope, a.Key, err, status)
			writeProblem(w, "store-failed")
			return
		}
		// Only a committed answer reaches the client: a failed COMMIT (a serialization failure, a deferred
		// constraint) kept nothing, so the retry runs it all again; after one whose answer never came (the
		// connection lost), the retry finds out which.
		if tx != nil && !m.commitOrAnswer(w, tx, a, "idem_finish of answer "+strconv.Itoa(status)) {
			return
		}
	}
	for name, values := range header {
		if name != m.c.outcomeHeader { // set by ServeHTTP, from the claim
			w.Header()[name] = values
		}
	}
	w.WriteHeader(status)
	_, _ = w.Write(rec.body.Bytes()) // the client may be gone: the answer is stored for its retry
}

// release gives the key back; a failure is only logged, the lease ends it anyway.
func (m *middleware) release(a *Attempt, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if released, err := releaseKey(ctx, m.db, a); err != nil {
		m.c.logger.Printf("idemhttp: idem_release(%q, %q) (%s): %v", a.Scope, a.Key, why, err)
	} else if !released {
		m.c.logger.Printf("idemhttp: idem_release(%q, %q) (%s): the key was no longer ours", a.Scope, a.Key, why)
	}
}

// replay answers with the stored answer: its status, its stored headers, its body byte for byte.
func replay(w http.ResponseWriter, cl *claim) {
	h := w.Header()
	for name, value := range cl.headers {
		h.Set(name, value)
	}
	h.Set("Idempotent-Replayed", "true")
	w.WriteHeader(cl.status)
	_, _ = w.Write(cl.body)
}

// target is the request's path and query exactly as the client sent them, not decoded: the fingerprint must
// not make /a%2Fb and /a/b one request.
func target(r *http.Request) string {
	if strings.HasPrefix(r.RequestURI, "/") {
		return r.RequestURI
	}
	// An absolute-form target (a request to a proxy), or a request built in Go without RequestURI.
	return r.URL.RequestURI()
}

// uncompressed tells whether a Content-Encoding leaves the body as sent: none, or identity. A compressed JSON
// body counts by its bytes, in all five middlewares.
func uncompressed(contentEncoding string) bool {
	encoding := strings.ToLower(strings.TrimSpace(contentEncoding))
	return encoding == "" || encoding == "identity"
}

// isJSON tells whether a Content-Type is JSON: application/json or application/*+json, any parameters.
func isJSON(contentType string) bool {
	mediaType, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		mediaType = strings.ToLower(strings.TrimSpace(strings.SplitN(contentType, ";", 2)[0]))
	}
	return mediaType == "application/json" ||
		(strings.HasPrefix(mediaType, "application/") && strings.HasSuffix(mediaType, "+json"))
}
