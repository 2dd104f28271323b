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
//! This module closes the first: everything crash recovery replayed lies below the WAL insert position any
//! backend sees after the restart, so the first stored answer a backend is about to serve waits until the
//! synchronous standbys confirm that position (at the session's `synchronous_commit` level), then never again.
//! With `shared_preload_libraries = 'idem_keys'` the confirmation is shared by every backend until the next
//! restart, so only the first replays after a (re)start wait at all; without it each backend waits once. A
//! wait polls shared memory every 10 ms, and ends with the call's own timeout (`statement_timeout`, a cancel:
//! the usual ERROR, which a client retries). Steady state pays one load of a flag.
//!
//! The second stays open, and docs/operations.md says so: telling a cancelled wait from a confirmed one would
//! need each row's commit LSN, which PostgreSQL does not keep. `in_progress` waits for nothing: it promises
//! nothing durable, and the client asks again. Without synchronous standbys (asynchronous replication, or
//! `synchronous_commit` at `local` or `off` for the session) there is nothing to wait for, and a failover can
//! lose any recent answer, as it can lose any recent commit.

use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgAtomic;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether the synchronous standbys confirmed a position past everything this server's last start recovered.
/// In shared memory when preloaded; reset by every (re)start, crash restarts included.
static RECOVERED_WAL_CONFIRMED: PgAtomic<AtomicBool> =
    unsafe { PgAtomic::new(c"idem_keys recovered WAL confirmed") };
static ATTACHED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The same, for this backend alone (no preload, or before it saw the shared flag).
    static CONFIRMED_HERE: Cell<bool> = const { Cell::new(false) };
    /// The insert position this backend first waited for.
    static TARGET: Cell<Option<u64>> = const { Cell::new(None) };
}

const POLL_MILLIS: i64 = 10;

/// Reserves the shared flag; only while shared_preload_libraries is being processed.
pub fn init() {
    pgrx::pg_shmem_init!(RECOVERED_WAL_CONFIRMED);
    ATTACHED.store(true, Ordering::Relaxed);
}

/// Returns once a stored answer read now cannot be one that a failover to a synchronous standby loses
/// (crash-recovered commits; see the module comment), or raises the ERROR of the call's timeout or cancel.
pub fn await_confirmed() {
    if CONFIRMED_HERE.get() {
        return;
    }
    let shared = ATTACHED.load(Ordering::Relaxed);
    if shared && RECOVERED_WAL_CONFIRMED.get().load(Ordering::Acquire) {
        CONFIRMED_HERE.set(true);
        return;
    }
    // SAFETY: reads of this backend's settings and of WalSndCtl, which exists on every server (unlocked
    // reads of an aligned flag byte and 8-byte positions, as syncrep.c's own fast path reads the flag).
    unsafe {
        // A standby serves what it has; only a primary's answers can be lost to a failover.
        if pg_sys::RecoveryInProgress() {
            return;
        }
        // No synchronous standby asked for: nothing to wait for (asynchronous replication). Checked before
        // the insert position, whose spinlock every replay would otherwise take on such a server.
        let Some(mut confirmed) = sync_standbys_confirmed() else {
            return;
        };
        let target = TARGET.get().unwrap_or_else(|| {
            let now = pg_sys::GetXLogInsertRecPtr();
            TARGET.set(Some(now));
            now
        });
        while confirmed < target {
            pg_sys::WaitLatch(
                pg_sys::MyLatch,
                (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
                POLL_MILLIS as std::ffi::c_long,
                pg_sys::PG_WAIT_EXTENSION,
            );
            pg_sys::ResetLatch(pg_sys::MyLatch);
            pgrx::check_for_interrupts!();
            match sync_standbys_confirmed() {
                Some(now) => confirmed = now,
                // synchronous_standby_names emptied meanwhile: commits no longer wait either.
                None => return,
            }
        }
        CONFIRMED_HERE.set(true);
        if shared {
            RECOVERED_WAL_CONFIRMED.get().store(true, Ordering::Release);
        }
    }
}

/// How far the synchronous standbys have confirmed WAL at this session's `synchronous_commit` level (what a
/// commit of this session waits for), or None when the session's commits wait for no standby.
///
/// # Safety
/// In a backend, after shared memory is attached.
unsafe fn sync_standbys_confirmed() -> Option<u64> {
    unsafe {
        let mode = match pg_sys::synchronous_commit as u32 {
            pg_sys::SyncCommitLevel::SYNCHRONOUS_COMMIT_REMOTE_WRITE => pg_sys::SYNC_REP_WAIT_WRITE,
            pg_sys::SyncCommitLevel::SYNCHRONOUS_COMMIT_REMOTE_FLUSH => pg_sys::SYNC_REP_WAIT_FLUSH,
            pg_sys::SyncCommitLevel::SYNCHRONOUS_COMMIT_REMOTE_APPLY => pg_sys::SYNC_REP_WAIT_APPLY,
            _ => return None,
        };
        let ctl = pg_sys::WalSndCtl;
        if pg_sys::max_wal_senders == 0 || ctl.is_null() || !sync_standbys_defined(ctl) {
            return None;
        }
        Some(std::ptr::read_volatile(&(*ctl).lsn[mode as usize]))
    }
}

/// Whether synchronous_standby_names names any standby, as the checkpointer last published it. PostgreSQL
/// 15.13, 17.5 and 18 replaced the boolean `sync_standbys_defined` with these status bits; the builds here
/// are against those minors or later.
///
/// # Safety
/// `ctl` is WalSndCtl.
unsafe fn sync_standbys_defined(ctl: *mut pg_sys::WalSndCtlData) -> bool {
    unsafe {
        std::ptr::read_volatile(&(*ctl).sync_standbys_status) as u32 & pg_sys::SYNC_STANDBY_DEFINED
            != 0
    }
}
