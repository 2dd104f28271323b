//! Every `idem_keys.*` setting: private statics, bounds, units, one `init()`, small getters.
//!
//! The key settings are `Userset`, so they can be set per session, per role (`ALTER ROLE … SET`), per
//! database (`ALTER DATABASE … SET`) and in postgresql.conf: a caller who shortens their own lease or
//! retention only affects the keys they write. So are the sweep's batch size and rest (`sweep_batch_size`,
//! `sweep_delay`): a manual `idem_sweep()` or `CALL idem_sweep_paced()` may pace itself per session, and the
//! worker reads them from postgresql.conf on reload. The size cap is the exception: it protects the table
//! from its callers, so only a privileged role changes it (`Suset`), and so are the tenant binding's three
//! (src/tenant.rs): a caller must not choose its own tenant rules. The worker's own settings
//! (`sweep_interval`, `sweep_databases`, `sweep_enabled`) are `Sighup`: they belong to the server, and
//! `pg_reload_conf()` changes them without a restart.

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use std::ffi::{c_char, c_void, CStr, CString};

/// Where a caller's tenant comes from; `Off` binds nobody.
#[derive(pgrx::PostgresGucEnum, Clone, Copy, PartialEq, Debug)]
pub enum Binding {
    #[name = c"off"]
    Off,
    #[name = c"role"]
    Role,
    #[name = c"setting"]
    Setting,
    #[name = c"jwt"]
    Jwt,
}

impl Binding {
    /// The value's name, as `SHOW idem_keys.tenant_binding` prints it.
    pub fn name(self) -> &'static str {
        match self {
            Binding::Off => "off",
            Binding::Role => "role",
            Binding::Setting => "setting",
            Binding::Jwt => "jwt",
        }
    }
}

/// Default lease of a claim, in seconds, when `idem_claim(…, lease => NULL)`. A claim whose lease runs out
/// without a finish may be taken over (`recovered`). Five minutes covers a slow payment provider; pick the
/// lease longer than the slowest request you expect, or a live owner gets overtaken.
static LEASE_SECONDS: GucSetting<i32> = GucSetting::<i32>::new(300);

/// How long a finished answer is replayed, in seconds, when `idem_finish(…, retention => NULL)`. Stripe keeps
/// keys for 24 hours; so do we by default. Past it the key counts as absent, swept or not.
static RETENTION_SECONDS: GucSetting<i32> = GucSetting::<i32>::new(86_400);

/// How long after its lease ended an unfinished key is kept for a reconciler before `idem_sweep` deletes it,
/// in seconds. A week by default: long enough for a human to look at what `idem_stale()` reports.
static ABANDON_AFTER_SECONDS: GucSetting<i32> = GucSetting::<i32>::new(7 * 86_400);

/// Largest stored response, headers or checkpoint state, in bytes each (the jsonb's binary size, or the
/// bytea's length). Keeps one bad caller from filling the table with megabytes per key, so the callers it
/// guards against must not lift it: `Suset`, changed in postgresql.conf, `ALTER ROLE`/`ALTER DATABASE` by a
/// superuser, or by a role granted `SET` on it (PostgreSQL 15's `GRANT SET ON PARAMETER`). A value an
/// unprivileged session `SET` before this library was loaded is dropped with a WARNING when it loads. 1 MB
/// by default.
static MAX_RESPONSE_BYTES: GucSetting<i32> = GucSetting::<i32>::new(1024 * 1024);

/// Rows `idem_sweep` deletes per statement. Small batches keep each DELETE's locks and WAL burst short: a
/// committing sweeper flushes one batch's WAL (mostly full-page images) at a time, and a claim that commits
/// meanwhile waits for that flush. With 1000-row batches flat out, claims' p99 during a sweep was 3-5x its
/// value without one; with 200-row batches and `sweep_delay` rests, about 2x (docs/benchmarks.md).
static SWEEP_BATCH_SIZE: GucSetting<i32> = GucSetting::<i32>::new(200);

/// Milliseconds the background worker and `idem_sweep_paced` rest between two committed batches, like
/// autovacuum's cost delay: it leaves the WAL device to the claims most of the time. With 200-row batches,
/// 2 ms rests let a sweeper delete about 60 000 rows a second (1 M in 16-20 s); 0 sweeps flat out.
static SWEEP_DELAY_MILLIS: GucSetting<i32> = GucSetting::<i32>::new(2);

/// Seconds between two sweeps of each database by the background worker. A minute keeps the table close
/// to its live size without the worker showing up in anyone's profile.
static SWEEP_INTERVAL_SECONDS: GucSetting<i32> = GucSetting::<i32>::new(60);

/// Comma-separated databases the worker sweeps. A background worker connects to one database for life, so
/// the launcher starts a sweeper per name for each pass, which exits after it (src/sweeper/worker.rs).
/// `postgres` by default, like pg_cron's `cron.database_name`.
static SWEEP_DATABASES: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"postgres"));

