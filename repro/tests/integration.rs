//! The integration tests of the reproduction harness, one module per file
//! of `repro/tests/`, built as one test binary (`autotests = false` in
//! repro/Cargo.toml). Run one file's tests with a filter:
//! `cargo test -p gramian-repro --test integration adversarial_loaders::`.
//!
//! A new test file must be listed here (the library's `layout::` tests
//! check it).

/// The time-bounded call harness of the adversarial tests (the library's).
#[path = "../../tests/common/harness.rs"]
mod harness;
/// The input generators of the adversarial suites (the library's).
#[path = "../../tests/common/strategies.rs"]
mod strategies;

#[path = "adversarial.rs"]
mod adversarial;
#[path = "adversarial_loaders.rs"]
mod adversarial_loaders;
#[path = "adversarial_suite.rs"]
mod adversarial_suite;
#[path = "eksvd_3sources.rs"]
mod eksvd_3sources;
