package idemhttp

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Attempt is one run of the handler under a claimed key, as the handler sees it through FromContext.
type Attempt struct {
	// Scope and Key are the key's scope (from Options.Scope) and the key itself, unquoted. The key is a good
	// reference for a provider that is idempotent by reference: a recovered attempt can look it up there.
	Scope, Key string
	// Outcome is "claimed" (a new key) or "recovered" (the key of an owner whose lease ended unfinished).
	Outcome string
	// Token is the claim's fencing token: a finish or release with it fails once another request has taken
	// the key over.
	Token int64
	// Tx is the request's transaction in the transactional mode (Options.Transactional), nil otherwise: the one
	// that holds the claim and will hold the answer. Do the handler's SQL on it; Commit and Rollback are the
	// middleware's (on this Tx they do nothing and return ErrTxManaged), savepoints (Begin) are fine. It is the
	// handler's until the handler returns: every use after that returns ErrTxEnded.
	Tx pgx.Tx

	unsettled atomic.Bool
	txEnded   atomic.Bool // the handler has returned: Tx refuses from then on
}

// Recovered tells whether the previous owner of the key died (its lease ended before it finished): the handler
// must reconcile, that is look for what that owner did (a charge under the key) before acting again.
func (a *Attempt) Recovered() bool { return a.Outcome == "recovered" }

// LeaveUnsettled asks the middleware to neither store nor release the key after the handler, for when the
// handler cannot tell whether its side effect happened ("maybe charged": the provider timed out). The answer
// goes to the client unstored; the claim stays until its lease ends, and then the next request with the key
// runs with Recovered true and reconciles. It holds even if the handler then panics. In the transactional mode
// the transaction commits, the handler's writes and the claim with it, without the answer. Safe to call from any
// goroutine, before the handler returns.
func (a *Attempt) LeaveUnsettled() { a.unsettled.Store(true) }

type attemptKey struct{}

// FromContext returns the attempt of the request whose context this is, or nil when the middleware let the
// request through without a key (a method not configured, or no key with KeyOptional).
func FromContext(ctx context.Context) *Attempt {
	a, _ := ctx.Value(attemptKey{}).(*Attempt)
	return a
}

// detached keeps a context's values but not its cancellation or deadline. The handler of a claimed key runs
// on it: a client that hangs up must not cut the work short, since its retry wants the finished answer, not
// a key that is released half-way (or left claimed until its lease ends).
type detached struct{ parent context.Context }

func (d detached) Deadline() (time.Time, bool) { return time.Time{}, false }
func (d detached) Done() <-chan struct{}       { return nil }
func (d detached) Err() error                  { return nil }
func (d detached) Value(key any) any           { return d.parent.Value(key) }
