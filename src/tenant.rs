//! Tenant binding: with `idem_keys.tenant_binding` on, a caller may use only its own tenant's scopes.
//!
//! The rule is a naming one, so it costs no table read: tenant `acme` owns the scope `acme` and every scope
//! that starts with `acme:` (`acme:POST /payments`). Where the caller's tenant comes from is the binding
//! mode, one per identity model:
//! - `role`: the name of the current role, as `SET ROLE` (or the login) made it. SECURITY DEFINER does not
//!   change it, so neither our own functions nor a caller's can lend another identity.
//! - `setting`: the text of the setting `idem_keys.tenant_setting` names (`app.tenant` by default), which
//!   a pooler or API layer sets per request.
//! - `jwt`: the claim `idem_keys.tenant_claim` (`sub` by default; a dotted path reaches into objects) of
//!   the JSON in `request.jwt.claims`, where PostgREST and Supabase put the verified token's claims.
//!
//! The check runs on the arguments, before any read: a refused caller learns nothing about the scope's
//! keys, not even whether one exists. Superusers and `BYPASSRLS` roles are not bound, as with row-level
//! security: the reconciler and the operator see every tenant. All three settings are `Suset`, and read
//! here with `GetConfigOption`, without a copy.

use crate::error;
use crate::guc::{self, Binding};
use pgrx::pg_sys;
use std::cell::RefCell;
use std::ffi::CStr;

/// Between a tenant and the rest of its scope. A tenant name may not contain it, or tenant `a` would own
/// tenant `a:b`'s scopes.
pub const SEPARATOR: char = ':';

/// The setting PostgREST (and so Supabase) fills with the verified JWT's claims, per transaction.
const JWT_CLAIMS_SETTING: &CStr = c"request.jwt.claims";
/// Our settings that say where the tenant is (src/guc.rs defines them).
const TENANT_SETTING: &CStr = c"idem_keys.tenant_setting";
const TENANT_CLAIM: &CStr = c"idem_keys.tenant_claim";

/// Refuses (42501) a `scope` that the caller's tenant does not own. Free when binding is off.
#[inline]
pub fn check(function: &str, scope: &str) {
    let binding = guc::tenant_binding();
    if binding == Binding::Off {
        return;
    }
    check_bound(function, scope, binding)
}

#[cold]
fn check_bound(function: &str, scope: &str, binding: Binding) {
    // SAFETY: reads of the backend's own role state; the syscache lookups behind them never fail for the
    // current role, which cannot be dropped while it is in use.
    let role = unsafe { pg_sys::GetOuterUserId() };
    if unsafe { pg_sys::has_bypassrls_privilege(role) } {
        return;
    }
    let judge = |tenant: Result<&str, Missing>| judge(function, scope, binding, tenant);
    match binding {
        Binding::Off => {}
        // SAFETY: noerr = false: an unknown OID raises an ERROR rather than returning NULL.
        Binding::Role => judge(Ok(&unsafe {
            CStr::from_ptr(pg_sys::GetUserNameFromId(role, false))
        }
        .to_string_lossy())),
        Binding::Setting => {
            let name = setting(TENANT_SETTING).unwrap_or_default();
            judge(
                setting(name)
                    .map(|tenant| tenant.to_string_lossy())
                    .as_deref()
                    .ok_or(Missing::Setting),
            )
        }
        Binding::Jwt => with_jwt_tenant(|tenant| judge(tenant)),
    }
}

/// Refuses the call unless `tenant` (or why there is none) lets the caller use `scope`.
fn judge(function: &str, scope: &str, binding: Binding, tenant: Result<&str, Missing>) {
    match tenant {
        Err(missing) => error::no_tenant(function, binding.name(), &missing.describe()),
        Ok("") => error::no_tenant(function, binding.name(), &Missing::Empty.describe()),
        Ok(tenant) if tenant.contains(SEPARATOR) => {
            error::no_tenant(function, binding.name(), &Missing::Separator.describe())
        }
        Ok(tenant) if !owns(tenant, scope) => {
            error::foreign_scope(function, scope, tenant, SEPARATOR)
        }
        Ok(_) => {}
    }
}

/// Whether tenant owns scope: the scope is the tenant, or the tenant followed by the separator and more.
pub fn owns(tenant: &str, scope: &str) -> bool {
    match scope.strip_prefix(tenant) {
        Some(rest) => rest.is_empty() || rest.starts_with(SEPARATOR),
        None => false,
    }
}

/// Why a caller has no tenant, for the error's DETAIL.
#[derive(Clone, Copy)]
enum Missing {
    Setting,
    NoClaims,
    BadClaims,
    NoClaim,
    Empty,
    Separator,
}

