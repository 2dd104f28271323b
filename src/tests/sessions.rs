//! Every outcome of idem_claim, and finish, release, lookup and sweep, as an application sees them.

use super::client::*;

const BODY: &str = r#"{"amount": 1000, "currency": "EUR", "customer_id": "c_1"}"#;

#[test]
fn first_claim_then_double_tap_then_replay() {
    let mut c = connect();
    let first = claim(&mut c, "outcomes", "k1", BODY);
    assert_eq!(first.outcome, "claimed");
    assert_eq!(first.attempt, Some(1));
    let token = first.token.expect("claimed carries the token");
    assert!(token > 0);

    let tap = claim(&mut c, "outcomes", "k1", BODY);
    assert_eq!(tap.outcome, "in_progress");
    assert_eq!(tap.token, None, "only the owner gets the token");
    let retry_after = tap.retry_after.unwrap();
    assert!(
        (1..=300).contains(&retry_after),
        "retry_after {retry_after} within the default 5 min lease"
    );

    c.execute(
        "SELECT idem_finish('outcomes', 'k1', $1, 201, '{\"id\": \"ch_1\"}'::jsonb, '{\"Location\": \"/ch_1\"}'::jsonb)",
        &[&token],
    )
    .unwrap();

    // Key order and whitespace of the retried body do not matter.
    let retry = claim(
        &mut c,
        "outcomes",
        "k1",
        r#"{"customer_id":"c_1","currency":"EUR","amount":1000.0}"#,
    );
    assert_eq!(retry.outcome, "replay");
    assert_eq!(retry.token, None);
    assert_eq!(retry.status_code, Some(201));
    assert_eq!(retry.response.as_deref(), Some(r#"{"id": "ch_1"}"#));
    assert_eq!(retry.headers.as_deref(), Some(r#"{"Location": "/ch_1"}"#));
    assert_eq!(retry.retry_after, None);
}

#[test]
fn same_key_other_body_is_a_mismatch_in_both_states() {
    let mut c = connect();
    let token = claim(&mut c, "mismatch", "k", BODY).token.unwrap();
    assert_eq!(
        claim(&mut c, "mismatch", "k", r#"{"amount": 2000}"#).outcome,
        "mismatch"
    );
    finish(&mut c, "mismatch", "k", token, 200, "{}").unwrap();
    let other = claim(&mut c, "mismatch", "k", r#"{"amount": 2000}"#);
    assert_eq!(other.outcome, "mismatch");
    assert_eq!(
        (other.token, other.status_code, other.response),
        (None, None, None),
        "a mismatch leaks no answer"
    );
    // A different lease-ended body must not take the key over either.
    let t2 = claim(&mut c, "mismatch", "k2", BODY).token.unwrap();
    expire_lease(&mut c, "mismatch", "k2");
    assert_eq!(claim(&mut c, "mismatch", "k2", "[]").outcome, "mismatch");
    assert!(
        finish(&mut c, "mismatch", "k2", t2, 200, "{}").is_ok(),
        "the owner still owns it"
    );
}

#[test]
fn dead_owner_is_recovered_with_a_larger_token_and_fenced_out() {
    let mut c = connect();
    let dead = claim(&mut c, "recover", "k", BODY);
    expire_lease(&mut c, "recover", "k");
    let rescuer = claim(&mut c, "recover", "k", BODY);
    assert_eq!(rescuer.outcome, "recovered");
    assert_eq!(rescuer.attempt, Some(2));
    assert!(
        rescuer.token.unwrap() > dead.token.unwrap(),
        "fencing tokens grow"
    );

    // The dead owner wakes up and tries to finish: refused, nothing changed.
    let before = scope_digest(&mut c, "recover");
    assert_eq!(
        sqlstate(finish(
            &mut c,
            "recover",
            "k",
            dead.token.unwrap(),
            200,
            "{}"
        )),
        "55000"
    );
    assert_eq!(scope_digest(&mut c, "recover"), before);

    finish(
        &mut c,
        "recover",
        "k",
        rescuer.token.unwrap(),
        200,
        r#"{"reconciled": true}"#,
    )
    .unwrap();
    let replay = claim(&mut c, "recover", "k", BODY);
    assert_eq!(
        (replay.outcome.as_str(), replay.attempt),
        ("replay", Some(2))
    );

    // A third takeover counts on.
    let k2 = claim(&mut c, "recover", "k2", BODY);
    expire_lease(&mut c, "recover", "k2");
    let second = claim(&mut c, "recover", "k2", BODY);
    expire_lease(&mut c, "recover", "k2");
    let third = claim(&mut c, "recover", "k2", BODY);
    assert_eq!(
        (k2.attempt, second.attempt, third.attempt),
        (Some(1), Some(2), Some(3))
    );
    assert_eq!(third.outcome, "recovered");
}

#[test]
fn late_owner_may_still_finish_if_nobody_took_over() {
    let mut c = connect();
    let owner = claim(&mut c, "late", "k", BODY);
    expire_lease(&mut c, "late", "k");
    finish(&mut c, "late", "k", owner.token.unwrap(), 200, "{}").unwrap();
    assert_eq!(claim(&mut c, "late", "k", BODY).outcome, "replay");
}

#[test]
fn expired_answer_counts_as_absent_without_a_sweep() {
    let mut c = connect();
    let first = claim(&mut c, "expiry", "k", BODY);
    finish(&mut c, "expiry", "k", first.token.unwrap(), 200, "{}").unwrap();
    expire_answer(&mut c, "expiry", "k");
    assert_eq!(lookup(&mut c, "expiry", "k"), None);
    // Even with another body: the old request is forgotten.
    let again = claim(&mut c, "expiry", "k", r#"{"new": true}"#);
    assert_eq!(
        (again.outcome.as_str(), again.attempt),
        ("claimed", Some(1))
    );
    assert!(again.token.unwrap() > first.token.unwrap());
}

#[test]
fn finish_twice_with_the_same_answer_is_a_no_op() {
    let mut c = connect();
    let token = claim(&mut c, "refinish", "k", BODY).token.unwrap();
    finish(&mut c, "refinish", "k", token, 200, r#"{"a": 1}"#).unwrap();
    let before = scope_digest(&mut c, "refinish");
    finish(&mut c, "refinish", "k", token, 200, r#"{"a": 1}"#).unwrap();
    assert_eq!(scope_digest(&mut c, "refinish"), before);
    assert_eq!(
        sqlstate(finish(&mut c, "refinish", "k", token, 200, r#"{"a": 2}"#)),
        "55000"
    );
    assert_eq!(
        sqlstate(finish(&mut c, "refinish", "k", token, 500, r#"{"a": 1}"#)),
        "55000"
    );
    assert_eq!(scope_digest(&mut c, "refinish"), before);
}

#[test]
fn release_gives_the_key_back() {
    let mut c = connect();
    let token = claim(&mut c, "release", "k", BODY).token.unwrap();
    let released: bool = c
        .query_one("SELECT idem_release('release', 'k', $1)", &[&token])
        .unwrap()
        .get(0);
    assert!(released);
    let next = claim(
        &mut c,
        "release",
        "k",
        r#"{"other": "body is fine after a release"}"#,
    );
    assert_eq!((next.outcome.as_str(), next.attempt), ("claimed", Some(1)));
    let stale: bool = c
        .query_one("SELECT idem_release('release', 'k', $1)", &[&token])
        .unwrap()
        .get(0);
    assert!(
        !stale,
        "a token that no longer owns the key releases nothing"
    );
    assert_eq!(
        lookup(&mut c, "release", "k").unwrap().outcome,
        "in_progress"
    );
    finish(&mut c, "release", "k", next.token.unwrap(), 200, "{}").unwrap();
    let after_finish: bool = c
        .query_one(
            "SELECT idem_release('release', 'k', $1)",
            &[&next.token.unwrap()],
        )
        .unwrap()
        .get(0);
    assert!(!after_finish, "a finished key cannot be released");
    assert_eq!(lookup(&mut c, "release", "k").unwrap().outcome, "replay");
}

#[test]
fn lookup_reads_without_claiming() {
    let mut c = connect();
    assert_eq!(lookup(&mut c, "lookup", "nobody"), None);
    let token = claim(&mut c, "lookup", "k", BODY).token.unwrap();
    let seen = lookup(&mut c, "lookup", "k").unwrap();
    assert_eq!(
        (seen.outcome.as_str(), seen.token, seen.attempt),
        ("in_progress", None, Some(1))
    );
    assert!(seen.retry_after.unwrap() >= 1);
    expire_lease(&mut c, "lookup", "k");
    assert_eq!(
        lookup(&mut c, "lookup", "k").unwrap().retry_after,
        Some(0),
        "0: the lease has ended"
    );
    c.execute(
        "SELECT idem_finish('lookup', 'k', $1, 204, NULL::bytea)",
        &[&token],
    )
    .unwrap();
    let done = lookup(&mut c, "lookup", "k").unwrap();
    assert_eq!(
        (done.outcome.as_str(), done.status_code, done.response),
        ("replay", Some(204), None)
    );
}

#[test]
fn bytea_requests_and_responses_round_trip() {
    let mut c = connect();
    let body: &[u8] = b"amount=1000&currency=EUR\x00\xff";
    let row = c
        .query_one(
            "SELECT (r).outcome, (r).token FROM (SELECT idem_claim('bytes', 'k', $1::bytea) r) s",
            &[&body],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "claimed");
    let token: i64 = row.get(1);
    let answer: &[u8] = b"\x89PNG\r\n";
    c.execute(
        "SELECT idem_finish('bytes', 'k', $1, 200, $2::bytea, '{}'::jsonb)",
        &[&token, &answer],
    )
    .unwrap();
    let replay = c
        .query_one(
            "SELECT (r).outcome, (r).response_bytes, (r).response IS NULL FROM (SELECT idem_claim('bytes', 'k', $1::bytea) r) s",
            &[&body],
        )
        .unwrap();
    assert_eq!(replay.get::<_, String>(0), "replay");
    assert_eq!(replay.get::<_, Vec<u8>>(1), answer);
    assert!(replay.get::<_, bool>(2));
    let other: &[u8] = b"amount=2000";
    let mismatch: String = c
        .query_one(
            "SELECT (idem_claim('bytes', 'k', $1::bytea)).outcome",
            &[&other],
        )
        .unwrap()
        .get(0);
    assert_eq!(mismatch, "mismatch");
}

#[test]
fn sweep_deletes_only_what_is_expired_or_abandoned() {
    let mut c = connect();
    c.batch_execute("SET idem_keys.abandon_after = '1h'")
        .unwrap();
    for i in 0..7 {
        let key = format!("old{i}");
        let token = claim(&mut c, "sweep", &key, BODY).token.unwrap();
        finish(&mut c, "sweep", &key, token, 200, "{}").unwrap();
        expire_answer(&mut c, "sweep", &key);
    }
    let kept = claim(&mut c, "sweep", "fresh", BODY).token.unwrap();
    finish(&mut c, "sweep", "fresh", kept, 200, "{}").unwrap();
    claim(&mut c, "sweep", "running", BODY);
    claim(&mut c, "sweep", "stale", BODY);
    expire_lease(&mut c, "sweep", "stale");
    claim(&mut c, "sweep", "abandoned", BODY);
    c.execute(
        "UPDATE idem_keys SET lease_ends_at = clock_timestamp() - interval '2 hours' WHERE scope = 'sweep' AND key = 'abandoned'",
        &[],
    )
    .unwrap();

    // Batches of 2 still delete all 8: the loop runs until a batch comes back short.
    let deleted: i64 = c
        .query_one("SELECT idem_sweep(batch_size => 2)", &[])
        .unwrap()
        .get(0);
    assert!(deleted >= 8, "deleted {deleted}");
    let left: Vec<String> = c
        .query(
            "SELECT key FROM idem_keys WHERE scope = 'sweep' ORDER BY key",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, ["fresh", "running", "stale"]);
}

#[test]
fn stale_and_stats_report_the_table() {
    let mut c = connect();
    let dead = claim(&mut c, "report", "dead", BODY);
    expire_lease(&mut c, "report", "dead");
    claim(&mut c, "report", "alive", BODY);
    let stale = c
        .query(
            "SELECT key, token, attempt FROM idem_stale(max_rows => 100000) WHERE scope = 'report'",
            &[],
        )
        .unwrap();
    assert_eq!(stale.len(), 1);
    assert_eq!(stale[0].get::<_, String>(0), "dead");
    assert_eq!(stale[0].get::<_, i64>(1), dead.token.unwrap());
    let none = c
        .query(
            "SELECT 1 FROM idem_stale(older_than => '1 hour') WHERE scope = 'report'",
            &[],
        )
        .unwrap();
    assert!(none.is_empty(), "its lease ended only a second ago");

    let stats = c
        .query_one("SELECT in_progress, stale, finished, expired, oldest_in_progress_age IS NOT NULL, table_bytes FROM idem_stats()", &[])
        .unwrap();
    assert!(stats.get::<_, i64>(0) >= 1);
    assert!(stats.get::<_, i64>(1) >= 1);
    assert!(stats.get::<_, bool>(4));
    assert!(stats.get::<_, i64>(5) > 0);
}
