//! `cargo xtask fleet-sim [options]`: runs the fleet simulation (the `fleet-sim` crate) in a
//! release build and writes `FLEET.md` and `fleet.svg` at the workspace root. Options are
//! passed on (`--devices N`, `--capacity N`, `--outage-min N`, `--seed N`, ...);
//! an unknown option prints the usage.

use std::path::Path;

/// Runs the simulation with `args`, writing the report beside the workspace's README.
pub(crate) fn fleet_sim(args: &[String]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("xtask has no parent directory")?;
    let root = root.to_str().ok_or("the workspace path is not UTF-8")?;
    let mut command = vec!["run", "--release", "--quiet", "-p", "fleet-sim", "--"];
    command.extend(args.iter().map(String::as_str));
    command.extend(["--out", root]);
    crate::run(&cargo, &command, &[])
}
