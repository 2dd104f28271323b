//! The security model: an application role with no table privilege uses the API and nothing else.

use super::client::*;

#[test]
fn an_unprivileged_role_uses_the_api_but_not_the_table() {
    let mut c = connect();
    c.batch_execute(
        "DO $$ BEGIN
           IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'idem_app') THEN CREATE ROLE idem_app; END IF;
         END $$;
         -- Two sessions granting on one schema at once: 'tuple concurrently updated'. Tests that grant
         -- take turns (the lock lasts until this batch's implicit transaction commits).
         SELECT pg_advisory_xact_lock(4711);
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

/// The hot verbs written in C, which pin the search path themselves around the SQL they run (src/catalog.rs)
/// instead of in a SET clause.
const PINNED_BY_THE_LIBRARY: [&str; 7] = [
    "idem_claim(text,text,bytea,boolean,interval,interval)",
    "idem_claim(text,text,bytea,interval,interval)",
    "idem_claim(text,text,jsonb,interval,interval)",
    "idem_claim(text,text,text,text,bytea,boolean,interval,interval)",
    "idem_finish(text,text,bigint,integer,bytea,jsonb,interval)",
    "idem_finish(text,text,bigint,integer,jsonb,jsonb,interval)",
    "idem_lookup(text,text)",
];

#[test]
fn every_security_definer_function_pins_its_search_path() {
    let mut c = connect();
    let unpinned: Vec<String> = c
        .query(
            "SELECT p.oid::regprocedure::text FROM pg_proc p
               JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
               JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'idem_keys'
              WHERE p.prosecdef
                AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, public, pg_temp'], false)
              ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        unpinned, PINNED_BY_THE_LIBRARY,
        "unpinned SECURITY DEFINER functions"
    );
    let languages: Vec<String> = c
        .query(
            "SELECT DISTINCT l.lanname::text FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
              WHERE p.oid::regprocedure::text = ANY ($1)",
            &[&PINNED_BY_THE_LIBRARY.to_vec()],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(languages, ["c"], "only C functions can pin their own path");
}

/// A caller whose search_path puts its own objects first (a table, a sequence and a text `=` operator
/// named as the functions' SQL names them; then a temporary table, pg_temp first) gets the same answers
/// from the extension's table, on the direct path and on SPI, and none of its objects is touched.
#[test]
fn a_callers_search_path_reaches_nothing_inside_the_functions() {
    let mut c = connect();
    c.batch_execute(
        "DO $$ BEGIN
           -- A role of this test's own: tests run in parallel, and two may not create one role at once.
           IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'idem_shadow_app') THEN
             CREATE ROLE idem_shadow_app;
           END IF;
         END $$;
         SELECT pg_advisory_xact_lock(4711); -- see an_unprivileged_role_uses_the_api_but_not_the_table
         GRANT USAGE ON SCHEMA public TO idem_shadow_app;
         DROP SCHEMA IF EXISTS idem_shadow CASCADE;
         CREATE SCHEMA idem_shadow AUTHORIZATION idem_shadow_app;
         CREATE TABLE idem_shadow.idem_keys (LIKE public.idem_keys INCLUDING ALL);
         ALTER TABLE idem_shadow.idem_keys OWNER TO idem_shadow_app;
         CREATE SEQUENCE idem_shadow.idem_keys_token_seq;
         ALTER SEQUENCE idem_shadow.idem_keys_token_seq OWNER TO idem_shadow_app;
         SET ROLE idem_shadow_app;
         CREATE FUNCTION idem_shadow.trap(text, text) RETURNS boolean LANGUAGE plpgsql AS
           $$ BEGIN RAISE EXCEPTION 'the caller''s = operator ran inside idem_keys'; END $$;
         CREATE OPERATOR idem_shadow.= (LEFTARG = text, RIGHTARG = text, FUNCTION = idem_shadow.trap);
         CREATE TEMP TABLE idem_keys (LIKE idem_shadow.idem_keys);",
    )
    .unwrap();
    for (path, direct) in [
        ("idem_shadow, pg_catalog, public", "on"),
        ("idem_shadow, pg_catalog, public", "off"),
        ("pg_temp, idem_shadow, pg_catalog, public", "on"),
        ("pg_temp, idem_shadow, pg_catalog, public", "off"),
    ] {
        c.execute("SELECT set_config('search_path', $1, false)", &[&path])
            .unwrap();
        c.execute(
            "SELECT set_config('idem_keys.direct_path', $1, false)",
            &[&direct],
        )
        .unwrap();
        let case = format!("search_path {path}, direct_path {direct}");
        let key = format!("{}-{direct}", path.len());
        let first = claim(&mut c, "shadow", &key, "{}");
        assert_eq!(first.outcome, "claimed", "{case}");
        finish(
            &mut c,
            "shadow",
            &key,
            first.token.unwrap(),
            201,
            "{\"ok\": 1}",
        )
        .unwrap();
        let again = claim(&mut c, "shadow", &key, "{}");
        assert_eq!(
            (again.outcome.as_str(), again.status_code),
            ("replay", Some(201)),
            "{case}"
        );
        assert_eq!(
            claim(&mut c, "shadow", &key, "{\"x\": 2}").outcome,
            "mismatch",
            "{case}"
        );
        assert_eq!(
            lookup(&mut c, "shadow", &key).unwrap().outcome,
            "replay",
            "{case}"
        );
        // A lease that ends at once: the next claim takes the key over, which only SPI does.
        let lapsed = try_claim(
            &mut c,
            "shadow",
            &format!("{key}-lapsed"),
            "{}",
            Some("1 microsecond"),
        )
        .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let recovered = claim(&mut c, "shadow", &format!("{key}-lapsed"), "{}");
        assert_eq!(
            (recovered.outcome.as_str(), recovered.attempt),
            ("recovered", Some(2)),
            "{case}"
        );
        assert!(recovered.token > lapsed.token, "{case}");
    }
    let shadow_rows: i64 = c
        .query_one(
            "SELECT (SELECT count(*) FROM idem_shadow.idem_keys) + (SELECT count(*) FROM pg_temp.idem_keys)
                  + (SELECT count(*) FROM idem_shadow.idem_keys_token_seq WHERE is_called)",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        shadow_rows, 0,
        "the caller's table, temporary table and sequence stay untouched"
    );
    c.batch_execute("DROP TABLE pg_temp.idem_keys; RESET ROLE; RESET search_path; DROP SCHEMA idem_shadow CASCADE")
        .unwrap();
    assert_eq!(scope_digest(&mut c, "shadow").split(':').next(), Some("8"));
}
