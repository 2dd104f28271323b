package idemhttp

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v4"
)

// ErrTxManaged is what Commit and Rollback return on the transaction the handler gets in the transactional
// mode, without doing anything: the middleware ends that transaction itself, after the handler, with the answer
// stored in it. A deferred tx.Rollback(ctx), the usual pgx habit, is thus harmless.
var ErrTxManaged = errors.New("idemhttp: the middleware commits or rolls back this transaction, not the handler")

// Tx returns the transaction of the request whose context this is in the transactional mode
// (Options.Transactional): the one that holds the claim, in which the handler does its SQL so that it commits
// with the stored answer or not at all. nil outside the mode, or when the middleware let the request through
// without a key. Its Commit and Rollback return ErrTxManaged; savepoints (Begin) are fine.
func Tx(ctx context.Context) pgx.Tx {
	if a := FromContext(ctx); a != nil && a.Tx != nil {
		return a.Tx
	}
	return nil
}

// handlerTx is the transaction as the handler sees it: all of pgx.Tx but the end, which is the middleware's.
// (Its Conn could still send COMMIT: that is documented as the handler's to avoid.)
type handlerTx struct{ pgx.Tx }

func (handlerTx) Commit(context.Context) error   { return ErrTxManaged }
func (handlerTx) Rollback(context.Context) error { return ErrTxManaged }

// beginClaim begins the request's transaction and claims the key in it. On an error the transaction, if any,
// is already rolled back.
func (m *middleware) beginClaim(ctx context.Context, scope, key string, req request) (pgx.Tx, *claim, error) {
	tx, err := m.txdb.Begin(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("BEGIN: %w", err)
	}
	cl, err := claimKey(ctx, tx, m.c, scope, key, req, func() (DB, error) {
		// The JSON form failed, aborting the transaction: claim by bytes in a new one.
		m.rollback(tx, scope, key, "a body PostgreSQL cannot read as JSON")
		if tx, err = m.txdb.Begin(ctx); err != nil {
			tx = nil
			return nil, fmt.Errorf("BEGIN: %w", err)
		}
		return tx, nil
	})
	if err != nil {
		if tx != nil {
			m.rollback(tx, scope, key, "the claim failed")
		}
		return nil, nil, err
	}
	return tx, cl, nil
}

// rollback ends the transaction, giving its connection back (or, when ROLLBACK itself failed, closing it: pgx
// does). A failure is only logged: PostgreSQL ends a transaction whose connection is gone.
func (m *middleware) rollback(tx pgx.Tx, scope, key, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := tx.Rollback(ctx); err != nil {
		m.c.logger.Printf("idemhttp: ROLLBACK (%q, %q) (%s): %v", scope, key, why, err)
	}
}

// commit commits the transaction, giving its connection back. A failure is logged and tells the caller that
// nothing of the transaction was kept: neither the claim, nor the handler's changes, nor an answer.
func (m *middleware) commit(tx pgx.Tx, a *Attempt, after string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := tx.Commit(ctx); err != nil {
		m.c.logger.Printf("idemhttp: COMMIT (%q, %q) after %s: %v: the claim and the handler's changes are gone, "+
			"nothing is stored", a.Scope, a.Key, after, err)
		return false
	}
	return true
}