/// Whether `idem_claim` and `idem_finish` may skip SPI under READ COMMITTED (src/direct/). On by default;
/// off exists so bench/ab.sh can measure what it buys, and as an escape hatch.
static DIRECT_PATH: GucSetting<bool> = GucSetting::<bool>::new(true);
static WRITE_ONCE: GucSetting<bool> = GucSetting::<bool>::new(true);

/// Where a caller's tenant comes from, for tenant binding (src/tenant.rs); `off` binds nobody.
static TENANT_BINDING: GucSetting<Binding> = GucSetting::<Binding>::new(Binding::Off);

/// The setting that holds the caller's tenant when `tenant_binding = setting`.
static TENANT_SETTING: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"app.tenant"));

/// The claim of `request.jwt.claims` that holds the caller's tenant when `tenant_binding = jwt`: `sub`
/// (the user) by default, so every user is their own tenant unless the operator names a tenant claim.
static TENANT_CLAIM: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c"sub"));

/// Whether the background worker sweeps at all (pg_cron users may prefer to turn it off).
static SWEEP_ENABLED: GucSetting<bool> = GucSetting::<bool>::new(true);

pub fn init() {
    GucRegistry::define_int_guc(
        c"idem_keys.lease",
        c"Default lease of an idempotency-key claim.",
        c"Used when idem_claim is called without lease. After the lease the key may be recovered by a retry.",
        &LEASE_SECONDS,
        1,
        i32::MAX,
        GucContext::Userset,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"idem_keys.retention",
        c"Default retention of a finished idempotency key.",
        c"Used when idem_finish is called without retention. Past it the key counts as absent.",
        &RETENTION_SECONDS,
        1,
        i32::MAX,
        GucContext::Userset,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"idem_keys.abandon_after",
        c"How long an unfinished key is kept after its lease ended before idem_sweep deletes it.",
        c"Gives a reconciler (idem_stale) time to settle it.",
        &ABANDON_AFTER_SECONDS,
        1,
        i32::MAX,
        GucContext::Userset,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"idem_keys.max_response_bytes",
        c"Largest response, headers or checkpoint state idem_keys stores.",
        c"Larger values are refused with SQLSTATE 54000. Only a superuser (or a role granted SET on it) may change it.",
        &MAX_RESPONSE_BYTES,
        1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_BYTE,
    );
    GucRegistry::define_int_guc(
        c"idem_keys.sweep_batch_size",
        c"Rows idem_sweep deletes per statement.",
        c"Used when idem_sweep is called without batch_size.",
        &SWEEP_BATCH_SIZE,
        1,
        1_000_000,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"idem_keys.sweep_delay",
        c"Pause between two committed sweep batches (background worker, idem_sweep_paced).",
        c"0 sweeps without pausing. idem_sweep(), one transaction, never pauses.",
        &SWEEP_DELAY_MILLIS,
        0,
        10_000,
        GucContext::Userset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"idem_keys.sweep_interval",
        c"Time between two sweeps of a database by the idem_keys background worker.",
        c"Needs shared_preload_libraries = 'idem_keys'. Reloadable.",
        &SWEEP_INTERVAL_SECONDS,
        1,
        86_400,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_string_guc(
        c"idem_keys.sweep_databases",
        c"Comma-separated databases the idem_keys background worker sweeps.",
        c"A database without the extension is skipped quietly. Reloadable.",
        &SWEEP_DATABASES,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"idem_keys.sweep_enabled",
        c"Whether the idem_keys background worker sweeps.",
        c"Turn it off when pg_cron (or anything else) calls idem_sweep(). Reloadable.",
        &SWEEP_ENABLED,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"idem_keys.direct_path",
        c"Whether idem_claim and idem_finish bypass SPI under READ COMMITTED.",
        c"Same results either way; off runs every statement through SPI (for comparison and as an escape hatch).",
        &DIRECT_PATH,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"idem_keys.write_once",
        c"Whether a claim in a transaction block writes the key's row once, with its answer.",
        c"On the direct path, in a transaction block, a new key's claim writes nothing: idem_finish inserts the finished row, or the commit inserts the claim. Same results either way; off writes the claim at once and the finish updates it.",
        &WRITE_ONCE,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_enum_guc(
        c"idem_keys.tenant_binding",
        c"Where a caller's tenant comes from; a caller may use only its tenant's scopes.",
        c"off, role (the current role's name), setting (idem_keys.tenant_setting) or jwt (idem_keys.tenant_claim of request.jwt.claims). Tenant t owns scope t and scopes starting with t:. Superusers and BYPASSRLS roles are not bound.",
        &TENANT_BINDING,
        GucContext::Suset,
        GucFlags::default(),
    );
    // SAFETY: the hooks only read the proposed value and set the check's detail.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"idem_keys.tenant_setting",
            c"The setting that holds the caller's tenant when idem_keys.tenant_binding = setting.",
            c"A pooler or API layer sets it per request, e.g. SET LOCAL app.tenant = 'acme'.",
            &TENANT_SETTING,
            GucContext::Suset,
            GucFlags::default(),
            Some(check_tenant_setting),
            None,
            None,
        );
        GucRegistry::define_string_guc_with_hooks(
            c"idem_keys.tenant_claim",
            c"The claim of request.jwt.claims that holds the caller's tenant when idem_keys.tenant_binding = jwt.",
            c"A dotted path reaches into objects, e.g. app_metadata.tenant_id.",
            &TENANT_CLAIM,
            GucContext::Suset,
            GucFlags::default(),
            Some(check_tenant_claim),
            None,
            None,
        );
    }
    // After every define_*: unknown idem_keys.* names (typos) are then rejected instead of silently kept.
    unsafe { pg_sys::MarkGUCPrefixReserved(c"idem_keys".as_ptr()) };
}

