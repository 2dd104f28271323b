//! No phantom replays: with synchronous replication, a stored answer is served (`replay`, and `mismatch`,
//! which is final for the client too) only once the synchronous standbys have confirmed the WAL it may sit in.
//!
//! A commit that PostgreSQL makes visible in the normal way has already waited for the synchronous
//! standbys. Two kinds of commit are visible without that wait:
//! * the commits that crash recovery replayed: a primary that crashed while its standby lagged (or was away)
//!   comes back with answers the standby never received, and a failover to the standby would take them away;
//! * a commit whose wait was cancelled (query cancel or pg_terminate_backend during COMMIT: PostgreSQL warns
//!   "the transaction has already committed locally, but might not have been replicated to the standby").
//!
//! This module closes the first: everything crash recovery replayed lies below the WAL flush position any
//! backend sees after the restart, so the first stored answer a backend is about to serve waits until the
//! synchronous standbys confirm the flush position of that moment (at the session's `synchronous_commit`
//! level), then never again at that level.
//! With `shared_preload_libraries = 'idem_keys'` the confirmation is shared by every backend until the next
//! restart, so only the first replays after a (re)start wait at all; without it each backend waits once. A
//! wait polls shared memory every 10 ms, and ends with the call's own timeout (`statement_timeout`, a cancel:
//! the usual ERROR, which a client retries). Once confirmed, a replay pays two loads (the session's
//! `synchronous_commit` and the confirmed level); without synchronous standbys, a few more (recovery state,
//! WalSndCtl's status).
//!
//! The second stays open, and docs/operations.md says so: telling a cancelled wait from a confirmed one would
//! need each row's commit LSN, which PostgreSQL does not keep. `in_progress` waits for nothing: it promises
//! nothing durable, and the client asks again. Without synchronous standbys (asynchronous replication) there
//! is nothing to wait for, and a failover can lose any recent answer, as it can lose any recent commit.
//!
//! A session's own `synchronous_commit = off` or `local` changes none of this: a finish commits as if it were
//! `on` (`finish_as_durably_as_replays`), else its answer would replay at once and a failover could lose it,
//! and a replay waits at remote flush at least.

use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgAtomic;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// The strongest `synchronous_commit` level (a SYNC_REP_WAIT_* mode + 1; 0: none) at which the synchronous
/// standbys confirmed a position past everything this server's last start recovered. In shared memory when
/// preloaded; reset by every (re)start, crash restarts included. The modes are ordered: a standby applies
/// only what it flushed, and flushes only what it wrote.
static CONFIRMED_LEVEL: PgAtomic<AtomicU32> =
    unsafe { PgAtomic::new(c"idem_keys recovered WAL confirmed") };
static ATTACHED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The same, for this backend alone (no preload, or before it saw the shared level).
    static CONFIRMED_HERE: Cell<u32> = const { Cell::new(0) };
    /// The flush position this backend first waited for.
    static TARGET: Cell<Option<u64>> = const { Cell::new(None) };
}

const POLL_MICROS: i64 = 10_000;

/// Reserves the shared level; only while shared_preload_libraries is being processed.
pub fn init() {
    pgrx::pg_shmem_init!(CONFIRMED_LEVEL);
    ATTACHED.store(true, Ordering::Relaxed);
}

