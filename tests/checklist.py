"""What the Python check scripts of the suites share (tests/citus, tests/scaleout, tests/pgbouncer, tests/drivers):
one PASS or FAIL line per check, a closing summary and the exit status it implies, and a statement's error as
the fields a test asserts on. A script finds it with

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
    from checklist import Checklist
"""
import sys


class Checklist:
    """The checks of one script run. `label` (an edition, say) prefixes every line."""

    def __init__(self, label=""):
        self.prefix = f"[{label}] " if label else ""
        self.failures = []

    def check(self, name, ok, detail=""):
        """Prints the check's line (with `detail` when it failed) and records a failure."""
        print(f"{'PASS' if ok else 'FAIL'}  {self.prefix}{name}" + (f": {detail}" if detail and not ok else ""))
        if not ok:
            self.failures.append(name)

    def summary(self, title):
        """The closing line; the exit status: 1 if any check failed."""
        print(f"{title}: {'all passed' if not self.failures else f'{len(self.failures)} FAILED'}")
        return 1 if self.failures else 0

    def exit(self, title):
        sys.exit(self.summary(title))


def error_of(conn, sql, params=()):
    """(SQLSTATE, message, detail, hint) of the statement's error on a psycopg connection, or None if it
    succeeded."""
    import psycopg

    try:
        conn.execute(sql, params)
        return None
    except psycopg.Error as e:
        d = e.diag
        return e.sqlstate, d.message_primary, d.message_detail, d.message_hint
