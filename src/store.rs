//! The SQL idem_keys runs, as plans prepared once per backend and kept (SPI_keepplan), and the reading of a
//! key's row into Rust. Under READ COMMITTED, claim and finish first try the direct path (src/direct/) and
//! come here for what it leaves: takeovers, error classification, and every other isolation level.
//!
//! Every statement names the table unqualified: `with_spi` pins
//! `search_path = pg_catalog, <extension schema>, pg_temp` around them, and the plan cache replans if that
//! path ever resolves differently (e.g. after DROP/CREATE EXTENSION in another schema), so a kept plan never
//! points at a stale table. All values are bound parameters; nothing is spliced into SQL text.
//!
//! Plans are run with `SpiClient::select` even when they write: pgrx's `update` forces a transaction id
//! first, which would make a read-only outcome (a replay) pay for a commit record. A plan prepared with
//! `prepare_mut` still runs read-write, with a fresh snapshot per statement, which is what lets a claim see
//! a row that a concurrent transaction committed while we waited on it.

use pgrx::prelude::*;
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiTupleTable};
use pgrx::{datum::DatumWithOid, PgMemoryContexts, PgOid};
use std::cell::{Cell, RefCell};

use crate::key_row::{Answer, Checkpoint, KeyRow};

/// The columns a claim classifies a stored key by, in this order, after a leading `inserted` flag.
/// `$3` is the caller's fingerprint. A finished key keeps its last checkpoint, but no outcome of a finished
/// key shows it, so a replay does not copy it (its state may be as large as a response).
macro_rules! key_columns {
    () => {
        "k.token, k.attempt, k.fingerprint = $3, k.finished_at IS NOT NULL, k.lease_ends_at, k.expires_at, \
         k.status_code, k.response, k.response_bytes, k.headers, k.created_at, \
         CASE WHEN k.finished_at IS NULL THEN k.checkpoint END, \
         CASE WHEN k.finished_at IS NULL THEN k.checkpoint_state END"
    };
}

