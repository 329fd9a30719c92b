//! The outside build of `cargo xtask package`: an app of its own that depends on the packaged
//! crates the way a user's app does, and builds them from their archives.
//!
//! `target/outside/app/` is its own workspace (no member of the one around it) holding:
//! - a manifest that depends on every packaged library by version (`outbox-testkit` as a
//!   dev-dependency), with `[patch.crates-io]` pointing each name at its unpacked archive in
//!   `target/outside/crates/` (crates.io holds another project's `outbox-core` and
//!   `outbox-postgres`), and the workspace's `[profile.*]` tables;
//! - `src/main.rs`: the README's "Use it in an app" example, its hidden lines shown and
//!   wrapped in `main` as rustdoc wraps it;
//! - `tests/conformance.rs`: the conformance macro on the memory store;
//! - the workspace's lock file, copied whenever it changed, so that the versions built are
//!   the ones the suite tested.
//!
//! `cargo test` then builds every packaged library from its archive, compiles the example and
//! runs the suite. A crate's binaries are not built (outbox-cli's `outbox` is its library
//! plus a five-line `main`): built here, they would replace the workspace's own binaries in
//! the shared target directory. The app builds in the workspace's target directory with the
//! workspace's profile, so the dependencies whose features agree with the workspace's build
//! are reused, and a second run rebuilds only what changed.

use std::fs;
use std::path::Path;

use crate::package::{Member, Workspace};

/// The crate of test tools: a dev-dependency of the app, as of a user's.
const TESTKIT: &str = "outbox-testkit";

/// The README section whose first `rust` block the app's `main.rs` is.
const EXAMPLE_HEADING: &str = "## Use it in an app";

/// The app's manifest: every packaged library as a dependency by version, each name patched
/// to its unpacked archive, and the workspace's profile tables.
pub(crate) fn app_manifest(published: &[&Member], profiles: &str) -> String {
    let libraries: Vec<&Member> = published.iter().copied().filter(|m| m.lib).collect();
    let edition = libraries.first().map_or("2021", |m| m.edition.as_str());
    let mut text = format!(
        "# Written by `cargo xtask package` on every run: an app outside the workspace that\n\
         # depends on the packaged crates as a user's app does.\n\
         [package]\n\
         name = \"outbox-outside-app\"\n\
         version = \"0.0.0\"\n\
         edition = \"{edition}\"\n\
         publish = false\n\n\
         # A workspace of its own, not a member of the one around it.\n\
         [workspace]\n"
    );
    let dependency = |m: &Member| format!("{} = \"{}\"\n", m.name, m.version);
    text.push_str("\n[dependencies]\n");
    for member in libraries.iter().filter(|m| m.name != TESTKIT) {
        text.push_str(&dependency(member));
    }
    text.push_str("\n[dev-dependencies]\n");
    for member in libraries.iter().filter(|m| m.name == TESTKIT) {
        text.push_str(&dependency(member));
    }
    text.push_str(
        "\n# Each name is the unpacked archive, never a crates.io crate of the same name.\n\
         [patch.crates-io]\n",
    );
    for member in &libraries {
        text.push_str(&format!(
            "{} = {{ path = \"../crates/{}\" }}\n",
            member.name,
            member.dir_name()
        ));
    }
    text.push_str(
        "\n# The workspace's profile, so that its builds of the dependencies are reused.\n",
    );
    text.push_str(profiles);
    text
}

/// The `[profile.*]` tables of a manifest, with their lines, as written.
pub(crate) fn profile_tables(manifest: &str) -> String {
    let mut inside = false;
    let mut text = String::new();
    for line in manifest.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            inside = trimmed.starts_with("[profile.");
        }
        if inside {
            text.push_str(line);
            text.push('\n');
        }
    }
    text
}

/// The app's `main.rs`: the first `rust` block under the README's [`EXAMPLE_HEADING`], with
/// the lines rustdoc hides (`# ...`) shown, wrapped in `fn main` unless it has one, under
/// rustdoc's `#![allow(unused)]`.
pub(crate) fn readme_example(readme: &str) -> Result<String, String> {
    let mut lines = readme
        .lines()
        .skip_while(|line| line.trim_end() != EXAMPLE_HEADING)
        .skip(1)
        .take_while(|line| !line.starts_with("## "))
        .skip_while(|line| !line.starts_with("```rust"));
    if lines.next().is_none() {
        return Err(format!(
            "README.md has no `rust` block under {EXAMPLE_HEADING:?}"
        ));
    }
    let mut code = String::new();
    for line in lines.by_ref() {
        if line.trim_end() == "```" {
            let body = if code.contains("fn main") {
                code
            } else {
                format!("fn main() {{\n{code}}}\n")
            };
            return Ok(format!(
                "//! The README's \"Use it in an app\" example (written by `cargo xtask package`).\n\
                 #![allow(unused)]\n{body}"
            ));
        }
        let shown = match line.strip_prefix('#') {
            Some("") => "",
            Some(rest) if rest.starts_with(' ') => &rest[1..],
            _ => line,
        };
        code.push_str(shown);
        code.push('\n');
    }
    Err(format!(
        "README.md: the `rust` block under {EXAMPLE_HEADING:?} is not closed"
    ))
}

/// The app's one test file: the conformance suite on the reference store.
const CONFORMANCE: &str =
    "//! The conformance suite on the memory store, from the packaged crates \
                           (written by `cargo xtask package`).\n\
                           outbox_testkit::conformance!(outbox_testkit::MemoryBackend::new());\n";

