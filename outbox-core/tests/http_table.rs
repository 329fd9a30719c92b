//! The HTTP classification table, every status from 100 to 599, as a reviewed snapshot.
//!
//! Each status is classified with `Retry-After: 7` under the default table and under both
//! settings of the 403 option, so the snapshot shows which outcomes carry the server's delay;
//! the last column is the default table for a response whose `Location` names another origin
//! (what a captive portal answers).

use outbox_core::http::{Classifier, Forbidden, Response};
use outbox_core::Outcome;

/// One outcome in a few words.
fn short(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Delivered => "delivered".into(),
        Outcome::NoAnswer { .. } => "no answer".into(),
        Outcome::Transient { retry_after, .. } => match retry_after {
            Some(after) => format!("transient {after:?}"),
            None => "transient".into(),
        },
        Outcome::Rejected { .. } => "rejected".into(),
        Outcome::Halt { .. } => "halt".into(),
        Outcome::Conflict { .. } => "conflict".into(),
    }
}

#[test]
fn every_status_from_100_to_599() {
    let tables = [
        Classifier::new(),
        Classifier::new().on_forbidden(Forbidden::Halt),
        Classifier::new().on_forbidden(Forbidden::Reject),
    ];
    let mut table = format!(
        "{:<7}{:<30}{:<16}{:<16}{}\n",
        "status", "default", "403 halts", "403 rejects", "Location elsewhere"
    );
    for status in 100..=599 {
        let response = Response::new(status).retry_after("7");
        let [default, halt, reject] = tables.map(|t| short(&t.classify(&response)));
        let elsewhere = short(&tables[0].classify(&response.location_elsewhere("portal.example")));
        let same = |other: &String| {
            if *other == default {
                "="
            } else {
                other.as_str()
            }
            .to_owned()
        };
        table.push_str(
            format!(
                "{status:<7}{default:<30}{:<16}{:<16}{}",
                same(&halt),
                same(&reject),
                same(&elsewhere)
            )
            .trim_end(),
        );
        table.push('\n');
    }
    insta::assert_snapshot!(table);
}

#[test]
fn the_convenient_form_is_the_default_table() {
    for status in 0..=1_000 {
        let response = Response::new(status).retry_after("Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(
            outbox_core::http::classify(status, response.retry_after),
            Classifier::new().classify(&response),
            "{status}"
        );
    }
}
