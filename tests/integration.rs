//! The integration tests, one module per file of `tests/`, built as one
//! test binary (`autotests = false` in Cargo.toml): one crate to compile and
//! link instead of one per file. Run one file's tests with a filter:
//! `cargo test --all-features --test integration psd_density::`.
//!
//! A new test file must be listed here. Modules behind a feature carry the
//! `cfg` here (or as an inner attribute in the file).

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

#[path = "adversarial.rs"]
mod adversarial;
#[path = "adversarial_models.rs"]
mod adversarial_models;
#[path = "adversarial_causes.rs"]
mod adversarial_causes;
#[path = "adversarial_limits.rs"]
mod adversarial_limits;
#[path = "adversarial_suite.rs"]
mod adversarial_suite;
#[path = "cpu_fused.rs"]
mod cpu_fused;
#[path = "eksvd_errors.rs"]
mod eksvd_errors;
#[path = "eksvd_gpu.rs"]
mod eksvd_gpu;
#[path = "eksvd_neural.rs"]
mod eksvd_neural;
#[path = "eksvd_solvers.rs"]
mod eksvd_solvers;
#[path = "errors.rs"]
mod errors;
#[path = "estimator_options.rs"]
mod estimator_options;
#[path = "cost_model.rs"]
mod cost_model;
#[path = "gpu_counters.rs"]
mod gpu_counters;
#[path = "gpu_long_rows.rs"]
mod gpu_long_rows;
#[path = "gpu_methods.rs"]
mod gpu_methods;
#[path = "gpu_variants.rs"]
mod gpu_variants;
#[path = "gpu_vs_cpu.rs"]
mod gpu_vs_cpu;
#[path = "inputs.rs"]
mod inputs;
#[path = "layout.rs"]
mod layout;
#[path = "mklaren_core.rs"]
mod mklaren_core;
#[path = "properties.rs"]
mod properties;
#[path = "psd_baselines.rs"]
mod psd_baselines;
#[path = "psd_baselines_regression.rs"]
mod psd_baselines_regression;
#[path = "psd_density.rs"]
mod psd_density;
#[path = "psd_engine.rs"]
mod psd_engine;
#[path = "psd_heteroscedastic.rs"]
mod psd_heteroscedastic;
#[path = "psd_polar.rs"]
mod psd_polar;
#[path = "psd_positive_part.rs"]
mod psd_positive_part;
#[path = "psd_quantile.rs"]
mod psd_quantile;
#[path = "resident.rs"]
mod resident;
#[path = "tensor_core_split.rs"]
mod tensor_core_split;
#[path = "saved_models.rs"]
mod saved_models;