/// Writes `text` unless the file already holds it (an unchanged file keeps its build).
fn write_if_changed(path: &Path, text: &[u8]) -> Result<(), String> {
    if fs::read(path).ok().as_deref() == Some(text) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes the app under `outside/app` and runs `cargo test` on it.
pub(crate) fn build(
    cargo: &str,
    workspace: &Workspace,
    published: &[&Member],
    outside: &Path,
) -> Result<(), String> {
    let read =
        |path: &Path| fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()));
    let app = outside.join("app");
    let root_manifest = read(&workspace.root.join("Cargo.toml"))?;
    let manifest = app_manifest(published, &profile_tables(&root_manifest));
    write_if_changed(&app.join("Cargo.toml"), manifest.as_bytes())?;
    let example = readme_example(&read(&workspace.root.join("README.md"))?)?;
    write_if_changed(&app.join("src/main.rs"), example.as_bytes())?;
    write_if_changed(&app.join("tests/conformance.rs"), CONFORMANCE.as_bytes())?;
    // The app's lock starts as the workspace's; cargo then trims it to the app. Copied only
    // when the workspace's changed, so that an unchanged run needs no index update.
    let lock = read(&workspace.root.join("Cargo.lock"))?;
    let seen = outside.join("workspace.lock");
    if fs::read_to_string(&seen).ok().as_deref() != Some(&lock) || !app.join("Cargo.lock").is_file()
    {
        write_if_changed(&app.join("Cargo.lock"), lock.as_bytes())?;
        write_if_changed(&seen, lock.as_bytes())?;
    }
    let app_manifest = app.join("Cargo.toml");
    let target = workspace.target.to_string_lossy();
    crate::run(
        cargo,
        &[
            "test",
            "--manifest-path",
            &app_manifest.to_string_lossy(),
            "--",
            "--quiet",
        ],
        &[("CARGO_TARGET_DIR", &target)],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, lib: bool) -> Member {
        Member {
            name: name.into(),
            version: "0.1.0".into(),
            edition: "2021".into(),
            published: true,
            lib,
            readme: Some("README.md".into()),
            rust_version: Some("1.95".into()),
            missing: Vec::new(),
        }
    }

    #[test]
    fn the_app_depends_on_every_library_and_patches_each_name() {
        let (core, testkit, bin) = (
            member("outbox-core", true),
            member(TESTKIT, true),
            member("outbox-tool", false),
        );
        let text = app_manifest(&[&core, &testkit, &bin], "[profile.dev]\ndebug = false\n");
        let dependencies = "[dependencies]\noutbox-core = \"0.1.0\"\n\n[dev-dependencies]\n\
                            outbox-testkit = \"0.1.0\"\n";
        assert!(text.contains(dependencies), "{text}");
        assert!(
            text.contains("outbox-core = { path = \"../crates/outbox-core-0.1.0\" }\n"),
            "{text}"
        );
        assert!(
            text.contains("outbox-testkit = { path = \"../crates/outbox-testkit-0.1.0\" }\n"),
            "{text}"
        );
        assert!(
            !text.contains("outbox-tool"),
            "a crate without a library is no dependency"
        );
        assert!(
            text.contains("\n[workspace]\n") && text.ends_with("[profile.dev]\ndebug = false\n")
        );
    }

    #[test]
    fn only_the_profile_tables_are_taken() {
        let manifest =
            "[workspace]\nmembers = []\n\n[workspace.lints.rust]\nmissing_docs = \"warn\"\n\n\
                        [profile.dev]\ndebug = \"line-tables-only\"\n\n# Why.\n\
                        [profile.dev.package.redb]\nopt-level = 2\n";
        assert_eq!(
            profile_tables(manifest),
            "[profile.dev]\ndebug = \"line-tables-only\"\n\n# Why.\n\
             [profile.dev.package.redb]\nopt-level = 2\n"
        );
    }

    #[test]
    fn the_readme_example_is_shown_whole_and_wrapped_in_main() {
        let readme = "# outbox\n\n## Use it in an app\n\nText.\n\n```rust,no_run\nuse std::sync::Arc;\n\
                      # async fn app() -> Result<(), ()> {\nlet a = Arc::new(1);\n#\n# Ok(())\n# }\n```\n\n\
                      ```rust\nnot this one\n```\n";
        let main = readme_example(readme).unwrap();
        assert!(
            main.ends_with(
                "#![allow(unused)]\nfn main() {\nuse std::sync::Arc;\nasync fn app() -> Result<(), ()> {\n\
                 let a = Arc::new(1);\n\nOk(())\n}\n}\n"
            ),
            "{main}"
        );
        let with_main = readme.replace("# async fn app", "fn main() {}\nasync fn app");
        assert!(!readme_example(&with_main)
            .unwrap()
            .contains("fn main() {\nuse"));
    }

    #[test]
    fn a_readme_without_the_example_is_an_error() {
        assert!(readme_example(
            "# outbox\n\n## Use it in an app\n\nNo code.\n\n## Next\n```rust\n```\n"
        )
        .is_err());
        assert!(readme_example("## Use it in an app\n```rust\nfn main() {}\n").is_err());
        assert!(readme_example("# outbox\n```rust\nfn main() {}\n```\n").is_err());
    }
}
