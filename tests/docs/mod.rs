//! The repository's documents cannot drift: the README runs as written, the manual's examples run,
//! links and commands are real.

pub(crate) mod manual;
pub(crate) mod readme;
#[cfg(feature = "tier1")]
pub(crate) mod readme_examples;
