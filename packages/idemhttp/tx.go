package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Tx returns the transaction of the request whose context this is in the transactional mode
// (Options.Transactional): the one that holds the claim, in which the handler does its SQL so that it commits
// with the stored answer or not at all. nil outside the mode, or when the middleware let the request through
// without a key. Its Commit and Rollback return ErrTxManaged; savepoints (Begin) are fine. Once the handler has
// returned, every use of it returns ErrTxEnded.
func Tx(ctx context.Context) pgx.Tx {
	if a := FromContext(ctx); a != nil && a.Tx != nil {
		return a.Tx
	}
	return nil
}

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

// What became of a COMMIT.
type commitOutcome int

const (
	committed     commitOutcome = iota
	rolledBack                  // the server's answer proves that nothing was committed
	commitUnknown               // the answer never came: committed or not, nobody here can tell
)

// commit commits the transaction, giving its connection back; a connection whose COMMIT failed before the
// transaction ended is closed by pgx, and pgxpool never pools a closed one. A failure is logged.
func (m *middleware) commit(tx pgx.Tx, a *Attempt, after string) commitOutcome {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if conn := tx.Conn(); conn != nil && conn.IsClosed() {
		// Lost before its COMMIT could be sent (a statement saw the session end, or was cut short): the server
		// rolled the transaction back with the session, so the outcome is known. Rollback only gives the closed
		// connection back, for pgxpool to destroy; its error is that the connection is closed.
		_ = tx.Rollback(ctx)
		m.c.logger.Printf("idemhttp: COMMIT (%q, %q) after %s: not sent: the connection was lost before the COMMIT: "+
			"nothing was committed (the server rolled the transaction back with the session); the claim and the "+
			"handler's changes are gone, nothing is stored", a.Scope, a.Key, after)
		return rolledBack
	}
	err := tx.Commit(ctx)
	switch {
	case err == nil:
		return committed
	case commitRolledBack(ctx, err):
		m.c.logger.Printf("idemhttp: COMMIT (%q, %q) after %s: %v: the claim and the handler's changes are gone, "+
			"nothing is stored", a.Scope, a.Key, after, err)
		return rolledBack
	default:
		m.c.logger.Printf("idemhttp: COMMIT (%q, %q) after %s: %v: its answer never came, so the outcome is unknown: "+
			"the handler's changes and the answer may or may not have been committed; a retry with the same "+
			"Idempotency-Key resolves it (it replays the stored answer if the commit happened, or runs the request "+
			"afresh if it did not)", a.Scope, a.Key, after, err)
		return commitUnknown
	}
}

// commitOrAnswer commits; when that did not certainly work it answers 503 in the handler's place, commit-failed
// (nothing was committed: rolled back, or the connection lost before the COMMIT) or commit-unknown (maybe it was),
// and reports false.
func (m *middleware) commitOrAnswer(w http.ResponseWriter, tx pgx.Tx, a *Attempt, after string) bool {
	switch m.commit(tx, a, after) {
	case committed:
		return true
	case rolledBack:
		writeProblem(w, "commit-failed")
	default:
		writeProblem(w, "commit-unknown")
	}
	return false
}

// commitRolledBack tells whether a COMMIT's error proves that nothing was committed: an error answer of the
// server, or pgx's word that the transaction had already failed (PostgreSQL answers its COMMIT with ROLLBACK).
// Not a session the server ended (class 08 connection exceptions; 57P01, 57P02, 57P03: shutdown, crash, no
// connections now), which may come after the commit was made durable; not a PANIC, a failure inside the commit's
// critical section (a WAL flush that failed), where the commit may be durable already; not an error without a
// SQLSTATE (the connection lost or closed); and nothing once ctx is done: the COMMIT was cut short by us, whatever
// came back.
func commitRolledBack(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if errors.Is(err, pgx.ErrTxCommitRollback) {
		return true
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	// The unlocalized severity (PostgreSQL 9.6 on), so a server whose lc_messages translates PANIC is caught too.
	severity := pgErr.SeverityUnlocalized
	if severity == "" {
		severity = pgErr.Severity
	}
	if severity == "PANIC" {
		return false
	}
	code := pgErr.Code
	return !strings.HasPrefix(code, "08") && code != "57P01" && code != "57P02" && code != "57P03"
}
