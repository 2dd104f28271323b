//! Property tests of idem_fingerprint(jsonb) against the server's own jsonb parser: values equal as jsonb
//! fingerprint equal, whatever their spelling; any other difference changes the fingerprint.

use super::client::connect;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Number, Value};
use std::cell::RefCell;

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-1_000_000i64..1_000_000).prop_map(|n| Value::Number(n.into())),
        (-1.0e6f64..1.0e6)
            .prop_map(|f| Value::Number(Number::from_f64((f * 1000.0).round() / 1000.0).unwrap())),
        "[a-z0-9 \"\\\\é\u{1F600}.]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,4}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

/// Another spelling of the same jsonb value: keys reversed, a duplicate key whose first value jsonb
/// discards, extra whitespace, and numbers with trailing fractional zeros.
fn respell(value: &Value, depth: usize) -> String {
    match value {
        Value::Object(map) => {
            let mut parts: Vec<String> = map
                .iter()
                .rev()
                .map(|(k, v)| {
                    format!(
                        "\n {} :\t{}",
                        Value::String(k.clone()),
                        respell(v, depth + 1)
                    )
                })
                .collect();
            if let Some((k, _)) = map.iter().next() {
                parts.insert(
                    0,
                    format!("{}: \"discarded duplicate\"", Value::String(k.clone())),
                );
            }
            format!("{{ {} }}", parts.join(" ,"))
        }
        Value::Array(items) => {
            format!(
                "[ {} ]",
                items
                    .iter()
                    .map(|v| respell(v, depth + 1))
                    .collect::<Vec<_>>()
                    .join(" , ")
            )
        }
        Value::Number(n) => {
            let text = n.to_string();
            let zeros = "0".repeat(depth % 3 + 1);
            if text.contains('.') || text.contains('e') {
                format!("{text}{zeros}")
            } else {
                format!("{text}.{zeros}")
            }
        }
        other => other.to_string(),
    }
}

fn fingerprints_equal(c: &mut postgres::Client, a: &str, b: &str) -> bool {
    c.query_one(
        "SELECT idem_fingerprint($1::text::jsonb) = idem_fingerprint($2::text::jsonb)",
        &[&a, &b],
    )
    .unwrap()
    .get(0)
}

fn jsonb_equal(c: &mut postgres::Client, a: &str, b: &str) -> bool {
    c.query_one("SELECT $1::text::jsonb = $2::text::jsonb", &[&a, &b])
        .unwrap()
        .get(0)
}

#[test]
fn equal_jsonb_values_have_equal_fingerprints() {
    let c = RefCell::new(connect());
    let mut runner = TestRunner::new(Config {
        cases: 200,
        ..Config::default()
    });
    runner
        .run(&json_value(), |value| {
            let plain = value.to_string();
            let other = respell(&value, 0);
            let c = &mut *c.borrow_mut();
            prop_assert!(
                jsonb_equal(c, &plain, &other),
                "respell changed the value: {plain} vs {other}"
            );
            prop_assert!(fingerprints_equal(c, &plain, &other), "{plain} vs {other}");
            Ok(())
        })
        .unwrap();
}

#[test]
fn fingerprints_differ_exactly_when_jsonb_values_differ() {
    let c = RefCell::new(connect());
    let mut runner = TestRunner::new(Config {
        cases: 300,
        ..Config::default()
    });
    runner
        .run(&(json_value(), json_value()), |(a, b)| {
            let (a, b) = (a.to_string(), b.to_string());
            let c = &mut *c.borrow_mut();
            prop_assert_eq!(
                jsonb_equal(c, &a, &b),
                fingerprints_equal(c, &a, &b),
                "{} vs {}",
                a,
                b
            );
            Ok(())
        })
        .unwrap();
}

#[test]
fn small_edits_change_the_fingerprint() {
    let mut c = connect();
    let base = r#"{"amount": 1000, "currency": "EUR", "items": [1, 2], "note": "1.0"}"#;
    for edited in [
        r#"{"amount": 1001, "currency": "EUR", "items": [1, 2], "note": "1.0"}"#,
        r#"{"amount": 1000, "currency": "eur", "items": [1, 2], "note": "1.0"}"#,
        r#"{"amount": 1000, "currency": "EUR", "items": [2, 1], "note": "1.0"}"#,
        r#"{"amount": 1000, "currency": "EUR", "items": [1, 2], "note": "1"}"#,
        r#"{"amount": "1000", "currency": "EUR", "items": [1, 2], "note": "1.0"}"#,
        r#"{"amount": 1000, "currency": "EUR", "items": [1, 2]}"#,
        r#"{"amount": 1000, "currency": "EUR", "items": [1, 2], "note": "1.0", "x": null}"#,
        r#"{"amount": 1000.5, "currency": "EUR", "items": [1, 2], "note": "1.0"}"#,
    ] {
        assert!(!fingerprints_equal(&mut c, base, edited), "{edited}");
    }
    for same in [
        r#"{"note":"1.0","items":[1.0,2.00],"currency":"EUR","amount":1000.000}"#,
        r#"{"amount": 1, "amount": 1000, "currency": "EUR", "items": [1, 2], "note": "1.0"}"#,
        r#"{"amount": 1e3, "currency": "EUR", "items": [1, 2], "note": "1.0"}"#,
    ] {
        assert!(fingerprints_equal(&mut c, base, same), "{same}");
    }
}