/// One sweep batch of rows whose `finished_at IS $done` and whose `$column` is past $1: oldest first, through
/// that column's partial index. The ORDER BY keeps the planner off a sequential scan, which with a LIMIT would
/// walk every row the earlier batches deleted (or a whole table of live keys) on each batch. $3 is where the
/// previous batch of the same sweep ended, so a sweep that runs in one transaction, where its own deleted rows
/// cannot be marked dead in the index yet, does not step over them again on every batch. $2 NULL (LIMIT ALL)
/// with $1 = $3 deletes the rest of one timestamp's rows (`Sweep::one_transaction`). Returns the count and
/// the latest `$column` deleted.
macro_rules! sweep_statement {
    ($done:literal, $column:literal) => {
        concat!(
            "WITH gone AS (
               DELETE FROM idem_keys WHERE ctid = ANY (ARRAY(
                 SELECT ctid FROM idem_keys
                  WHERE finished_at IS ",
            $done,
            " AND ",
            $column,
            " <= $1 AND ",
            $column,
            " >= $3
                  ORDER BY ",
            $column,
            " LIMIT $2 FOR UPDATE SKIP LOCKED))
                 AND finished_at IS ",
            $done,
            " AND ",
            $column,
            " <= $1
               RETURNING ",
            $column,
            ")
             SELECT count(*), max(",
            $column,
            ") FROM gone"
        )
    };
}

#[derive(Clone, Copy)]
pub enum Stmt {
    /// Insert the key, or else read the row as this statement's snapshot sees it: one statement for both the
    /// first request (claimed) and the common retry (replay). Args: scope, key, fingerprint, now, lease end.
    Claim,
    /// Read the row with a fresh snapshot, when `Claim` lost a race to a row committed after its snapshot.
    Reread,
    /// `Claim`'s insert alone, for a table Citus distributes (claim.rs says why): the row it inserted, or
    /// none on a conflict, after which the claim reads the row.
    Insert,
    /// Write a claim this transaction made without writing it (src/pending.rs): its row, with the token
    /// it was given ($6) and $4 as its claim time. Its key lock kept every other writer away, so no row can
    /// hold the key; an insert that conflicts waits for a transaction that is backing off, as any insert
    /// would, and returns no row only if something else wrote the key (the caller raises).
    InsertClaimed,
    /// Take over a key whose answer expired or whose owner's lease ran out. The WHERE clause is re-checked on
    /// the newest row version (EvalPlanQual), so of two racing recoverers exactly one gets a row back. $6 is
    /// the new token, drawn by `NextToken` first: Citus refuses a volatile function inside an UPDATE of a
    /// distributed table, and a takeover is rare enough for the second statement.
    Takeover,
    /// Store the answer if the token still owns the unfinished key.
    Finish,
    /// Why `Finish` matched nothing: owner, state, and whether the stored answer equals the new one.
    FinishCheck,
    /// Drop an unfinished claim owned by the token.
    Release,
    /// Record a checkpoint if the token still owns the unfinished key.
    Checkpoint,
    /// Why a fenced write (checkpoint, release) matched nothing: owner, finished, finished and expired.
    Owner,
    /// Read a key for idem_lookup.
    Lookup,
    /// A new fencing token, for `Takeover`.
    NextToken,
    /// Delete one batch of finished keys past retention.
    SweepFinished,
    /// Delete one batch of unfinished keys abandoned past idem_keys.abandon_after.
    SweepAbandoned,
}

const STMT_COUNT: usize = 14;

const TEXT: PgOid = PgOid::BuiltIn(pg_sys::BuiltinOid::TEXTOID);
const BYTEA: PgOid = PgOid::BuiltIn(pg_sys::BuiltinOid::BYTEAOID);
const INT4: PgOid = PgOid::BuiltIn(pg_sys::BuiltinOid::INT4OID);
const INT8: PgOid = PgOid::BuiltIn(pg_sys::BuiltinOid::INT8OID);
const JSONB: PgOid = PgOid::BuiltIn(pg_sys::BuiltinOid::JSONBOID);
const TSTZ: PgOid = PgOid::BuiltIn(pg_sys::BuiltinOid::TIMESTAMPTZOID);

impl Stmt {
    fn sql(self) -> &'static str {
        match self {
            Stmt::Claim => concat!(
                "WITH inserted AS (
                   INSERT INTO idem_keys AS k (scope, key, fingerprint, token, attempt, created_at, claimed_at, lease_ends_at)
                   VALUES ($1, $2, $3, pg_catalog.nextval('idem_keys_token_seq'), 1, $4, $4, $5)
                   ON CONFLICT (scope, key) DO NOTHING
                   RETURNING k.token)
                 SELECT true, token, 1, true, false, $5, NULL::timestamptz, NULL::int4, NULL::jsonb, NULL::bytea,
                        NULL::jsonb, $4, NULL::text, NULL::jsonb
                   FROM inserted
                 UNION ALL
                 SELECT false, ",
                key_columns!(),
                " FROM idem_keys k
                   WHERE k.scope = $1 AND k.key = $2 AND NOT EXISTS (SELECT FROM inserted)"
            ),
            Stmt::Insert => {
                "INSERT INTO idem_keys AS k (scope, key, fingerprint, token, attempt, created_at, claimed_at, lease_ends_at)
                 VALUES ($1, $2, $3, pg_catalog.nextval('idem_keys_token_seq'), 1, $4, $4, $5)
                 ON CONFLICT (scope, key) DO NOTHING
                 RETURNING true, k.token, 1, true, false, $5, NULL::timestamptz, NULL::int4, NULL::jsonb,
                           NULL::bytea, NULL::jsonb, $4, NULL::text, NULL::jsonb"
            }
            Stmt::InsertClaimed => {
                "INSERT INTO idem_keys AS k (scope, key, fingerprint, token, attempt, created_at, claimed_at, lease_ends_at)
                 VALUES ($1, $2, $3, $6, 1, $4, $4, $5)
                 ON CONFLICT (scope, key) DO NOTHING
                 RETURNING k.token"
            }
            Stmt::Reread => concat!(
                "SELECT false, ",
                key_columns!(),
                " FROM idem_keys k WHERE k.scope = $1 AND k.key = $2"
            ),
            Stmt::Takeover => concat!(
                "UPDATE idem_keys AS k SET
                   token = $6,
                   attempt = CASE WHEN k.finished_at IS NULL THEN k.attempt + 1 ELSE 1 END,
                   created_at = CASE WHEN k.finished_at IS NULL THEN k.created_at ELSE $4 END,
                   fingerprint = $3, claimed_at = $4, lease_ends_at = $5, finished_at = NULL, expires_at = NULL,
                   status_code = NULL, response = NULL, response_bytes = NULL, headers = NULL,
                   -- A recovering owner resumes from the dead one's last checkpoint; an expired answer starts over.
                   checkpoint = CASE WHEN k.finished_at IS NULL THEN k.checkpoint END,
                   checkpoint_state = CASE WHEN k.finished_at IS NULL THEN k.checkpoint_state END
                 WHERE k.scope = $1 AND k.key = $2
                   AND ((k.finished_at IS NOT NULL AND k.expires_at <= $4)
                     OR (k.finished_at IS NULL AND k.lease_ends_at <= $4 AND k.fingerprint = $3))
                 RETURNING true, ",
                key_columns!()
            ),
            Stmt::Finish => {
                "UPDATE idem_keys SET finished_at = $4, expires_at = $5, status_code = $6, response = $7,
                        response_bytes = $8, headers = $9
                  WHERE scope = $1 AND key = $2 AND token = $3 AND finished_at IS NULL"
            }
            Stmt::FinishCheck => {
                "SELECT token, finished_at IS NOT NULL AND expires_at <= $4,
                        status_code = $6 AND response IS NOT DISTINCT FROM $7
                          AND response_bytes IS NOT DISTINCT FROM $8 AND headers IS NOT DISTINCT FROM $9
                   FROM idem_keys WHERE scope = $1 AND key = $2"
            }
            Stmt::Release => {
                "DELETE FROM idem_keys WHERE scope = $1 AND key = $2 AND token = $3 AND finished_at IS NULL"
            }
            Stmt::Checkpoint => {
                "UPDATE idem_keys SET checkpoint = $4, checkpoint_state = $5
                  WHERE scope = $1 AND key = $2 AND token = $3 AND finished_at IS NULL"
            }
            Stmt::Owner => {
                "SELECT token, finished_at IS NOT NULL, finished_at IS NOT NULL AND expires_at <= $3
                   FROM idem_keys WHERE scope = $1 AND key = $2"
            }
            Stmt::Lookup => {
                "SELECT attempt, finished_at IS NOT NULL, lease_ends_at, status_code, response, response_bytes,
                        headers, created_at, checkpoint, checkpoint_state, expires_at
                   FROM idem_keys
                  WHERE scope = $1 AND key = $2 AND (finished_at IS NULL OR expires_at > $3)"
            }
            Stmt::NextToken => "SELECT pg_catalog.nextval('idem_keys_token_seq')",
            Stmt::SweepFinished => sweep_statement!("NOT NULL", "expires_at"),
            Stmt::SweepAbandoned => sweep_statement!("NULL", "lease_ends_at"),
        }
    }

    fn arg_types(self) -> &'static [PgOid] {
        match self {
            // Claim and Reread share Takeover's parameter list (ignoring what they do not use) so a claim
            // binds them once.
            Stmt::Claim | Stmt::Insert | Stmt::InsertClaimed | Stmt::Reread | Stmt::Takeover => {
                &[TEXT, TEXT, BYTEA, TSTZ, TSTZ, INT8]
            }
            Stmt::NextToken => &[],
            Stmt::Finish | Stmt::FinishCheck => {
                &[TEXT, TEXT, INT8, TSTZ, TSTZ, INT4, JSONB, BYTEA, JSONB]
            }
            Stmt::Release => &[TEXT, TEXT, INT8],
            Stmt::Lookup | Stmt::Owner => &[TEXT, TEXT, TSTZ],
            Stmt::Checkpoint => &[TEXT, TEXT, INT8, TEXT, JSONB],
            Stmt::SweepFinished | Stmt::SweepAbandoned => &[TSTZ, INT4, TSTZ],
        }
    }

    /// Read-only plans run on the caller's snapshot (idem_lookup is STABLE and works on a hot standby).
    fn writes(self) -> bool {
        !matches!(self, Stmt::Lookup)
    }
}

