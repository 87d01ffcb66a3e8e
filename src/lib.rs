//! # gramian
//!
//! GPU-accelerated kernel methods with verified CPU fallbacks.
//!
//! The compute core builds kernel and Gram matrices and runs matrix products
//! on a [`Device`]: WGSL compute shaders through `wgpu` (`f32`, and `f64` for
//! device-resident data where the adapter has it) on a GPU, or
//! multi-threaded Rust (`f32`/`f64`) on the CPU. [`Device::auto`] picks a
//! hardware GPU when one exists and otherwise the CPU.
//!
//! Methods, one module each, fitted on a `&Device` that runs their kernel
//! and Gram matrices; a fitted model keeps computing on that device:
//! - [`eksvd`]: kernel SVD with asymmetric kernels for Q >= 2 sources (Dual
//!   and Covariance solvers, KSVD as Q = 2);
//! - [`mklaren`]: multiple-kernel low-rank regression (incomplete Cholesky
//!   with look-ahead and least-angle regression) and its baselines;
//! - [`psd`]: PSD models for non-negative functions (dual FISTA; densities,
//!   quantile regression) and their baselines.
//!
//! ```
//! use gramian::{Device, Kernel};
//! use nalgebra::DMatrix;
//!
//! let x = DMatrix::<f64>::from_fn(5, 3, |i, j| (i + 2 * j) as f64 * 0.1);
//! let z = DMatrix::<f64>::from_fn(4, 3, |i, j| (i * j) as f64 * 0.2);
//! let k = Device::cpu().kernel_matrix(&Kernel::rbf(0.5)?, &x, &z)?;
//! assert_eq!(k.shape(), (5, 4));
//! # Ok::<(), gramian::Error>(())
//! ```
//!
//! Every estimator has one shape ([`estimator`]): parameters (checked by
//! their `validate`) -> [`Fit`](estimator::Fit) on a `&Device` -> a fitted
//! model that remembers its device ([`OnDevice`](estimator::OnDevice)) ->
//! [`Predict`](estimator::Predict) / [`Transform`](estimator::Transform),
//! with [`estimator::cross_validate`] over [`estimator::Splits`] for
//! parameter selection and one error type, [`Error`].
//! `use gramian::prelude::*;` brings the common names.
//!
//! ```
//! use gramian::prelude::*;
//! use nalgebra::{DMatrix, DVector};
//!
//! let x = DMatrix::<f64>::from_fn(60, 2, |i, j| ((i * (3 + j)) % 17) as f64 / 17.0);
//! let y = DVector::<f64>::from_fn(60, |i, _| (x[(i, 0)] * 3.0).sin() + x[(i, 1)]);
//! let data = Supervised::new(x.clone(), y)?;
//! let model = MklarenParams::new(10).kernels(&[Kernel::rbf(1.0)?]).fit(&Device::cpu(), &data)?;
//! let predicted = model.predict(&x)?; // on the device the model was fitted on
//! assert_eq!(predicted.len(), 60);
//! # Ok::<(), gramian::Error>(())
//! ```
//!
//! Inputs ([`input`]): every entry point takes `nalgebra` matrices and
//! views, row- or column-major slices with a shape ([`RowMajor`],
//! [`ColMajor`]) and, with the feature `ndarray`, `ndarray` arrays, through
//! one conversion, [`AsMatrix`] (targets: [`AsVector`]). Sparse CSR
//! matrices ([`sparse::CsrMatrix`]) are inputs too: eKSVD computes on their
//! sparse rows, the other methods densify them.
//!
//! Cargo features: `serde` (saved models, `io`), `ndarray` (array inputs,
//! `interop`),
//! `neural` (Neural eKSVD on burn). The default build is the library alone.
//! The paper reproductions, their data loaders and evaluation harness and
//! the benchmark programs are a separate package of the workspace,
//! `gramian-repro` (`repro/`).
//!
//! Data that stays on the device ([`resident`]): upload once, chain
//! operations, read back only the result; the same calls run on the CPU.
//!
//! ```
//! use gramian::{Device, Kernel, MatrixProduct};
//! use nalgebra::DMatrix;
//!
//! let device = Device::cpu(); // or Device::gpu()?, Device::auto()
//! let x = device.upload(&DMatrix::<f64>::from_fn(50, 3, |i, j| (i + j) as f64 * 0.01), device.best_precision())?;
//! let k = device.resident_kernel_matrix(&Kernel::rbf(0.5)?, &x, &x.rows(0, 10)?)?; // 50 x 10, stays put
//! let g = device.resident_matmul(&k, &k, MatrixProduct::AtB)?;                      // 10 x 10
//! assert_eq!(device.to_host(&g)?.shape(), (10, 10));
//! # Ok::<(), gramian::Error>(())
//! ```

#![warn(missing_docs)]
// Parameter and result checks are written `!(x > 0.0)` on purpose: the
// negated comparison is true for NaN, so one test rejects NaN with the rest.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

pub mod data;
pub mod device;
pub mod distributed;
pub mod eksvd;
pub mod error;
pub mod estimator;
pub mod gpu;
pub mod guide;
pub mod input;
#[cfg(feature = "serde")]
pub mod io;
#[cfg(feature = "ndarray")]
pub mod interop;
pub mod kernel;
pub mod linalg;
pub(crate) mod memory;
pub mod mklaren;
pub mod nystrom;
pub mod operator;
pub mod precision;
pub mod psd;
pub mod resident;
pub mod sparse;
#[cfg(test)]
mod test_support;

pub use data::{Labelled, MultiSource};
pub use device::Device;
pub use error::{Error, Memory};
pub use input::{AsMatrix, AsVector, ColMajor, RowMajor};
pub use gpu::{DeviceCounters, GpuContext, GpuOptions, TransferStats};
pub use linalg::MatrixProduct;
pub use precision::{Precision, WorkingPrecision};
pub use operator::KernelOperator;
pub use resident::DeviceMatrix;
pub use kernel::Kernel;
pub use linalg::Real;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The names most programs need: `use gramian::prelude::*;`.
pub mod prelude {
    pub use crate::eksvd::{Eksvd, EksvdParams, FeatureMap, Ksvd, KsvdParams, Solver};
    pub use crate::error::Error;
    pub use crate::input::{AsMatrix, AsVector, ColMajor, RowMajor};
    pub use crate::estimator::{cross_validate, CrossValidation, Fit, OnDevice, Predict, Samples, Splits, Supervised, Transform};
    #[cfg(feature = "serde")]
    pub use crate::io::{Format, SavedModel};
    pub use crate::mklaren::{Mklaren, MklarenParams};
    pub use crate::psd::{BaseMeasure, DensityParams, HeteroscedasticParams, HeteroscedasticRegression, PsdDensity, QuantileParams, QuantileRegression, Regularisation, SolverOptions};
    pub use crate::{Device, DeviceMatrix, Labelled, MultiSource, Kernel, KernelOperator, MatrixProduct, Precision, WorkingPrecision};
}
