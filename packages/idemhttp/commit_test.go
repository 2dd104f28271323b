package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Which COMMIT errors prove that nothing was committed: an error answer of the server, but not one that ended the
// session (class 08, 57P01 to 57P03), nor a PANIC (in the server's language or not), nor anything while the COMMIT's
// context ran out.
func TestCommitRolledBack(t *testing.T) {
	pgErr := func(code, severity string) error {
		return fmt.Errorf("commit: %w", &pgconn.PgError{Code: code, Severity: severity})
	}
	live, done := context.Background(), canceled()
	for _, c := range []struct {
		ctx  context.Context
		err  error
		want bool
	}{
		{live, pgErr("23505", "ERROR"), true},
		{live, pgErr("40001", "ERROR"), true},
		{live, pgErr("57014", "ERROR"), true},
		{live, pgErr("25P03", "FATAL"), true},
		{live, pgx.ErrTxCommitRollback, true},
		{live, pgErr("08006", "FATAL"), false},
		{live, pgErr("08P01", "FATAL"), false},
		{live, pgErr("57P01", "FATAL"), false},
		{live, pgErr("57P02", "FATAL"), false},
		{live, pgErr("57P03", "FATAL"), false},
		{live, pgErr("XX000", "PANIC"), false}, // e.g. a WAL flush failure in the commit's critical section
		{live, pgErr("58030", "PANIC"), false},
		{live, fmt.Errorf("commit: %w", &pgconn.PgError{Code: "XX000", Severity: "PANIQUE", SeverityUnlocalized: "PANIC"}), false},
		{live, fmt.Errorf("commit: %w", &pgconn.PgError{Code: "23505", Severity: "ERREUR", SeverityUnlocalized: "ERROR"}), true},
		{live, errors.New("conn closed"), false},
		{live, io.ErrUnexpectedEOF, false},
		{live, fmt.Errorf("timeout: %w", context.DeadlineExceeded), false},
		{done, pgErr("57014", "ERROR"), false}, // our own cancellation, answered by the server
		{done, context.Canceled, false},
	} {
		if got := commitRolledBack(c.ctx, c.err); got != c.want {
			t.Errorf("%v (context %v): %v, want %v", c.err, c.ctx.Err(), got, c.want)
		}
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
