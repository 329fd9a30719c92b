//! The suite's proof that it can fail: every store-level scenario runs against every mutant (a
//! store with one realistic bug, see `support/mutants.rs`). Each scenario must pass on the
//! sound store and fail against at least one mutant it was written to catch; each mutant must
//! be caught by every scenario meant for it. The whole matrix is a reviewed snapshot, so a
//! scenario that stops catching a bug shows in the diff.

mod support;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use outbox_testkit::harness::bounded;
use outbox_testkit::scenarios::{self, SCENARIOS, SEED_ENV};
use outbox_testkit::Verdict;
use support::mutants::{Mutant, MutantBackend, MUTANTS, SOUND};

/// One cell: how a scenario did against a store.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Cell {
    Passed,
    Skipped,
    Failed(String),
}

impl Cell {
    fn mark(&self) -> char {
        match self {
            Cell::Passed => '.',
            Cell::Skipped => '-',
            Cell::Failed(_) => 'x',
        }
    }
}

fn run_cell(scenario: &'static str, mutant: Mutant) -> Cell {
    let started = std::time::Instant::now();
    let cell = run_cell_inner(scenario, mutant);
    let took = started.elapsed();
    if took > Duration::from_secs(5) {
        eprintln!("slow cell: {scenario} on {} took {took:?}", mutant.name);
    }
    cell
}