const MICROS_PER_SECOND: i64 = 1_000_000;

pub fn lease_micros() -> i64 {
    LEASE_SECONDS.get() as i64 * MICROS_PER_SECOND
}

pub fn retention_micros() -> i64 {
    RETENTION_SECONDS.get() as i64 * MICROS_PER_SECOND
}

pub fn abandon_after_micros() -> i64 {
    ABANDON_AFTER_SECONDS.get() as i64 * MICROS_PER_SECOND
}

pub fn max_response_bytes() -> usize {
    MAX_RESPONSE_BYTES.get() as usize
}

pub fn sweep_batch_size() -> i32 {
    SWEEP_BATCH_SIZE.get()
}

pub fn sweep_delay() -> std::time::Duration {
    std::time::Duration::from_millis(SWEEP_DELAY_MILLIS.get() as u64)
}

pub fn sweep_interval_millis() -> u64 {
    SWEEP_INTERVAL_SECONDS.get() as u64 * 1000
}

/// The configured database names, trimmed, without empties or duplicates, in their given order.
pub fn sweep_databases() -> Vec<String> {
    let raw = SWEEP_DATABASES
        .get()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut names: Vec<String> = Vec::new();
    for name in raw.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    names
}

pub fn sweep_enabled() -> bool {
    SWEEP_ENABLED.get()
}

pub fn direct_path() -> bool {
    DIRECT_PATH.get()
}

pub fn write_once() -> bool {
    WRITE_ONCE.get()
}

pub fn tenant_binding() -> Binding {
    TENANT_BINDING.get()
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn check_tenant_setting(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL hands a pointer to the proposed value (possibly NULL for RESET to a NULL boot value).
    check_string(unsafe { *newval }, valid_setting_name, c"Name a setting such as app.tenant: letters, digits, _ and dots, not an idem_keys setting.")
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn check_tenant_claim(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: as above.
    check_string(
        unsafe { *newval },
        valid_claim_path,
        c"Name a claim such as tenant_id, or a dotted path such as app_metadata.tenant_id.",
    )
}

/// A string setting's check: false (22023, with this detail) unless `valid` accepts the value.
fn check_string(value: *const c_char, valid: fn(&str) -> bool, detail: &CStr) -> bool {
    // SAFETY: a NUL-terminated string owned by the GUC machinery for the duration of the check.
    let text = (!value.is_null())
        .then(|| unsafe { CStr::from_ptr(value) }.to_str().ok())
        .flatten();
    if text.is_some_and(valid) {
        return true;
    }
    // SAFETY: GUC reports the detail after the hook returns; it must be palloc'd, as GUC_check_errdetail does.
    unsafe { pg_sys::GUC_check_errdetail_string = pg_sys::pstrdup(detail.as_ptr()) };
    false
}

/// A setting name `idem_keys.tenant_setting` may hold: letters, digits, `_` and `.`, not starting with a
/// dot, and not one of ours (the tenant must come from outside the binding's own settings).
fn valid_setting_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 2 * pg_sys::NAMEDATALEN as usize
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.starts_with("idem_keys.")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

/// A claim path `idem_keys.tenant_claim` may hold: one or more non-empty member names joined by dots.
fn valid_claim_path(path: &str) -> bool {
    !path.is_empty() && path.len() <= 255 && path.split('.').all(|member| !member.is_empty())
}

#[cfg(test)]
mod value_tests {
    use super::*;

    #[test]
    fn only_plain_names_are_settings_and_paths() {
        assert!(valid_setting_name("app.tenant"));
        assert!(valid_setting_name("request.jwt.claim.tenant_id"));
        for bad in [
            "",
            ".x",
            "x.",
            "idem_keys.tenant_binding",
            "app.ten ant",
            "a;b",
        ] {
            assert!(!valid_setting_name(bad), "{bad}");
        }
        assert!(valid_claim_path("sub"));
        assert!(valid_claim_path("app_metadata.tenant_id"));
        for bad in ["", ".", "a..b", ".a", "a."] {
            assert!(!valid_claim_path(bad), "{bad}");
        }
    }
}