thread_local! {
    // A backend is single-threaded, so a thread_local is a per-backend cache with no locking.
    static PLANS: RefCell<[Option<OwnedPreparedStatement>; STMT_COUNT]> = const { RefCell::new([const { None }; STMT_COUNT]) };
}

/// Runs a kept plan, preparing it on first use in this backend. The result is positioned on its first row.
pub fn run<'conn>(
    client: &SpiClient<'conn>,
    stmt: Stmt,
    args: &[DatumWithOid<'_>],
) -> SpiTupleTable<'conn> {
    PLANS.with_borrow_mut(|plans| {
        let slot = &mut plans[stmt as usize];
        if slot.is_none() {
            let prepared = if stmt.writes() {
                client.prepare_mut(stmt.sql(), stmt.arg_types())
            } else {
                client.prepare(stmt.sql(), stmt.arg_types())
            };
            *slot = Some(prepared.unwrap_or_else(|e| spi_failed(e)).keep());
        }
        client
            .select(slot.as_ref().unwrap(), None, args)
            .unwrap_or_else(|e| spi_failed(e))
            .first()
    })
}

/// `run` for a sweep statement against one shard of a table Citus distributes (citus.rs): the same text with
/// the shard's name (quoted, from `citus::local_shards`) in place of the table's, planned for this call only.
pub fn run_on_shard<'conn>(
    client: &SpiClient<'conn>,
    stmt: Stmt,
    shard: &str,
    args: &[DatumWithOid<'_>],
) -> SpiTupleTable<'conn> {
    assert!(
        matches!(stmt, Stmt::SweepFinished | Stmt::SweepAbandoned),
        "only the sweep runs on shards by name"
    );
    let sql = stmt
        .sql()
        .replace("FROM idem_keys", &format!("FROM {shard}"));
    let plan = client
        .prepare_mut(sql.as_str(), stmt.arg_types())
        .unwrap_or_else(|e| spi_failed(e));
    client
        .select(&plan, None, args)
        .unwrap_or_else(|e| spi_failed(e))
        .first()
}