fn run_cell_inner(scenario: &'static str, mutant: Mutant) -> Cell {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let backend = MutantBackend::new(mutant);
    // A hang is a catch too, but a slow one: the limits keep the matrix short.
    let limit = Duration::from_secs(if scenario == "due_query_ignores_backlog" {
        120
    } else {
        10
    });
    let result = bounded(&runtime, scenario, limit, async {
        scenarios::run_by_name(scenario, &backend)
            .await
            .expect("a store-level scenario")
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(Verdict::Passed) => Cell::Passed,
        Ok(Verdict::Skipped { .. }) => Cell::Skipped,
        Err(failure) => Cell::Failed(failure.message().to_owned()),
    }
}

#[test]
fn every_scenario_catches_a_mutant_it_is_meant_for() {
    // One fixed seed for the randomized scenario, so the matrix is the same on every run.
    std::env::set_var(SEED_ENV, "20");
    // The scripted panics of the runner scenarios are expected; keep the output readable.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or_default();
        if !message.starts_with("scripted panic") {
            default_hook(info);
        }
    }));
    let store_level: Vec<&'static str> = SCENARIOS
        .iter()
        .map(|s| s.name)
        .filter(|name| !is_crash(name))
        .collect();
    let stores: Vec<Mutant> = std::iter::once(SOUND)
        .chain(MUTANTS.iter().copied())
        .collect();
    let cells: Vec<(&'static str, Mutant)> = store_level
        .iter()
        .flat_map(|s| stores.iter().map(move |m| (*s, *m)))
        .collect();
    let queue = Mutex::new(cells.into_iter());
    let results: Mutex<BTreeMap<(&'static str, &'static str), Cell>> = Mutex::default();
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let next = queue.lock().unwrap().next();
                let Some((scenario, mutant)) = next else {
                    return;
                };
                let cell = run_cell(scenario, mutant);
                results
                    .lock()
                    .unwrap()
                    .insert((scenario, mutant.name), cell);
            });
        }
    });
    let results = results.into_inner().unwrap();
    let cell = |s: &str, m: &str| results[&(s, m)].clone();

    let table = render(&store_level, &stores, &cell);
    eprintln!("{table}");

    let mut problems = Vec::new();
    for scenario in &store_level {
        if let Cell::Failed(message) = cell(scenario, SOUND.name) {
            problems.push(format!("{scenario} fails on the sound store: {message}"));
        }
        // A scenario the mutants' store cannot run (it needs a capability the memory store
        // lacks, as planting an unreadable row does) is proven by the backends that declare
        // it; the matrix shows it skipped on every store.
        if cell(scenario, SOUND.name) == Cell::Skipped {
            continue;
        }
        let catches = MUTANTS
            .iter()
            .filter(|m| m.meant_for.contains(scenario))
            .any(|m| matches!(cell(scenario, m.name), Cell::Failed(_)));
        if !catches {
            problems.push(format!(
                "{scenario} catches none of the mutants meant for it"
            ));
        }
    }
    for mutant in MUTANTS {
        for scenario in mutant.meant_for {
            assert!(
                store_level.contains(scenario),
                "{}: no scenario {scenario}",
                mutant.name
            );
            if !matches!(cell(scenario, mutant.name), Cell::Failed(_)) {
                problems.push(format!(
                    "{scenario} is meant to catch {} ({}) but passes",
                    mutant.name, mutant.bug
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}\n\n{table}", problems.join("\n"));
    insta::assert_snapshot!("mutation_matrix", table);

    // The README states the counts; keep them true.
    let catches = store_level
        .iter()
        .flat_map(|s| MUTANTS.iter().map(move |m| (*s, m.name)))
        .filter(|(s, m)| matches!(cell(s, m), Cell::Failed(_)))
        .count();
    let counts = format!(
        "{} scenarios × {} mutants, {catches} catches",
        store_level.len(),
        MUTANTS.len()
    );
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .unwrap()
        .replace("\n", " ");
    assert!(
        readme.contains(&counts),
        "the README must state the matrix's counts: {counts}"
    );
}

fn is_crash(name: &str) -> bool {
    matches!(
        name,
        "crash_sigkill" | "crash_loop_parks_record" | "shared_runners" | "killed_runner_taken_over"
    )
}

/// The matrix as text: a legend of the mutants, one row per scenario (`x` caught, `.` passed,
/// `-` skipped), and the counts.
fn render(
    scenarios: &[&'static str],
    stores: &[Mutant],
    cell: &dyn Fn(&str, &str) -> Cell,
) -> String {
    let caught_by = |m: &Mutant| {
        scenarios
            .iter()
            .filter(|s| matches!(cell(s, m.name), Cell::Failed(_)))
            .count()
    };
    let mut out = String::from("mutants (caught by how many scenarios):\n");
    for (i, m) in stores.iter().enumerate() {
        out.push_str(&format!(
            "  {i:>2} {:<24} {:>2}  {}\n",
            m.name,
            caught_by(m),
            m.bug
        ));
    }
    let width = scenarios.iter().map(|s| s.len()).max().unwrap_or(0);
    out.push_str(&format!("\n{:width$}  ", "scenario"));
    for i in 0..stores.len() {
        out.push_str(&format!("{i:>3}"));
    }
    out.push_str("  caught\n");
    let mut caught_total = 0;
    for s in scenarios {
        out.push_str(&format!("{s:width$}  "));
        let mut caught = 0;
        for m in stores {
            let c = cell(s, m.name);
            if m.name != SOUND.name && matches!(c, Cell::Failed(_)) {
                caught += 1;
            }
            out.push_str(&format!("  {}", c.mark()));
        }
        caught_total += caught;
        out.push_str(&format!("  {caught}\n"));
    }
    let uncaught = stores[1..]
        .iter()
        .filter(|m| {
            !scenarios
                .iter()
                .any(|s| matches!(cell(s, m.name), Cell::Failed(_)))
        })
        .count();
    out.push_str(&format!(
        "\n\n{} scenarios x {} mutants: {caught_total} catches; every scenario caught at least one \
         mutant: {}; mutants caught by no scenario: {uncaught}\n",
        scenarios.len(),
        stores.len() - 1,
        scenarios
            .iter()
            .filter(|s| cell(s, SOUND.name) != Cell::Skipped)
            .all(|s| stores[1..]
                .iter()
                .any(|m| matches!(cell(s, m.name), Cell::Failed(_)))),
    ));
    out
}
