//! `cargo xtask bench-report [--quick] [--no-run] [--rss-records N | --rss-from FILE]`: runs
//! the criterion benchmarks of `outbox-benches` and its tools (`drain-rss`, `paired-ratios`,
//! `latency`, `graphile`), then writes
//! `BENCHMARKS.md` at the root (`--no-run` writes it from the results already in
//! `target/criterion`, e.g. after editing `benches/NOTES.md`): one
//! table per workload with each row's durability, median, spread and ratio to the bare engine
//! of the same run, the targets of issue 7, the machine, the PostgreSQL store beside
//! `graphile_worker`, and the notes of
//! `benches/NOTES.md`.
//!
//! The command line is read in `options`; `tools` runs the harness and the tools, `machine`
//! says what they ran on, `results` reads what they wrote, and `sections` writes the report,
//! a function per section.

mod machine;
mod options;
mod results;
mod sections;
mod tools;

use std::fs;
use std::path::{Path, PathBuf};

use results::{parse_fields, read_durability, read_lines, read_rows, read_text, Fields, Results};

pub(crate) fn bench_report(args: &[String]) -> Result<(), String> {
    let options = options::options(args)?;
    let root = root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let criterion = target_dir().join("criterion");
    let meta = criterion.join("outbox-durability.tsv");
    // The machine and the commit are those of the measuring run, also when rewriting.
    let machine_file = criterion.join("outbox-machine.md");
    let machine = if options.no_run {
        read_text(&machine_file)?
    } else {
        machine::machine()
    };
    if !options.no_run {
        tools::run_benches(&cargo, &criterion, &meta, options.quick)?;
        write(&machine_file, &machine)?;
    }
    let rss_file = criterion.join("outbox-rss.tsv");
    let rss_lines = match (&options.rss_from, options.no_run) {
        (Some(file), _) => read_lines(file)?,
        (None, true) => read_lines(&rss_file)?,
        (None, false) => tools::drain_rss(&cargo, options.rss_records)?,
    };
    write(&rss_file, &rss_lines.join("\n"))?;
    let rss: Vec<Fields> = rss_lines.iter().map(|l| parse_fields(l)).collect();
    let quick: &[&str] = if options.quick { &["--quick"] } else { &[] };
    let paired = kept(
        &criterion.join("outbox-paired.tsv"),
        (!options.no_run).then(|| tools::run_tool(&cargo, "paired-ratios", quick)),
    )?;
    let samples: &[&str] = if options.quick {
        &["--samples", "50"]
    } else {
        &[]
    };
    let latency = kept(
        &criterion.join("outbox-latency.tsv"),
        (!options.no_run).then(|| tools::run_tool(&cargo, "latency", samples)),
    )?;
    let graphile = kept(
        &criterion.join("outbox-graphile.tsv"),
        (!options.no_run).then(|| tools::run_tool(&cargo, "graphile", quick)),
    )?;
    let durability = read_durability(&meta)?;
    let rows = read_rows(&criterion)?;
    let notes = fs::read_to_string(root.join("benches").join("NOTES.md")).unwrap_or_default();
    let report = sections::render(
        &options,
        &Results {
            rows: &rows,
            durability: &durability,
            rss: &rss,
            paired: &paired,
            latency: &latency,
            graphile: &graphile,
        },
        &machine,
        &notes,
    );
    let out = root.join("BENCHMARKS.md");
    write(&out, &report)?;
    eprintln!("wrote {}", out.display());
    Ok(())
}

/// A tool's lines: those it just `measured` (kept in `file` for a later `--no-run`), then what
/// `file` holds (nothing when the tool never ran).
fn kept(file: &Path, measured: Option<Result<Vec<String>, String>>) -> Result<Vec<Fields>, String> {
    if let Some(lines) = measured {
        write(file, &lines?.join("\n"))?;
    }
    Ok(read_lines(file)
        .unwrap_or_default()
        .iter()
        .map(|l| parse_fields(l))
        .collect())
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

fn root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).unwrap_or(manifest)
}

/// Where cargo puts what it builds: `CARGO_TARGET_DIR` when set (relative to the workspace
/// root), else the root's `target`.
fn target_dir() -> PathBuf {
    target_dir_from(&root(), std::env::var_os("CARGO_TARGET_DIR"))
}

fn target_dir_from(root: &Path, configured: Option<std::ffi::OsString>) -> PathBuf {
    match configured {
        Some(dir) if !dir.is_empty() => root.join(dir),
        _ => root.join("target"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_are_found_under_cargo_target_dir() {
        let root = Path::new("/work/outbox");
        assert_eq!(
            target_dir_from(root, None),
            Path::new("/work/outbox/target")
        );
        assert_eq!(
            target_dir_from(root, Some("".into())),
            Path::new("/work/outbox/target")
        );
        assert_eq!(
            target_dir_from(root, Some("/tmp/t".into())),
            Path::new("/tmp/t")
        );
        assert_eq!(
            target_dir_from(root, Some("build/t".into())),
            Path::new("/work/outbox/build/t")
        );
    }
}
