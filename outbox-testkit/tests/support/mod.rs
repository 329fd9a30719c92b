//! Fixtures shared by the testkit's own test binaries.

pub(crate) mod journal;
pub(crate) mod mutants;
