//! Small fleets: one seed gives one report, our defaults deliver everything, and the safety
//! poll the simulation leaves off changes no request.

use std::time::Duration;

use fleet_sim::{chart, report, simulate, Params, Run, Scenario};

/// A fleet small enough for a debug build: 100 devices, 500 records, a server sized like
/// the default one (1 % of the fleet per second) and a 15-minute outage.
fn small() -> Params {
    Params::default()
        .with_devices(100)
        .with_capacity(1)
        .with_outage(Duration::from_secs(15 * 60))
        .with_seed(7)
}

fn every_scenario(params: &Params) -> Vec<Run> {
    Scenario::ALL
        .iter()
        .map(|&scenario| simulate(params, scenario))
        .collect()
}

fn full_report(params: &Params) -> String {
    let runs = every_scenario(params);
    let mut text = report(params, &runs, "fleet.svg", None);
    text.push_str(&chart(params, &runs));
    text
}

#[test]
fn one_seed_gives_the_same_report_byte_for_byte() {
    let params = small();
    let first = full_report(&params);
    let second = full_report(&params);
    assert!(first == second, "seed {}: the reports differ", params.seed);
    // And the seed is what decides: another one gives another report.
    let other = full_report(&params.clone().with_seed(8));
    assert_ne!(first, other, "the seed changed nothing");
}

#[test]
fn our_defaults_deliver_every_record_after_the_outage() {
    let params = small()
        .with_devices(400)
        .with_capacity(4)
        .with_outage(Duration::from_secs(3600));
    let run = simulate(&params, Scenario::Defaults);
    assert_eq!(run.records, 2_000);
    assert_eq!(
        (run.delivered, run.parked),
        (run.records, 0),
        "seed {}",
        params.seed
    );
    let settled = run.settled_at.expect("settled within the horizon");
    assert!(settled > params.back_at(), "the outage held records back");
    // The outage was real: the server refused requests, and nothing was lost to it.
    assert!(run.series.refused.iter().any(|&r| r > 0));
    // The server never served more than its capacity in a second.
    let series = &run.series;
    for (second, &requests) in series.requests.iter().enumerate() {
        let answered_no = series.too_many.get(second).copied().unwrap_or(0)
            + series.refused.get(second).copied().unwrap_or(0);
        assert!(requests - answered_no <= params.capacity, "second {second}");
    }
}

#[test]
fn the_safety_poll_changes_no_request() {
    let params = small();
    for scenario in [Scenario::Defaults, Scenario::ResetOnReconnect] {
        let without = simulate(&params, scenario);
        let with = simulate(
            &params
                .clone()
                .with_safety_poll(Some(Duration::from_secs(60))),
            scenario,
        );
        assert_eq!(without.series, with.series, "{scenario:?}");
        assert_eq!(
            (without.delivered, without.parked, without.settled_at),
            (with.delivered, with.parked, with.settled_at),
            "{scenario:?}"
        );
        assert!(with.wakes > without.wakes, "the poll did run");
    }
}

/// The section of a report between two headings, without the line about the run itself.
fn section(text: &str, from: &str, to: &str) -> Option<String> {
    let start = text.find(from)?;
    let end = start + text[start..].find(to)?;
    Some(
        text[start..end]
            .lines()
            .filter(|line| !line.starts_with("| run time |"))
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

#[test]
fn the_committed_report_was_made_with_the_current_parameters() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../FLEET.md");
    let committed = std::fs::read_to_string(path).expect("FLEET.md at the workspace root");
    let expected = report(&Params::default(), &[], "fleet.svg", None);
    let parameters = |text: &str| section(text, "## Parameters", "## Scenarios");
    assert!(parameters(&expected).is_some());
    assert_eq!(
        parameters(&committed),
        parameters(&expected),
        "FLEET.md is stale: run `cargo xtask fleet-sim`"
    );
    for scenario in Scenario::ALL {
        assert!(committed.contains(&format!("| {} |", scenario.label())));
    }
}
