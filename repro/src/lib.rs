//! # gramian-repro
//!
//! The paper reproductions and benchmark programs of [`gramian`], apart from
//! the library: what they share lives here, the programs themselves are the
//! examples (`repro/examples/`, `cargo run --release -p gramian-repro
//! --example NAME`) and the criterion benches (`repro/benches/`).
//!
//! - [`datasets`]: CSV tables and term-count views, splits,
//!   standardisation, metrics;
//! - [`evaluation`]: the eKSVD evaluation harness (multi-view data sets,
//!   grid searches that extend their grids at an edge,
//!   selection on validation, the one-vs-rest linear SVM of the papers);
//! - [`process`]: process-wide settings of the programs (the allocator's
//!   reuse of freed memory).
//!
//! Measured logs are in `repro/results/`, the reference programs they were
//! compared with (NumPy, SciPy, LAPACK, the FMA peak) in `repro/reference/`.

#![warn(missing_docs)]

pub mod datasets;
pub mod evaluation;
pub mod process;