impl Missing {
    fn describe(&self) -> String {
        let named = |ours| setting(ours).unwrap_or_default().to_string_lossy();
        let (setting, claim) = (named(TENANT_SETTING), named(TENANT_CLAIM));
        match self {
            Missing::Setting => format!("The setting {setting} is not set."),
            Missing::NoClaims => "The setting request.jwt.claims is not set.".to_string(),
            Missing::BadClaims => "request.jwt.claims is not a JSON object.".to_string(),
            Missing::NoClaim => format!("request.jwt.claims has no string or number claim {claim}."),
            Missing::Empty => "The caller's tenant is empty.".to_string(),
            Missing::Separator => format!("The caller's tenant contains \"{SEPARATOR}\", which separates a tenant from the rest of a scope."),
        }
    }
}

/// A setting's current text, without copying it; NULL and unknown settings as None. Valid until the
/// setting changes, which nothing does during one check.
fn setting(name: &CStr) -> Option<&'static CStr> {
    // SAFETY: missing_ok = true returns NULL for an unknown name.
    let value = unsafe { pg_sys::GetConfigOption(name.as_ptr(), true, false) };
    (!value.is_null()).then(|| unsafe { CStr::from_ptr(value) })
}

/// The last claims text, the claim path, and the tenant found by that path (or why none was): a session
/// calls many times with one token, and parsing its JSON each time would cost more than a replay's read.
struct LastJwt {
    claims: Vec<u8>,
    path: Vec<u8>,
    tenant: Result<String, Missing>,
}

thread_local! {
    static LAST_JWT: RefCell<Option<LastJwt>> = const { RefCell::new(None) };
}

/// Calls `f` with the tenant of `request.jwt.claims`, parsing the claims only when they (or the claim
/// path) changed since the last call.
fn with_jwt_tenant(f: impl FnOnce(Result<&str, Missing>)) {
    let claims = match setting(JWT_CLAIMS_SETTING) {
        Some(claims) if !claims.is_empty() => claims.to_bytes(),
        _ => return f(Err(Missing::NoClaims)),
    };
    let path = setting(TENANT_CLAIM).unwrap_or_default().to_bytes();
    let hit = LAST_JWT.with_borrow(|last| {
        last.as_ref()
            .is_some_and(|last| last.claims == claims && last.path == path)
    });
    if !hit {
        let tenant = parse_tenant(claims, &String::from_utf8_lossy(path));
        LAST_JWT.set(Some(LastJwt {
            claims: claims.to_vec(),
            path: path.to_vec(),
            tenant,
        }));
    }
    // f raises its ERROR as a Rust panic (pgrx turns it into PostgreSQL's at the function's boundary), and
    // unwinding releases this shared borrow.
    LAST_JWT.with_borrow(|last| {
        let last = last.as_ref().expect("set above");
        f(match &last.tenant {
            Ok(tenant) => Ok(tenant),
            Err(missing) => Err(*missing),
        })
    })
}

fn parse_tenant(claims: &[u8], path: &str) -> Result<String, Missing> {
    let parsed: serde_json::Value =
        serde_json::from_slice(claims).map_err(|_| Missing::BadClaims)?;
    if !parsed.is_object() {
        return Err(Missing::BadClaims);
    }
    claim_at(&parsed, path).ok_or(Missing::NoClaim)
}

/// The string (or number, as its text) at a dotted path of object members.
fn claim_at(claims: &serde_json::Value, path: &str) -> Option<String> {
    let mut value = claims;
    for member in path.split('.') {
        value = value.get(member)?;
    }
    match value {
        serde_json::Value::String(text) => Some(text.clone()),
        serde_json::Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod rule_tests {
    use super::*;

    #[test]
    fn a_tenant_owns_its_name_and_what_follows_the_separator() {
        assert!(owns("acme", "acme"));
        assert!(owns("acme", "acme:POST /payments"));
        assert!(owns("acme", "acme:"));
        assert!(!owns("acme", "acme2"));
        assert!(!owns("acme", "acm"));
        assert!(!owns("acme", ""));
        assert!(!owns("acme", "ACME"));
        assert!(!owns("acme", "x:acme"));
    }

    #[test]
    fn claims_are_found_by_dotted_path() {
        let claims: serde_json::Value = serde_json::from_str(
            r#"{"sub": "u1", "app_metadata": {"tenant_id": "t9", "n": 42}, "list": [1], "f": false}"#,
        )
        .unwrap();
        assert_eq!(claim_at(&claims, "sub").as_deref(), Some("u1"));
        assert_eq!(
            claim_at(&claims, "app_metadata.tenant_id").as_deref(),
            Some("t9")
        );
        assert_eq!(claim_at(&claims, "app_metadata.n").as_deref(), Some("42"));
        assert_eq!(claim_at(&claims, "app_metadata"), None);
        assert_eq!(claim_at(&claims, "list"), None);
        assert_eq!(claim_at(&claims, "f"), None);
        assert_eq!(claim_at(&claims, "missing"), None);
    }
}
