//! The security model: an application role with no table privilege uses the API and nothing else.

use super::client::*;

#[test]
fn an_unprivileged_role_uses_the_api_but_not_the_table() {
    let mut c = connect();
    c.batch_execute(
        "DO $$ BEGIN
           IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'idem_app') THEN CREATE ROLE idem_app; END IF;
         END $$;
         GRANT USAGE ON SCHEMA public TO idem_app;
         SET ROLE idem_app;",
    )
    .unwrap();
    let first = claim(&mut c, "sec", "k", "{}");
    assert_eq!(first.outcome, "claimed");
    finish(&mut c, "sec", "k", first.token.unwrap(), 200, "{}").unwrap();
    assert_eq!(lookup(&mut c, "sec", "k").unwrap().outcome, "replay");
    let t2 = claim(&mut c, "sec", "k2", "{}").token.unwrap();
    assert!(c
        .query_one("SELECT idem_release('sec', 'k2', $1)", &[&t2])
        .unwrap()
        .get::<_, bool>(0));
    c.query_one(
        "SELECT idem_fingerprint('{}'::jsonb), idem_fingerprint('\\x00'::bytea)",
        &[],
    )
    .unwrap();

    for sql in [
        "SELECT * FROM idem_keys",
        "UPDATE idem_keys SET status_code = 500",
        "DELETE FROM idem_keys",
        "INSERT INTO idem_keys (scope, key, fingerprint, token, attempt, created_at, claimed_at, lease_ends_at)
           VALUES ('sec', 'x', '\\x00', 1, 1, now(), now(), now())",
        "SELECT nextval('idem_keys_token_seq')",
        "SELECT idem_sweep()",
        "SELECT * FROM idem_stale()",
        "SELECT * FROM idem_stats()",
    ] {
        assert_eq!(sqlstate(c.batch_execute(sql)), "42501", "{sql}");
    }
    c.batch_execute("RESET ROLE").unwrap();
    assert_eq!(scope_digest(&mut c, "sec").split(':').next(), Some("1"));
}

#[test]
fn every_security_definer_function_pins_its_search_path() {
    let mut c = connect();
    let unpinned: Vec<String> = c
        .query(
            "SELECT p.oid::regprocedure::text FROM pg_proc p
               JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
               JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'idem_keys'
              WHERE p.prosecdef
                AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, public, pg_temp'], false)",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(unpinned.is_empty(), "unpinned: {unpinned:?}");
}
