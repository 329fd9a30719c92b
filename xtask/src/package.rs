//! `cargo xtask package`: packages every crate the workspace publishes, checks what each
//! archive holds, then builds what a user gets from them outside the workspace (see
//! [`crate::outside`]).
//!
//! The published crates are the members whose `publish` is not `false`, read from
//! `cargo metadata`, so a new library crate is checked without editing this file. Each must
//! carry the registry metadata (description, license, readme, keywords, categories, docs.rs
//! settings) and state as `rust-version` the toolchain this command runs on: CI builds with
//! that one only, so an older one would be a claim nothing checks.
//!
//! `cargo package --no-verify` writes the `.crate` archives; each is unpacked into
//! `target/outside/crates/` and must hold `LICENSE-MIT`, `LICENSE-APACHE` and its readme.
//! Cargo's own verification (the same command without `--no-verify`, building each archive
//! against a temporary registry of the others) cannot be used while `outbox-core` and
//! `outbox-postgres` are names another project publishes on crates.io with versions above
//! 0.1.0: the `^0.1.0` requirements between our crates resolve to that project's crates and
//! the build fails on code that is not ours. The outside build pins the names to the
//! archives instead, and builds every one of them.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::json::Json;
use crate::outside;

/// The licenses every published crate ships (the workspace's `MIT OR Apache-2.0`).
const LICENSES: [&str; 2] = ["LICENSE-MIT", "LICENSE-APACHE"];

/// A workspace member as `cargo metadata` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Member {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) edition: String,
    /// `publish` is not `false`.
    pub(crate) published: bool,
    /// It has a library target (the outside app depends on those).
    pub(crate) lib: bool,
    /// The `readme` field as written in the manifest.
    pub(crate) readme: Option<String>,
    pub(crate) rust_version: Option<String>,
    /// The registry metadata fields left empty.
    pub(crate) missing: Vec<&'static str>,
}

impl Member {
    /// The archive's directory name, `name-version`.
    pub(crate) fn dir_name(&self) -> String {
        format!("{}-{}", self.name, self.version)
    }

    /// Where `cargo package` writes the archive, under the target directory.
    fn archive(&self, target: &Path) -> PathBuf {
        target
            .join("package")
            .join(format!("{}.crate", self.dir_name()))
    }
}

/// The workspace as `cargo metadata --no-deps` describes it.
#[derive(Debug)]
pub(crate) struct Workspace {
    pub(crate) root: PathBuf,
    pub(crate) target: PathBuf,
    pub(crate) members: Vec<Member>,
}

/// Reads the output of `cargo metadata --no-deps --format-version 1`.
pub(crate) fn parse_metadata(text: &str) -> Result<Workspace, String> {
    let json = Json::parse(text).map_err(|e| format!("cargo metadata: {e}"))?;
    let path = |key: &str| {
        json.string(&[key])
            .map(PathBuf::from)
            .ok_or_else(|| format!("cargo metadata has no {key}"))
    };
    let Some(Json::Array(packages)) = json.at(&["packages"]) else {
        return Err("cargo metadata has no packages".into());
    };
    let members = packages
        .iter()
        .map(member)
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Workspace {
        root: path("workspace_root")?,
        target: path("target_directory")?,
        members,
    })
}

fn member(package: &Json) -> Result<Member, String> {
    let text = |key: &str| package.string(&[key]).filter(|s| !s.is_empty());
    let name = text("name").ok_or("a package without a name")?.to_owned();
    let list = |key: &str| match package.at(&[key]) {
        Some(Json::Array(items)) => items.clone(),
        _ => Vec::new(),
    };
    // `null` publishes to any registry; `[]` is `publish = false`.
    let published = !matches!(package.at(&["publish"]), Some(Json::Array(r)) if r.is_empty());
    let lib = list("targets")
        .iter()
        .any(|target| match target.at(&["kind"]) {
            Some(Json::Array(kinds)) => kinds.contains(&Json::String("lib".into())),
            _ => false,
        });
    let mut missing = Vec::new();
    for key in [
        "description",
        "license",
        "readme",
        "repository",
        "rust_version",
    ] {
        if text(key).is_none() {
            missing.push(key);
        }
    }
    for key in ["keywords", "categories"] {
        if list(key).is_empty() {
            missing.push(key);
        }
    }
    if package.at(&["metadata", "docs", "rs"]).is_none() {
        missing.push("package.metadata.docs.rs");
    }
    Ok(Member {
        version: text("version")
            .ok_or_else(|| format!("{name} has no version"))?
            .to_owned(),
        edition: text("edition").unwrap_or("2021").to_owned(),
        published,
        lib,
        readme: text("readme").map(str::to_owned),
        rust_version: text("rust_version").map(str::to_owned),
        missing,
        name,
    })
}

