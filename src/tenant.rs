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
//! security: the reconciler and the operator see every tenant. All four settings are `Suset`.

use crate::error;
use pgrx::pg_sys;
use std::cell::RefCell;
use std::ffi::{CStr, CString};

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
    fn name(self) -> &'static str {
        match self {
            Binding::Off => "off",
            Binding::Role => "role",
            Binding::Setting => "setting",
            Binding::Jwt => "jwt",
        }
    }
}

/// Between a tenant and the rest of its scope. A tenant name may not contain it, or tenant `a` would own
/// tenant `a:b`'s scopes.
pub const SEPARATOR: char = ':';

/// The setting PostgREST (and so Supabase) fills with the verified JWT's claims, per transaction.
const JWT_CLAIMS_SETTING: &CStr = c"request.jwt.claims";

/// Refuses (42501) a `scope` that the caller's tenant does not own. Free when binding is off.
#[inline]
pub fn check(function: &str, scope: &str) {
    let binding = crate::guc::tenant_binding();
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
    let tenant = match binding {
        Binding::Off => return,
        Binding::Role => Ok(role_name(role)),
        Binding::Setting => setting_text(&crate::guc::tenant_setting()).ok_or(Missing::Setting),
        Binding::Jwt => jwt_tenant(),
    };
    match tenant {
        Err(missing) => error::no_tenant(function, binding.name(), &missing.describe()),
        Ok(tenant) if tenant.is_empty() => {
            error::no_tenant(function, binding.name(), &Missing::Empty.describe())
        }
        Ok(tenant) if tenant.contains(SEPARATOR) => {
            error::no_tenant(function, binding.name(), &Missing::Separator.describe())
        }
        Ok(tenant) if !owns(&tenant, scope) => error::foreign_scope(function, scope, &tenant),
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
        let setting = crate::guc::tenant_setting().to_string_lossy().into_owned();
        let claim = crate::guc::tenant_claim().to_string_lossy().into_owned();
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

fn role_name(role: pg_sys::Oid) -> String {
    // SAFETY: noerr = false: an unknown OID raises an ERROR rather than returning NULL.
    let name = unsafe { CStr::from_ptr(pg_sys::GetUserNameFromId(role, false)) };
    name.to_string_lossy().into_owned()
}

/// A setting's current text, NULL and unknown settings as None.
fn setting_text(name: &CStr) -> Option<String> {
    // SAFETY: missing_ok = true returns NULL for an unknown name; the text is copied before anything else
    // can change the setting.
    let value = unsafe { pg_sys::GetConfigOption(name.as_ptr(), true, false) };
    (!value.is_null()).then(|| {
        unsafe { CStr::from_ptr(value) }
            .to_string_lossy()
            .into_owned()
    })
}

thread_local! {
    /// The last claims text and the tenant found in it, with the claim path it was found by: a session
    /// calls many times per token, and parsing the JSON each time would cost more than the rest of a replay.
    static LAST_JWT: RefCell<Option<(String, CString, Result<String, ()>)>> = const { RefCell::new(None) };
}

fn jwt_tenant() -> Result<String, Missing> {
    let claims = setting_text(JWT_CLAIMS_SETTING).ok_or(Missing::NoClaims)?;
    if claims.is_empty() {
        return Err(Missing::NoClaims);
    }
    let path = crate::guc::tenant_claim();
    let cached = LAST_JWT.with_borrow(|last| match last {
        Some((text, from, tenant)) if *text == claims && *from == path => Some(tenant.clone()),
        _ => None,
    });
    if let Some(tenant) = cached {
        return tenant.map_err(|()| Missing::NoClaim);
    }
    let parsed: serde_json::Value =
        serde_json::from_str(&claims).map_err(|_| Missing::BadClaims)?;
    if !parsed.is_object() {
        return Err(Missing::BadClaims);
    }
    let tenant = claim_at(&parsed, &path.to_string_lossy()).ok_or(());
    LAST_JWT.set(Some((claims, path, tenant.clone())));
    tenant.map_err(|()| Missing::NoClaim)
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

/// A setting name `idem_keys.tenant_setting` may hold: letters, digits, `_` and `.`, not starting with a
/// dot, and not one of ours (the tenant must come from outside the binding's own settings).
pub fn valid_setting_name(name: &str) -> bool {
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
pub fn valid_claim_path(path: &str) -> bool {
    !path.is_empty() && path.len() <= 255 && path.split('.').all(|member| !member.is_empty())
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
