package idemhttp

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrTxManaged is what Commit and Rollback return on the transaction the handler gets in the transactional
// mode, without doing anything: the middleware ends that transaction itself, after the handler, with the answer
// stored in it. A deferred tx.Rollback(ctx), the usual pgx habit, is thus harmless.
var ErrTxManaged = errors.New("idemhttp: the middleware commits or rolls back this transaction, not the handler")

// ErrTxEnded is what every use of the handler's transaction, and of the savepoints begun on it, returns once the
// handler has returned (or panicked): the middleware then ends the transaction and its connection goes back to the
// pool, where a late statement would run in another request's transaction, or commit on its own.
var ErrTxEnded = errors.New("idemhttp: the request's transaction is no longer the handler's: the handler returned, " +
	"and the middleware commits or rolls it back")

// handlerTx is the transaction as the handler sees it: all of pgx.Tx but the end, which is the middleware's, and
// only until the handler returns (ended). pgx itself refuses a statement only once the transaction has ended; from
// the handler's return to that end the middleware is storing the answer and committing on the connection, so every
// method checks here. (A use that races the middleware's end, from a goroutine the handler left running, is a data
// race on the connection like any concurrent use of a pgx.Tx.) Savepoints are handlerTxs too, whose Commit and
// Rollback are theirs to call.
type handlerTx struct {
	tx        pgx.Tx
	ended     *atomic.Bool
	savepoint bool
}

func (h handlerTx) live() error {
	if h.ended.Load() {
		return ErrTxEnded
	}
	return nil
}

func (h handlerTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := h.live(); err != nil {
		return nil, err
	}
	savepoint, err := h.tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return handlerTx{tx: savepoint, ended: h.ended, savepoint: true}, nil
}

func (h handlerTx) Commit(ctx context.Context) error {
	if !h.savepoint {
		return ErrTxManaged
	}
	if err := h.live(); err != nil {
		return err
	}
	return h.tx.Commit(ctx)
}

func (h handlerTx) Rollback(ctx context.Context) error {
	if !h.savepoint {
		return ErrTxManaged
	}
	if err := h.live(); err != nil {
		return err
	}
	return h.tx.Rollback(ctx)
}

func (h handlerTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error) {
	if err := h.live(); err != nil {
		return 0, err
	}
	return h.tx.CopyFrom(ctx, table, columns, rows)
}

func (h handlerTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if h.live() != nil {
		return endedBatch{}
	}
	return h.tx.SendBatch(ctx, b)
}

// LargeObjects is pgx's own, on the transaction: pgx refuses its calls once the transaction has ended, but not
// between the handler's return and that end (pgx offers no way to guard them from outside).
func (h handlerTx) LargeObjects() pgx.LargeObjects { return h.tx.LargeObjects() }

func (h handlerTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := h.live(); err != nil {
		return nil, err
	}
	return h.tx.Prepare(ctx, name, sql)
}

func (h handlerTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := h.live(); err != nil {
		return pgconn.CommandTag{}, err
	}
	return h.tx.Exec(ctx, sql, args...)
}

func (h handlerTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := h.live(); err != nil {
		return endedRows{}, err // as pgx does: Rows that carry the error, for callers that check it there
	}
	return h.tx.Query(ctx, sql, args...)
}

func (h handlerTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if h.live() != nil {
		return endedRows{}
	}
	return h.tx.QueryRow(ctx, sql, args...)
}

// Conn is nil once the handler has returned: the connection is back in the pool by then.
func (h handlerTx) Conn() *pgx.Conn {
	if h.live() != nil {
		return nil
	}
	return h.tx.Conn()
}

// endedRows are the rows, and the row, of a query after the handler returned: none, and ErrTxEnded.
type endedRows struct{}

func (endedRows) Close()                                       {}
func (endedRows) Err() error                                   { return ErrTxEnded }
func (endedRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (endedRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (endedRows) Next() bool                                   { return false }
func (endedRows) Scan(...any) error                            { return ErrTxEnded }
func (endedRows) Values() ([]any, error)                       { return nil, ErrTxEnded }
func (endedRows) RawValues() [][]byte                          { return nil }
func (endedRows) Conn() *pgx.Conn                              { return nil }

// endedBatch is the result of a batch sent after the handler returned.
type endedBatch struct{}

func (endedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, ErrTxEnded }
func (endedBatch) Query() (pgx.Rows, error)         { return endedRows{}, ErrTxEnded }
func (endedBatch) QueryRow() pgx.Row                { return endedRows{} }
func (endedBatch) Close() error                     { return ErrTxEnded }