/// Whether `rust_version` names the toolchain `release` (`1.95.0`): the same major and
/// minor, and the same patch if it gives one.
pub(crate) fn names_toolchain(rust_version: &str, release: &str) -> bool {
    let parts = |v: &str| v.split('.').map(str::to_owned).collect::<Vec<_>>();
    let (claimed, used) = (parts(rust_version), parts(release));
    claimed.len() >= 2 && claimed.len() <= used.len() && used.starts_with(&claimed)
}

/// What is wrong with a published member's manifest, one line each.
pub(crate) fn manifest_problems(member: &Member, release: &str) -> Vec<String> {
    let mut problems: Vec<String> = member
        .missing
        .iter()
        .map(|field| format!("{}: `{field}` is not set", member.name))
        .collect();
    if let Some(claimed) = &member.rust_version {
        if !names_toolchain(claimed, release) {
            problems.push(format!(
                "{}: rust-version {claimed} is not the toolchain CI builds with (rustc {release}): \
                 set workspace.package.rust-version to it, or build with {claimed} in CI",
                member.name
            ));
        }
    }
    problems
}

/// What is missing from an unpacked archive: the licenses and the readme.
pub(crate) fn archive_problems(member: &Member, unpacked: &Path) -> Vec<String> {
    let readme = member
        .readme
        .as_deref()
        .and_then(|r| Path::new(r).file_name())
        .map(|f| f.to_string_lossy().into_owned());
    LICENSES
        .iter()
        .map(|l| l.to_string())
        .chain(readme)
        .filter(|file| !unpacked.join(file).is_file())
        .map(|file| format!("{}: the package has no {file}", member.dir_name()))
        .collect()
}

/// Makes `to` hold what `from` holds, writing only the files whose contents differ (and
/// removing what `from` lacks); returns how many files it wrote. Archives give every file
/// one fixed old mtime, so unpacking over the last run would make an edited file look older
/// than its build and cargo would not rebuild it; written here, a changed file is new, and
/// an unchanged one keeps its time and its build.
pub(crate) fn sync(from: &Path, to: &Path) -> io::Result<usize> {
    fs::create_dir_all(to)?;
    let mut written = 0;
    let mut present = BTreeSet::new();
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        present.insert(entry.file_name());
        if entry.file_type()?.is_dir() {
            if target.is_file() {
                fs::remove_file(&target)?;
            }
            written += sync(&source, &target)?;
        } else {
            let bytes = fs::read(&source)?;
            if fs::read(&target).ok().as_deref() != Some(&bytes[..]) {
                if target.is_dir() {
                    fs::remove_dir_all(&target)?;
                }
                fs::write(&target, &bytes)?;
                written += 1;
            }
        }
    }
    for entry in fs::read_dir(to)? {
        let entry = entry?;
        if !present.contains(&entry.file_name()) {
            if entry.file_type()?.is_dir() {
                fs::remove_dir_all(entry.path())?;
            } else {
                fs::remove_file(entry.path())?;
            }
        }
    }
    Ok(written)
}

/// Counts the files under `dir`.
fn count_files(dir: &Path) -> io::Result<usize> {
    let mut count = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        count += if entry.file_type()?.is_dir() {
            count_files(&entry.path())?
        } else {
            1
        };
    }
    Ok(count)
}

