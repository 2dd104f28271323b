//! The server-side wait (`idem_claim(..., wait => ...)`) seen from real clients: what it returns, that it
//! holds nothing the owner needs, and that it shows up as an extension wait. The interleavings themselves
//! (finish, release, lease end, timeout, cancel) are in tests/isolation/specs/claim_wait.spec.

use super::client::*;
use postgres::Client;
use std::thread;
use std::time::{Duration, Instant};

fn claim_waiting(c: &mut Client, scope: &str, key: &str, wait: &str) -> (String, Option<i32>) {
    let row = c
        .query_one(
            "SELECT (r).outcome, (r).status_code FROM (SELECT idem_claim($1, $2, '{}'::jsonb, wait => $3::text::interval) r) s",
            &[&scope, &key, &wait],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

/// Polls until some backend sleeps in the claim's wait (wait_event_type 'Extension'), at most 10 s.
fn until_someone_waits(c: &mut Client) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let waiting: bool = c
            .query_one(
                "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE wait_event_type = 'Extension')",
                &[],
            )
            .unwrap()
            .get(0);
        if waiting {
            return;
        }
        thread::sleep(Duration::from_millis(10));
    }
    panic!("no backend entered the wait within 10 s");
}

#[test]
fn waiting_retry_holds_no_lock_and_gets_the_answer() {
    let mut owner = connect();
    let token = claim(&mut owner, "wait1", "k", "{}").token.unwrap();
    let waiter = thread::spawn(|| claim_waiting(&mut connect(), "wait1", "k", "30 seconds"));
    until_someone_waits(&mut owner);
    // If the waiter held the row (or any lock the owner needs), this finish would fail on lock_timeout.
    owner.batch_execute("SET lock_timeout = '200ms'").unwrap();
    finish(
        &mut owner,
        "wait1",
        "k",
        token,
        201,
        r#"{"charge": "ch_1"}"#,
    )
    .unwrap();
    assert_eq!(waiter.join().unwrap(), ("replay".to_string(), Some(201)));
}

#[test]
fn wait_gives_up_with_in_progress_at_its_deadline() {
    let mut owner = connect();
    claim(&mut owner, "wait2", "k", "{}");
    let (outcome, _) = claim_waiting(&mut owner, "wait2", "k", "50 milliseconds");
    assert_eq!(outcome, "in_progress");
}

#[test]
fn repeatable_read_does_not_wait_for_what_it_cannot_see() {
    let mut owner = connect();
    claim(&mut owner, "wait3", "k", "{}");
    let mut retry = connect();
    retry
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .unwrap();
    let started = Instant::now();
    let (outcome, _) = claim_waiting(&mut retry, "wait3", "k", "1 hour");
    assert_eq!(outcome, "in_progress");
    // It answered without sleeping through the hour: its snapshot could never see the finish.
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "waited {:?}",
        started.elapsed()
    );
    retry.batch_execute("ROLLBACK").unwrap();
}
