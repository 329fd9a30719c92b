//! `fleet-sim`: runs every scenario and writes `FLEET.md` and `fleet.svg`.
//!
//! ```text
//! fleet-sim [--devices N] [--backlog N] [--capacity N] [--outage-min N] [--flap-min N]
//!           [--retry-after S] [--safety-poll S] [--noticed-within S] [--online-mean-min N] [--seed N] [--jobs N] [--only KEY,..] [--out DIR]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fleet_sim::{chart, report, simulate, Params, Run, Scenario};

const USAGE: &str = "usage: fleet-sim [--devices N] [--backlog N] [--capacity N] \
[--outage-min N] [--flap-min N] [--retry-after SECS] [--safety-poll SECS] [--noticed-within SECS] [--online-mean-min N] [--seed N] [--jobs N] \
[--only defaults,fixed30,exp-nojitter,reset,ignore-retry-after] [--out DIR]";

struct Options {
    params: Params,
    jobs: usize,
    scenarios: Vec<Scenario>,
    out: PathBuf,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        params: Params::default(),
        jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
        scenarios: Scenario::ALL.to_vec(),
        out: PathBuf::from("."),
    };
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag}: not a number: {value}"))
        };
        let p = &mut options.params;
        match flag.as_str() {
            "--devices" => p.devices = usize::try_from(number()?).map_err(|e| e.to_string())?,
            "--backlog" => p.backlog = u32::try_from(number()?).map_err(|e| e.to_string())?,
            "--capacity" => p.capacity = u32::try_from(number()?).map_err(|e| e.to_string())?,
            "--outage-min" => p.outage = Duration::from_secs(number()? * 60),
            "--flap-min" => p.flap = Duration::from_secs(number()? * 60),
            "--retry-after" => p.retry_after = Duration::from_secs(number()?),
            "--seed" => p.seed = number()?,
            "--online-mean-min" => p.online_mean = Duration::from_secs(number()? * 60),
            "--noticed-within" => p.noticed_within = Duration::from_secs(number()?),
            "--safety-poll" => p.safety_poll = Some(Duration::from_secs(number()?)),
            "--jobs" => {
                options.jobs = usize::try_from(number()?)
                    .map_err(|e| e.to_string())?
                    .max(1)
            }
            "--only" => {
                options.scenarios = value
                    .split(',')
                    .map(|k| Scenario::from_key(k).ok_or_else(|| format!("no scenario {k}")))
                    .collect::<Result<_, _>>()?
            }
            "--out" => options.out = PathBuf::from(value),
            _ => return Err(format!("unknown option {flag}\n{USAGE}")),
        }
    }
    if options.params.capacity == 0 || options.params.devices == 0 {
        return Err("devices and capacity must be at least 1".into());
    }
    Ok(options)
}

/// CPU seconds the calling thread has used, where Linux tells (`/proc/thread-self/stat`,
/// user and system time in ticks of 1/100 s); `None` elsewhere.
fn thread_cpu() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    let user: u64 = fields.get(11)?.parse().ok()?;
    let system: u64 = fields.get(12)?.parse().ok()?;
    Some((user + system) as f64 / 100.0)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match parse(&args) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("fleet-sim: {message}");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let params = &options.params;
    // Scenarios are independent: run them on `jobs` threads, each taking the next one.
    let queue = Mutex::new(options.scenarios.iter().copied().enumerate());
    let results: Mutex<Vec<(usize, Run, Option<f64>)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..options.jobs.min(options.scenarios.len()) {
            scope.spawn(|| loop {
                let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                let Some((i, scenario)) = next else {
                    return;
                };
                let t = Instant::now();
                let cpu = thread_cpu();
                let run = simulate(params, scenario);
                let cpu = cpu.and_then(|before| Some(thread_cpu()? - before));
                eprintln!(
                    "fleet-sim: {} done in {:.1} s, {:.1} s of CPU ({} wake-ups)",
                    scenario.label(),
                    t.elapsed().as_secs_f64(),
                    cpu.unwrap_or(f64::NAN),
                    run.wakes
                );
                results
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((i, run, cpu));
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by_key(|(i, _, _)| *i);
    let cpu: Vec<String> = results
        .iter()
        .filter_map(|(_, run, cpu)| Some(format!("{}: {:.0} s", run.scenario.label(), (*cpu)?)))
        .collect();
    let runs: Vec<Run> = results.into_iter().map(|(_, run, _)| run).collect();
    let elapsed = started.elapsed();
    let mut timing = format!(
        "{:.0} s wall clock for the {} scenarios, {} at a time (release build)",
        elapsed.as_secs_f64(),
        runs.len(),
        options.jobs.min(runs.len()),
    );
    if !cpu.is_empty() {
        timing.push_str(&format!("; CPU time per scenario: {}", cpu.join(" · ")));
    }
    let svg = chart(params, &runs);
    let md = report(params, &runs, "fleet.svg", Some(&timing));
    let write = |name: &str, text: &str| {
        let path = options.out.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    if let Err(message) = write("fleet.svg", &svg).and_then(|()| write("FLEET.md", &md)) {
        eprintln!("fleet-sim: {message}");
        return ExitCode::FAILURE;
    }
    eprint!("{}", fleet_sim::table(params, &runs));
    eprintln!("fleet-sim: wrote FLEET.md and fleet.svg ({timing})");
    ExitCode::SUCCESS
}