/// SPI errors that are not PostgreSQL ERRORs (those unwind by themselves) mean a bug in this file.
fn spi_failed(error: pgrx::spi::Error) -> ! {
    pgrx::error!("idem_keys: internal SPI failure: {error}")
}

pub fn first_key_row(table: &SpiTupleTable<'_>) -> Option<KeyRow> {
    if table.is_empty() {
        return None;
    }
    Some(KeyRow {
        inserted: value(table, 1).unwrap_or(false),
        token: value(table, 2).unwrap_or_default(),
        attempt: value(table, 3).unwrap_or_default(),
        same_request: value(table, 4).unwrap_or(false),
        finished: value(table, 5).unwrap_or(false),
        lease_ends_at: timestamp(table, 6),
        expires_at: timestamp(table, 7),
        answer: Answer {
            status_code: value(table, 8),
            response: varlena(table, 9),
            response_bytes: varlena(table, 10),
            headers: varlena(table, 11),
        },
        created_at: timestamp(table, 12).unwrap_or_default(),
        checkpoint: Checkpoint {
            point: varlena(table, 13),
            state: varlena(table, 14),
        },
    })
}

/// Who owns a live key, and whether it is finished; None when the key is unknown or its answer expired
/// (both P0002 for a fenced write). For the error paths of checkpoint and release.
pub fn live_owner(client: &SpiClient<'_>, scope: &str, key: &str) -> Option<(i64, bool)> {
    let params = [text(scope), text(key), timestamptz(clock_now())];
    let owner = run(client, Stmt::Owner, &params);
    if owner.is_empty() || value::<bool>(&owner, 3).unwrap_or(false) {
        return None;
    }
    Some((
        value(&owner, 1).unwrap_or_default(),
        value(&owner, 2).unwrap_or(false),
    ))
}

/// A by-value column of the first row.
pub fn value<T: IntoDatum + FromDatum>(table: &SpiTupleTable<'_>, ordinal: usize) -> Option<T> {
    table.get::<T>(ordinal).unwrap_or_else(|e| spi_failed(e))
}

/// A timestamptz column of the first row, as PostgreSQL's microseconds since 2000-01-01.
pub fn timestamp(table: &SpiTupleTable<'_>, ordinal: usize) -> Option<i64> {
    table
        .get_datum_by_ordinal(ordinal)
        .unwrap_or_else(|e| spi_failed(e))
        .map(|d| d.value() as i64)
}

