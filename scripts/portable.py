#!/usr/bin/env python3
"""`make portable`: writes dist/idem_keys_portable.sql, the portable edition, from the extension's own SQL.

The table, the sequence, the indexes, the types, idem_stale, idem_stats, the privileges and the API's comments
come from sql/bootstrap.sql and sql/finalize.sql, the files CREATE EXTENSION runs, so the two editions cannot
diverge there; portable/*.sql holds what the library does in the extension, in SQL and PL/pgSQL. The
extension's files are adapted, never copied by hand:
  - objects go into the current schema (no @extschema@), and what already exists is kept (IF NOT EXISTS), so
    running the file again, or over an older install, is safe;
  - pg_extension_config_dump goes (only CREATE EXTENSION may call it; a plain table is dumped anyway);
  - functions are CREATE OR REPLACE, and their search_path is pinned at the end (portable/seal.sql);
  - finalize.sql's idem_sweep_paced is made by portable/paced.sql instead (it names the schema).
Usage: scripts/portable.py [OUTPUT]   (default dist/idem_keys_portable.sql)
"""
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def version() -> str:
    match = re.search(r'^version\s*=\s*"([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M)
    return match.group(1)


def from_extension(name: str) -> str:
    """One of the extension's SQL files, adapted to a plain install into the current schema."""
    text = (ROOT / "sql" / name).read_text()
    text = re.sub(r"^SELECT pg_catalog\.pg_extension_config_dump\(.*\);\n", "", text, flags=re.M)
    text = text.replace("SET search_path = pg_catalog, @extschema@, pg_temp", "SET search_path FROM CURRENT")
    text = text.replace("@extschema@.", "")
    if re.search(r"^[^-\n].*@extschema@", text, re.M):
        sys.exit(f"sql/{name}: an @extschema@ this script does not know how to adapt")
    text = re.sub(r"^CREATE (SEQUENCE|TABLE) ", r"CREATE \1 IF NOT EXISTS ", text, flags=re.M)
    text = re.sub(r"^CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ", text, flags=re.M)
    text = re.sub(r"^CREATE FUNCTION ", "CREATE OR REPLACE FUNCTION ", text, flags=re.M)
    text = re.sub(r"^CREATE TYPE (\w+) AS \((.*?)\n\);\n", type_if_missing, text, flags=re.M | re.S)
    # The extension's paced sweep, with the comment above it: portable/paced.sql makes it.
    text, count = re.subn(r"(^--[^\n]*\n)*^CREATE PROCEDURE .*?^\$\$;\n", "", text, flags=re.M | re.S)
    if name == "finalize.sql" and count != 1:
        sys.exit("sql/finalize.sql: expected one CREATE PROCEDURE (idem_sweep_paced)")
    for statement in ("CREATE TABLE ", "CREATE SEQUENCE ", "CREATE INDEX ", "CREATE FUNCTION ", "CREATE TYPE ",
                      "CREATE PROCEDURE "):
        if re.search("^" + statement + "(?!IF NOT EXISTS)", text, re.M):
            sys.exit(f"sql/{name}: a {statement.strip()} left unadapted")
    return f"-- ---- from sql/{name} ----\n" + text


def type_if_missing(match: re.Match) -> str:
    name, body = match.group(1), match.group(2)
    return (
        "DO $type$\nBEGIN\n"
        "    IF NOT EXISTS (SELECT FROM pg_catalog.pg_type AS t\n"
        f"                    WHERE t.typname = '{name}' AND t.typnamespace = pg_catalog.current_schema()::regnamespace) THEN\n"
        f"        CREATE TYPE {name} AS ({body}\n        );\n"
        "    END IF;\nEND\n$type$;\n"
    )


# Helpers of earlier versions that this one no longer has: an upgrade drops them with the rest (upgrade.sql).
RETIRED_FUNCTIONS = ("idem_keys_claim", "idem_keys_finish")


def portable(name: str) -> str:
    text = (ROOT / "portable" / name).read_text()
    text = re.sub(r"^-- @overloads (\[.*\])\n(.*?)^-- @end overloads\n", expand_overloads, text, flags=re.M | re.S)
    if "-- @overloads" in text or "-- @end overloads" in text:
        sys.exit(f"portable/{name}: an @overloads block without its end")
    return f"-- ---- from portable/{name} ----\n" + text


def expand_overloads(match: re.Match) -> str:
    """A function written once for several argument types: one copy per entry of the JSON list, each
    @NAME@ replaced by that entry's NAME."""
    copies = []
    for entry in json.loads(match.group(1)):
        copy = match.group(2)
        for name, value in entry.items():
            copy = copy.replace(f"@{name}@", value)
        left = re.findall(r"@[A-Z_]+@", copy)
        if left:
            sys.exit(f"@overloads: no value for {', '.join(sorted(set(left)))}")
        copies.append(copy)
    return "\n".join(copies)


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "dist" / "idem_keys_portable.sql"
    parts = [
        portable("begin.sql"),
        portable("upgrade.sql"),
        from_extension("bootstrap.sql"),
        portable("settings.sql"),
        portable("errors.sql"),
        portable("fingerprint.sql"),
        portable("claim.sql"),
        portable("finish.sql"),
        portable("sweep.sql"),
        portable("paced.sql"),
        from_extension("finalize.sql"),
        portable("comments.sql"),
        portable("seal.sql"),
    ]
    text = "\n".join(parts)
    names = sorted(set(re.findall(r"^CREATE (?:OR REPLACE )?(?:FUNCTION|PROCEDURE) (?:%1\$I\.)?(\w+)", text, re.M))
                   | set(RETIRED_FUNCTIONS))
    text = text.replace("@FUNCTION_NAMES@", "ARRAY[" + ", ".join(f"'{n}'" for n in names) + "]::name[]")
    text = text.replace("@RETIRED_FUNCTIONS@", "ARRAY[" + ", ".join(f"'{n}'" for n in RETIRED_FUNCTIONS) + "]::name[]")
    text = text.replace("@VERSION@", version())
    header = (
        f"-- idem_keys {version()}, portable edition: idempotency keys in plain SQL and PL/pgSQL, for PostgreSQL\n"
        "-- servers that cannot load the compiled extension (RDS, Aurora, Cloud SQL, Azure, Supabase, Neon).\n"
        "-- Install or upgrade, as the owner of the application's database (no superuser needed), into the\n"
        "-- current schema:   psql -v ON_ERROR_STOP=1 -f idem_keys_portable.sql\n"
        "-- Generated by `make portable` (scripts/portable.py) from sql/ and portable/; do not edit. docs/portable.md\n\n"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(header + text)
    print(f"wrote {out} ({len(names)} functions and procedures)")


if __name__ == "__main__":
    main()