fn output(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("could not start {program}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    String::from_utf8(out.stdout).map_err(|e| format!("{program}: {e}"))
}

/// Unpacks the archives into `outside/crates/` and lists what each one lacks.
fn unpack(
    workspace: &Workspace,
    published: &[&Member],
    outside: &Path,
) -> Result<Vec<String>, String> {
    let staging = outside.join("staging");
    let crates = outside.join("crates");
    if staging.exists() {
        fs::remove_dir_all(&staging).map_err(|e| format!("{}: {e}", staging.display()))?;
    }
    fs::create_dir_all(&staging).map_err(|e| format!("{}: {e}", staging.display()))?;
    let staging_text = staging.to_string_lossy();
    for member in published {
        let archive = member.archive(&workspace.target);
        output(
            "tar",
            &["-xzf", &archive.to_string_lossy(), "-C", &staging_text],
        )?;
    }
    // One sync for all: a crate no longer published leaves no stale copy behind.
    sync(&staging, &crates).map_err(|e| format!("{}: {e}", crates.display()))?;
    fs::remove_dir_all(&staging).map_err(|e| format!("{}: {e}", staging.display()))?;
    let mut problems = Vec::new();
    for member in published {
        let unpacked = crates.join(member.dir_name());
        problems.extend(archive_problems(member, &unpacked));
        let files = count_files(&unpacked).map_err(|e| format!("{}: {e}", unpacked.display()))?;
        let archive = member.archive(&workspace.target);
        let bytes = fs::metadata(&archive)
            .map_err(|e| format!("{}: {e}", archive.display()))?
            .len();
        eprintln!(
            "  {}: {files} files, {:.1} KiB packed",
            member.dir_name(),
            bytes as f64 / 1024.0
        );
    }
    Ok(problems)
}

/// Runs the whole check.
pub(crate) fn package(args: &[String]) -> Result<(), String> {
    if let Some(arg) = args.first() {
        return Err(format!(
            "unknown argument {arg:?}; usage: cargo xtask package"
        ));
    }
    let started = Instant::now();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let metadata = output(
        &cargo,
        &[
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ],
    )?;
    let workspace = parse_metadata(&metadata)?;
    let published: Vec<&Member> = workspace.members.iter().filter(|m| m.published).collect();
    let rustc = output("rustc", &["--version"])?;
    let release = rustc.split_whitespace().nth(1).unwrap_or_default();
    let problems: Vec<String> = published
        .iter()
        .flat_map(|m| manifest_problems(m, release))
        .collect();
    if !problems.is_empty() {
        return Err(problems.join("\n"));
    }

    // The working tree is what is checked, committed or not. Quiet, because cargo names
    // every test file it leaves out (the tests stay in the repository), dozens of lines; the
    // fields it would warn about are checked above. Offline first: the suite's build has
    // fetched everything the packages' lock files need, and the index update costs more
    // than the packaging; online only if something is missing from the cache.
    let mut command = vec!["package", "--no-verify", "--allow-dirty", "--quiet"];
    for member in &published {
        command.extend(["-p", member.name.as_str()]);
    }
    let offline = [command.as_slice(), &["--offline"]].concat();
    if crate::run(&cargo, &offline, &[]).is_err() {
        eprintln!("xtask: packaging offline failed; trying again with the network");
        crate::run(&cargo, &command, &[])?;
    }

    let outside = workspace.target.join("outside");
    let problems = unpack(&workspace, &published, &outside)?;
    if !problems.is_empty() {
        return Err(problems.join("\n"));
    }

    outside::build(&cargo, &workspace, &published, &outside)?;
    eprintln!(
        "package: {} crates packaged, built from their archives outside the workspace, the \
         README's app example compiled and the conformance suite passed on the memory store \
         ({:.1} s)",
        published.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const METADATA: &str = r#"{"packages":[
        {"name":"outbox-core","version":"0.1.0","edition":"2021","publish":null,
         "description":"The core.","license":"MIT OR Apache-2.0","readme":"../README.md",
         "repository":"https://example.invalid/outbox","rust_version":"1.95",
         "keywords":["outbox"],"categories":["database"],
         "metadata":{"docs":{"rs":{"all-features":true}}},
         "targets":[{"kind":["lib"]},{"kind":["test"]}]},
        {"name":"outbox-cli","version":"0.1.0","edition":"2021","publish":null,
         "description":"The command.","license":"MIT OR Apache-2.0","readme":null,
         "repository":"https://example.invalid/outbox","rust_version":"1.90",
         "keywords":[],"categories":["command-line-utilities"],"metadata":null,
         "targets":[{"kind":["bin"]}]},
        {"name":"xtask","version":"0.1.0","edition":"2021","publish":[],
         "targets":[{"kind":["bin"]}]}],
        "workspace_root":"/w","target_directory":"/w/target"}"#;

    #[test]
    fn members_and_their_missing_metadata_are_read() {
        let workspace = parse_metadata(METADATA).unwrap();
        assert_eq!(workspace.target, PathBuf::from("/w/target"));
        let [core, cli, xtask] = &workspace.members[..] else {
            panic!("three members expected: {:?}", workspace.members);
        };
        assert!(core.published && core.lib && core.missing.is_empty());
        assert_eq!(core.readme.as_deref(), Some("../README.md"));
        assert!(cli.published && !cli.lib);
        assert_eq!(
            cli.missing,
            ["readme", "keywords", "package.metadata.docs.rs"]
        );
        assert!(!xtask.published);
        assert!(manifest_problems(core, "1.95.0").is_empty());
        let problems = manifest_problems(cli, "1.95.0");
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems[3].contains("rust-version 1.90"), "{problems:?}");
    }

    #[test]
    fn rust_version_must_name_the_toolchain_in_use() {
        assert!(names_toolchain("1.95", "1.95.0"));
        assert!(names_toolchain("1.95.0", "1.95.0"));
        assert!(!names_toolchain("1.90", "1.95.0"));
        assert!(!names_toolchain("1.96", "1.95.0"));
        assert!(!names_toolchain("1.95.1", "1.95.0"));
        assert!(!names_toolchain("1", "1.95.0"));
    }

    /// A fresh directory under the system's temporary one, for this test alone.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn sync_writes_only_what_changed_and_removes_what_is_gone() {
        let dir = scratch("sync");
        let (from, to) = (dir.join("from"), dir.join("to"));
        fs::create_dir_all(from.join("src")).unwrap();
        fs::write(from.join("Cargo.toml"), "[package]").unwrap();
        fs::write(from.join("src/lib.rs"), "//! one").unwrap();
        assert_eq!(sync(&from, &to).unwrap(), 2);
        assert_eq!(sync(&from, &to).unwrap(), 0, "nothing changed");
        fs::write(from.join("src/lib.rs"), "//! two").unwrap();
        assert_eq!(sync(&from, &to).unwrap(), 1);
        assert_eq!(
            fs::read_to_string(to.join("src/lib.rs")).unwrap(),
            "//! two"
        );
        fs::remove_dir_all(from.join("src")).unwrap();
        assert_eq!(sync(&from, &to).unwrap(), 0);
        assert!(!to.join("src").exists(), "a removed directory is removed");
        assert!(to.join("Cargo.toml").is_file());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_archive_without_its_licenses_or_readme_is_reported() {
        let dir = scratch("archive");
        let workspace = parse_metadata(METADATA).unwrap();
        let core = &workspace.members[0];
        fs::write(dir.join("LICENSE-MIT"), "MIT").unwrap();
        assert_eq!(
            archive_problems(core, &dir),
            [
                "outbox-core-0.1.0: the package has no LICENSE-APACHE",
                "outbox-core-0.1.0: the package has no README.md"
            ]
        );
        fs::write(dir.join("LICENSE-APACHE"), "Apache").unwrap();
        fs::write(dir.join("README.md"), "# outbox").unwrap();
        assert!(archive_problems(core, &dir).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }
}
