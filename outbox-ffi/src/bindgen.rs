//! Generating the foreign sources (feature `bindgen`): Kotlin, Swift and Python from the
//! interface recorded in the built library.

use std::path::Path;

/// A language to generate bindings for.
///
/// ```
/// assert_eq!(outbox_ffi::bindgen::Language::parse("swift"), Some(outbox_ffi::bindgen::Language::Swift));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Language {
    /// Kotlin, for Android (JNA).
    Kotlin,
    /// Swift, for iOS (a C header and module map next to it).
    Swift,
    /// Python (ctypes), for tests and desktop tools.
    Python,
}

impl Language {
    /// The language named `name` (`kotlin`, `swift`, `python`).
    pub fn parse(name: &str) -> Option<Language> {
        match name {
            "kotlin" => Some(Language::Kotlin),
            "swift" => Some(Language::Swift),
            "python" => Some(Language::Python),
            _ => None,
        }
    }
}

/// Writes the bindings of the library at `library` (the built `liboutbox_ffi.so`, `.dylib` or
/// `.dll`) for `languages` under `out_dir`, unformatted (no formatter is assumed installed).
///
/// ```no_run
/// use std::path::Path;
/// use outbox_ffi::bindgen::{generate, Language};
///
/// generate(Path::new("target/debug/liboutbox_ffi.so"), &[Language::Python], Path::new("out")).unwrap();
/// ```
pub fn generate(library: &Path, languages: &[Language], out_dir: &Path) -> Result<(), String> {
    let utf8 = |path: &Path| {
        path.to_str()
            .map(Into::into)
            .ok_or_else(|| format!("not a UTF-8 path: {}", path.display()))
    };
    let options = uniffi::GenerateOptions {
        languages: languages
            .iter()
            .map(|language| match language {
                Language::Kotlin => uniffi::TargetLanguage::Kotlin,
                Language::Swift => uniffi::TargetLanguage::Swift,
                Language::Python => uniffi::TargetLanguage::Python,
            })
            .collect(),
        source: utf8(library)?,
        out_dir: utf8(out_dir)?,
        format: false,
        crate_filter: Some("outbox_ffi".into()),
        ..Default::default()
    };
    uniffi::generate(options).map_err(|err| format!("{err:#}"))
}
