//! The integration tests, built as one test binary (`autotests = false` in
//! Cargo.toml): one crate to compile and link instead of one per file.
//! Files are grouped as the library's modules are: a directory per method
//! and for the GPU engine and the adversarial suites (each with a `mod.rs`
//! listing its files), a file per single-file module. Run one file's tests
//! with a filter: `cargo test --workspace --all-features --test integration psd::density::`.
//!
//! A new test file must be listed here or in its directory's `mod.rs`
//! (`layout::every_test_file_is_included_by_the_integration_binary` fails
//! otherwise). Modules behind a feature carry the `cfg` where they are
//! listed (or as an inner attribute in the file).

/// Shared helpers (device choice, tolerances).
mod common;
/// The time-bounded call harness of the adversarial tests.
#[path = "common/harness.rs"]
mod harness;
/// The input generators of the adversarial suites.
#[path = "common/strategies.rs"]
mod strategies;
/// The toy regression data of the PSD examples (package `gramian-repro`).
#[path = "../repro/examples/psd_toy/mod.rs"]
#[allow(dead_code)]
mod psd_toy;

#[path = "cpu_fused.rs"]
mod cpu_fused;
#[path = "errors.rs"]
mod errors;
#[path = "estimator_options.rs"]
mod estimator_options;
#[path = "inputs.rs"]
mod inputs;
#[path = "layout.rs"]
mod layout;
#[path = "precision.rs"]
mod precision;
#[path = "properties.rs"]
mod properties;
#[path = "resident.rs"]
mod resident;
#[path = "saved_models.rs"]
mod saved_models;
#[path = "sparse.rs"]
mod sparse;

/// One module per directory: the adversarial suites, the GPU engine, and
/// the three methods.
mod adversarial;
mod distributed;
mod eksvd;
mod gpu;
mod mklaren;
mod psd;