/// A varlena column of the first row, copied into the memory context `with_spi` was called in (the
/// function call's), so that it outlives SPI_finish and no longer: SPI's own context hangs off the
/// transaction's, where a copy per call would pile up until commit (a batch of claims in one transaction).
pub fn varlena(table: &SpiTupleTable<'_>, ordinal: usize) -> Option<pg_sys::Datum> {
    let datum = table
        .get_datum_by_ordinal(ordinal)
        .unwrap_or_else(|e| spi_failed(e))?;
    let caller = CALLER_CONTEXT
        .get()
        .expect("store::varlena runs inside with_spi");
    // SAFETY: the datum is a non-null varlena from the current SPI tuple; the caller's context is live for
    // the whole with_spi call.
    unsafe {
        Some(PgMemoryContexts::For(caller).switch_to(|_| {
            pg_sys::Datum::from(pg_sys::pg_detoast_datum_copy(datum.cast_mut_ptr()))
        }))
    }
}

thread_local! {
    // The memory context with_spi was called in, while it runs (store::varlena copies into it).
    static CALLER_CONTEXT: Cell<Option<pg_sys::MemoryContext>> = const { Cell::new(None) };
}

/// Puts back the caller context of an enclosing with_spi, also when an ERROR unwinds.
struct CallerContext(Option<pg_sys::MemoryContext>);

impl Drop for CallerContext {
    fn drop(&mut self) {
        CALLER_CONTEXT.set(self.0);
    }
}

/// Parameter builders: bound values, never text.
pub fn text(value: &str) -> DatumWithOid<'_> {
    value.into()
}

pub fn bytes(value: &[u8]) -> DatumWithOid<'_> {
    value.into()
}

pub fn int8(value: i64) -> DatumWithOid<'static> {
    value.into()
}

pub fn oid(value: pg_sys::Oid) -> DatumWithOid<'static> {
    value.into()
}

pub fn int4(value: i32) -> DatumWithOid<'static> {
    value.into()
}

pub fn timestamptz(micros: i64) -> DatumWithOid<'static> {
    // SAFETY: timestamptz is an int8 by value.
    unsafe { DatumWithOid::new(pg_sys::Datum::from(micros), pg_sys::TIMESTAMPTZOID) }
}

/// A raw varlena datum of the given type, or SQL NULL.
pub fn raw(datum: Option<pg_sys::Datum>, oid: pg_sys::Oid) -> DatumWithOid<'static> {
    match datum {
        // SAFETY: the caller passes a valid datum of type `oid` that outlives the statement.
        Some(datum) => unsafe { DatumWithOid::new(datum, oid) },
        None => DatumWithOid::null_oid(oid),
    }
}

/// The transaction-independent current time: lease checks must see the clock move even inside one long
/// transaction (now() would stand still).
pub fn clock_now() -> i64 {
    unsafe { pg_sys::GetCurrentTimestamp() }
}

/// Sleeps on the process latch until `wake` (a `clock_now` time, or a signal), then serves interrupts:
/// statement_timeout, pg_cancel_backend and pg_terminate_backend end the wait at once.
pub fn sleep_until(wake: i64) {
    let millis = ((wake - clock_now() + 999) / 1000).clamp(1, i32::MAX as i64);
    // SAFETY: MyLatch is this backend's latch; WL_EXIT_ON_PM_DEATH needs no further handling.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            millis as std::ffi::c_long,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
    pgrx::check_for_interrupts!();
}

/// Connects to SPI for the closure, with `search_path` pinned to `pg_catalog, <extension schema>, pg_temp`
/// for its statements (catalog.rs says why here and not in the functions' SET clause). On an ERROR the
/// (sub)transaction's abort restores the caller's path, as it does for a SET clause.
pub fn with_spi<R>(f: impl FnOnce(&SpiClient<'_>) -> R) -> R {
    let path = crate::catalog::pinned_search_path();
    // SAFETY: a GUC nest level opened and closed around the statements, as fmgr_security_definer does.
    unsafe {
        let level = pg_sys::NewGUCNestLevel();
        pg_sys::set_config_option(
            c"search_path".as_ptr(),
            path.as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
        let _caller = CallerContext(CALLER_CONTEXT.replace(Some(pg_sys::CurrentMemoryContext)));
        let result = Spi::connect(|client| f(client));
        pg_sys::AtEOXact_GUC(true, level);
        result
    }
}
