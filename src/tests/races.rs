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

#[test]
fn second_claim_waits_for_an_open_transaction_then_sees_its_answer() {
    let mut a = connect();
    a.batch_execute("BEGIN").unwrap();
    let token = claim(&mut a, "race2", "k", "{}").token.unwrap();
    let waiter = thread::spawn(|| {
        let mut b = connect();
        let started = std::time::Instant::now();
        let outcome = claim(&mut b, "race2", "k", "{}");
        (outcome, started.elapsed())
    });
    thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        !waiter.is_finished(),
        "the second claim must wait on the uncommitted first"
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
    let (outcome, waited) = waiter.join().unwrap();
    assert_eq!(outcome.outcome, "replay");
    assert_eq!(outcome.status_code, Some(201));
    assert!(waited.as_millis() >= 100, "waited only {waited:?}");
}

#[test]
fn second_claim_owns_the_key_when_the_first_rolls_back() {
    let mut a = connect();
    a.batch_execute("BEGIN").unwrap();
    claim(&mut a, "race3", "k", "{}");
    let waiter = thread::spawn(|| {
        let mut b = connect();
        claim(&mut b, "race3", "k", "{}")
    });
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
