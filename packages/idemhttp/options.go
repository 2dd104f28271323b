package idemhttp

import (
	"errors"
	"fmt"
	"log"
	"net/http"
	"strings"
	"time"
)

// Options configures the middleware. Only Scope is required; the zero value of every other field means its
// default.
type Options struct {
	// Scope returns the scope of a request: whose keys these are, taken from its authentication (a tenant, an
	// account), never from a header the client sets. Keys of one scope are never another's. With tenant
	// binding on the server, return a scope that starts with the bound tenant ("acme:payments"). An empty
	// result answers 500 (scope-missing) without calling the handler. Required: there is no default, so no
	// application puts every tenant in one scope by accident.
	Scope func(*http.Request) string

	// Lease is how long a claim holds before another request may recover the key; make it longer than the
	// handler ever runs. 0: the server's idem_keys.lease (5 minutes unless configured).
	Lease time.Duration

	// Wait is how long a duplicate waits for the first attempt to end before it is answered 409. 0: no wait.
	Wait time.Duration

	// Retention is how long a finished answer is replayed. 0: the server's idem_keys.retention (24 hours
	// unless configured).
	Retention time.Duration

	// Methods are the methods that take keys; other requests pass to the handler untouched. nil: POST and
	// PATCH.
	Methods []string

	// KeyOptional lets a request without an Idempotency-Key through to the handler, without idempotency
	// (the "required: false" of the other packages). By default such a request gets 400 (key-missing).
	KeyOptional bool

	// RetryableStatuses are the handler's answers that release the key instead of storing it: the client may
	// retry with the same key, even with another body. nil: 429 and 503. An empty non-nil slice: none.
	RetryableStatuses []int

	// StoredHeaders are the response headers a replay repeats (case-insensitive); several values of one
	// header are stored joined with ", ", so do not list Set-Cookie. nil: Content-Type, Content-Language,
	// Content-Location, Location, ETag and Link. An empty non-nil slice: none.
	StoredHeaders []string

	// OutcomeHeader, when set, names a response header that carries the outcome of the claim (claimed,
	// recovered, replay, in_progress, mismatch), for people and tests. Empty: no such header.
	OutcomeHeader string

	// MaxBodyBytes bounds the request body the middleware reads into memory to fingerprint it; a larger body
	// gets 413 (body-too-large) before anything is claimed. 0: 1 MiB.
	MaxBodyBytes int64

	// Logger receives what goes wrong without reaching the client as such: store errors, fenced finishes, a
	// missing scope. nil: log.Default().
	Logger Logger

	// Transactional runs the claim, the handler's database work and the finish in one transaction on one
	// connection of the pool, committed once: the key and the work it guards commit together or not at all.
	// The handler does its SQL on Tx(r.Context()) (or Attempt.Tx) and must not commit or roll it back itself
	// (savepoints are fine). A panic or a retryable status rolls it all back; a COMMIT that fails, or is not sent
	// because the connection was lost before it, answers 503 commit-failed, and one whose answer never comes (or
	// is a PANIC) 503 commit-unknown. The DB must then also have Begin (a *pgxpool.Pool does): see TxDB. For some
	// routes only, wrap those with a middleware made with it.
	Transactional bool
}

// Logger is where the middleware logs; *log.Logger is one.
type Logger interface {
	Printf(format string, v ...any)
}

// defaultStoredHeaders is the allow-list of response headers a replay repeats when Options.StoredHeaders is
// nil. Nothing else of an answer is stored: no cookies, nothing of the request.
var defaultStoredHeaders = []string{"Content-Type", "Content-Language", "Content-Location", "Location", "ETag", "Link"}

// defaultMaxBodyBytes is MaxBodyBytes when it is 0: the body is held whole in memory for the fingerprint.
const defaultMaxBodyBytes = 1 << 20

// config is Options checked, with the defaults filled in and the lists turned into sets.
type config struct {
	scope                  func(*http.Request) string
	lease, wait, retention time.Duration
	methods                map[string]bool
	keyOptional            bool
	retryable              map[int]bool
	storedHeaders          map[string]string // canonical name -> the name as configured, which is stored
	outcomeHeader          string
	maxBodyBytes           int64
	logger                 Logger
	transactional          bool
}

// storeTimeout bounds each SQL call (the claim gets Wait on top): the calls run on their own context, not the
// request's, so that a client hanging up cannot cancel a claim or lose a finished answer, and this is what
// keeps them from hanging forever on a stuck database instead.
const storeTimeout = 10 * time.Second

func (o Options) config() (*config, error) {
	if o.Scope == nil {
		return nil, errors.New("idemhttp: Options.Scope is required: the scope of a request, from its authentication")
	}
	if o.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("idemhttp: Options.MaxBodyBytes is negative (%d): bytes, or 0 for 1 MiB", o.MaxBodyBytes)
	}
	for _, d := range []struct {
		name  string
		value time.Duration
	}{{"Lease", o.Lease}, {"Wait", o.Wait}, {"Retention", o.Retention}} {
		if d.value < 0 {
			return nil, fmt.Errorf("idemhttp: Options.%s is negative (%v): a time.Duration of 0 or more, sent as seconds", d.name, d.value)
		}
	}
	c := &config{
		scope: o.Scope, lease: o.Lease, wait: o.Wait, retention: o.Retention, keyOptional: o.KeyOptional,
		outcomeHeader: http.CanonicalHeaderKey(o.OutcomeHeader), logger: o.Logger, transactional: o.Transactional,
		methods: map[string]bool{}, retryable: map[int]bool{}, storedHeaders: map[string]string{},
	}
	methods := o.Methods
	if methods == nil {
		methods = []string{http.MethodPost, http.MethodPatch}
	}
	for _, m := range methods {
		c.methods[strings.ToUpper(m)] = true
	}
	retryable := o.RetryableStatuses
	if retryable == nil {
		retryable = []int{http.StatusTooManyRequests, http.StatusServiceUnavailable}
	}
	for _, s := range retryable {
		if s < 100 || s > 599 {
			return nil, fmt.Errorf("idemhttp: Options.RetryableStatuses: %d is not an HTTP status", s)
		}
		c.retryable[s] = true
	}
	stored := o.StoredHeaders
	if stored == nil {
		stored = defaultStoredHeaders
	}
	for _, name := range stored {
		c.storedHeaders[http.CanonicalHeaderKey(name)] = name
	}
	c.maxBodyBytes = o.MaxBodyBytes
	if c.maxBodyBytes == 0 {
		c.maxBodyBytes = defaultMaxBodyBytes
	}
	if c.logger == nil {
		c.logger = log.Default()
	}
	return c, nil
}