/// Returns once a stored answer read now cannot be one that a failover to a synchronous standby loses
/// (crash-recovered commits; see the module comment), or raises the ERROR of the call's timeout or cancel.
pub fn await_confirmed() {
    // SAFETY: reads of this backend's settings and of WalSndCtl, which exists on every server (unlocked
    // reads of an aligned status byte and 8-byte positions, as syncrep.c's own fast path reads the status).
    unsafe {
        let Some(mode) = wait_mode() else {
            // No WAL senders: no standby to wait for.
            return;
        };
        let level = mode + 1;
        if CONFIRMED_HERE.get() >= level {
            return;
        }
        let shared = ATTACHED.load(Ordering::Relaxed);
        if shared && CONFIRMED_LEVEL.get().load(Ordering::Acquire) >= level {
            CONFIRMED_HERE.set(level);
            return;
        }
        // A standby serves what it has; only a primary's answers can be lost to a failover.
        if pg_sys::RecoveryInProgress() {
            return;
        }
        // No synchronous standby named: nothing to wait for (asynchronous replication). Checked before the
        // flush position, which takes a spinlock.
        let Some(mut confirmed) = sync_standbys_confirmed(mode) else {
            return;
        };
        // The flush position, not the insert position: everything crash recovery replayed is flushed, and a
        // standby confirms only flushed WAL (an idle server's insert position can sit past a page header
        // that no standby will ever confirm).
        let target = TARGET.get().unwrap_or_else(|| {
            let now = pg_sys::GetFlushRecPtr(std::ptr::null_mut());
            TARGET.set(Some(now));
            now
        });
        while confirmed < target {
            crate::store::sleep_until(crate::store::clock_now() + POLL_MICROS);
            match sync_standbys_confirmed(mode) {
                Some(now) => confirmed = now,
                // synchronous_standby_names emptied meanwhile: commits no longer wait either.
                None => return,
            }
        }
        CONFIRMED_HERE.set(level);
        if shared {
            CONFIRMED_LEVEL.get().fetch_max(level, Ordering::AcqRel);
        }
    }
}

/// Makes this transaction's commit wait for the synchronous standbys even where this session set
/// `synchronous_commit = off` or `local` (a worker role's latency setting): its answer would otherwise be
/// visible, and replayed, at once, and a failover to the standby would then lose it, so the work runs twice.
/// Raised to `on` (remote flush, what a replay at the default waits for) for this transaction only (`SET
/// LOCAL`), and only while synchronous standbys are named: without them no commit waits anyway. A session's
/// `remote_write` or `remote_apply` stays: those commits wait for the standby already.
pub fn finish_as_durably_as_replays() {
    // SAFETY: reads of this backend's settings and of WalSndCtl, as in `await_confirmed`; set_config_option
    // on a built-in setting at its own context, which either succeeds or raises an ERROR. A finish never
    // runs in recovery (args::writable refused it).
    unsafe {
        if pg_sys::max_wal_senders == 0
            || pg_sys::synchronous_commit as u32
                >= pg_sys::SyncCommitLevel::SYNCHRONOUS_COMMIT_REMOTE_WRITE
            || sync_standbys_confirmed(pg_sys::SYNC_REP_WAIT_FLUSH).is_none()
        {
            return;
        }
        pg_sys::set_config_option(
            c"synchronous_commit".as_ptr(),
            c"on".as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_LOCAL,
            true,
            0,
            false,
        );
    }
}

/// The SYNC_REP_WAIT_* mode a replay waits for: the one this session's commits wait for, from
/// `synchronous_commit` (as syncrep.c's assign hook derives it), and at least remote flush (`on`) where the
/// session's commits wait for none (`off`, `local`): the answer is what must survive a failover, whatever
/// the reader set. None on a server with no WAL senders.
///
/// # Safety
/// In a backend.
unsafe fn wait_mode() -> Option<u32> {
    unsafe {
        if pg_sys::max_wal_senders == 0 {
            return None;
        }
        match pg_sys::synchronous_commit as u32 {
            pg_sys::SyncCommitLevel::SYNCHRONOUS_COMMIT_REMOTE_WRITE => {
                Some(pg_sys::SYNC_REP_WAIT_WRITE)
            }
            pg_sys::SyncCommitLevel::SYNCHRONOUS_COMMIT_REMOTE_FLUSH => {
                Some(pg_sys::SYNC_REP_WAIT_FLUSH)
            }
            pg_sys::SyncCommitLevel::SYNCHRONOUS_COMMIT_REMOTE_APPLY => {
                Some(pg_sys::SYNC_REP_WAIT_APPLY)
            }
            _ => Some(pg_sys::SYNC_REP_WAIT_FLUSH),
        }
    }
}

/// How far the synchronous standbys have confirmed WAL in `mode`, or None when no synchronous standby is
/// named (commits wait for none).
///
/// # Safety
/// In a backend, after shared memory is attached.
unsafe fn sync_standbys_confirmed(mode: u32) -> Option<u64> {
    unsafe {
        let ctl = pg_sys::WalSndCtl;
        if ctl.is_null() || !crate::compat::sync_standbys_defined(ctl) {
            return None;
        }
        Some(std::ptr::read_volatile(&(*ctl).lsn[mode as usize]))
    }
}
