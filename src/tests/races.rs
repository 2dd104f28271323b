//! Two and more real connections on one key. The full interleavings are isolation specs (tests/isolation);
//! these check the headline promise from a client: exactly one owner.

use super::client::*;
use std::sync::{Arc, Barrier};
use std::thread;

#[test]
fn simultaneous_claims_make_exactly_one_owner() {
    const CLIENTS: usize = 8;
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let handles: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut c = connect();
                barrier.wait();
                claim(&mut c, "race", "pay", r#"{"amount": 1}"#).outcome
            })
        })
        .collect();
    let mut outcomes: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    outcomes.sort();
    let claimed = outcomes.iter().filter(|o| *o == "claimed").count();
    assert_eq!(claimed, 1, "{outcomes:?}");
    assert!(
        outcomes
            .iter()
            .all(|o| o == "claimed" || o == "in_progress"),
        "{outcomes:?}"
    );
}

/// A claim that waits up to `wait` for another transaction's key (text of an interval).
fn claim_waiting(c: &mut postgres::Client, scope: &str, key: &str, wait: &str) -> Claim {
    let row = c
        .query_one(
            "SELECT (r).outcome, (r).attempt, (r).status_code, (r).retry_after \
               FROM (SELECT idem_claim($1, $2, '{}'::jsonb, wait => $3::text::interval) r) s",
            &[&scope, &key, &wait],
        )
        .unwrap();
    Claim {
        outcome: row.get(0),
        attempt: row.get(1),
        status_code: row.get(2),
        retry_after: row.get(3),
        ..Claim::default()
    }
}

#[test]
fn second_claim_of_an_open_transactions_key_answers_at_once_or_waits_for_its_answer() {
    let mut a = connect();
    a.batch_execute("BEGIN").unwrap();
    let token = claim(&mut a, "race2", "k", "{}").token.unwrap();
    // Without a wait: in_progress at once, not blocked on the uncommitted row; its lease is not visible yet.
    let started = std::time::Instant::now();
    let busy = claim(&mut connect(), "race2", "k", "{}");
    assert_eq!(
        (busy.outcome.as_str(), busy.attempt, busy.retry_after),
        ("in_progress", None, Some(1))
    );
    assert!(started.elapsed().as_secs() < 5, "{:?}", started.elapsed());
    // With a wait: the first's answer as soon as it commits.
    let waiter = thread::spawn(|| claim_waiting(&mut connect(), "race2", "k", "30 seconds"));
    thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        !waiter.is_finished(),
        "a claim with a wait must wait for the open transaction"
    );
    finish(
        &mut a,
        "race2",
        "k",
        token,
        201,
        r#"{"same": "transaction"}"#,
    )
    .unwrap();
    a.batch_execute("COMMIT").unwrap();
    let answered = waiter.join().unwrap();
    assert_eq!(
        (answered.outcome.as_str(), answered.status_code),
        ("replay", Some(201))
    );
}

#[test]
fn second_claim_owns_the_key_when_the_first_rolls_back() {
    let mut a = connect();
    a.batch_execute("BEGIN").unwrap();
    claim(&mut a, "race3", "k", "{}");
    let waiter = thread::spawn(|| claim_waiting(&mut connect(), "race3", "k", "30 seconds"));
    thread::sleep(std::time::Duration::from_millis(300));
    a.batch_execute("ROLLBACK").unwrap();
    let outcome = waiter.join().unwrap();
    assert_eq!(
        (outcome.outcome.as_str(), outcome.attempt),
        ("claimed", Some(1))
    );
}

#[test]
fn two_recoverers_one_winner() {
    let mut setup = connect();
    claim(&mut setup, "race4", "k", "{}");
    expire_lease(&mut setup, "race4", "k");
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut c = connect();
                barrier.wait();
                claim(&mut c, "race4", "k", "{}").outcome
            })
        })
        .collect();
    let mut outcomes: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    outcomes.sort();
    assert_eq!(outcomes, ["in_progress", "recovered"]);
}

#[test]
fn repeatable_read_duplicate_gets_a_serialization_failure() {
    let mut a = connect();
    let mut b = connect();
    b.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1")
        .unwrap();
    let token = claim(&mut a, "race5", "k", "{}").token.unwrap();
    finish(&mut a, "race5", "k", token, 200, "{}").unwrap();
    // b's snapshot predates the committed claim it now conflicts with: "retry the call".
    assert_eq!(
        sqlstate(try_claim(&mut b, "race5", "k", "{}", None)),
        "40001"
    );
    b.batch_execute("ROLLBACK").unwrap();
    assert_eq!(claim(&mut b, "race5", "k", "{}").outcome, "replay");
}
