//! mklaren: multiple-kernel low-rank regression (Stražar & Curk, "Learning the
//! kernel matrix by predictive low-rank approximations"), with its baselines.
//!
//! Equation numbers refer to `mklaren-equations.md`, the written-out
//! equations of the paper.
//!
//! - [`IcdParams`]: incomplete Cholesky decomposition `K ~ G G^T` of one
//!   kernel given as a function and data, one column at a time (Eq. 1-3), and
//!   [`nystrom`], the Nystrom approximation on a pivot set, which equals ICD
//!   on the same pivots (the paper's Proposition).
//! - [`MklarenParams`]: simultaneous low-rank approximation of p kernels,
//!   with kernels and pivots chosen by least-angle regression on look-ahead
//!   approximations of the candidate columns (Eq. 4-16), ridge through the
//!   augmentation of Zou & Hastie, coefficients by thin QR (Eq. 18) and
//!   out-of-sample prediction through the stored transform (Eq. 21).
//! - Baselines with the same `Params -> fit -> predict` shape:
//!   [`LowRankRidgeParams`] (ICD, Nystrom or CSI per kernel, ridge on the
//!   stacked factors) and [`FullKernelRidgeParams`] (kernel ridge regression
//!   on the uniform, align, alignf or alignfc combination of full kernels).
//!
//! Inputs: `kernels: &[Kernel]` and `inputs: &[&DMatrix<f64>]` holding either
//! one data matrix shared by all kernels or one matrix per kernel (e.g. each
//! kernel on its own feature subset, see [`select_columns`]); rows are
//! samples, and every matrix must have the same number of rows.

mod columns;
mod csi;
mod device;
mod fitted;
mod full_kernel;
mod icd;
mod low_rank;
mod model;
mod sharded;
mod tall;
mod estimator;

pub use columns::KernelColumns;
pub use full_kernel::{FullKernelRidge, FullKernelRidgeParams, KernelCombination};
pub use icd::{nystrom, FactorTransform, IcdFactor, IcdParams, NystromFactor};
pub use low_rank::{LowRankMethod, LowRankRidge, LowRankRidgeParams};
pub use fitted::{Mklaren, SelectedColumn};
pub use model::MklarenParams;
pub use sharded::KernelShard;
// The data of a sharded [`MklarenParams`] or [`LowRankRidgeParams`] fit (defined in [`crate::distributed`]).
pub use crate::distributed::ShardedSupervised;

use crate::error::Error;
use nalgebra::{DMatrix, DVector};

use crate::linalg::check_matrix;
use crate::Kernel;

/// Columns `cols` of `x`, in that order: the input of a kernel that works on
/// a feature subset.
///
/// Errors: [`Error::InvalidParameter`] for an empty list or an index
/// out of range.
pub fn select_columns(x: &DMatrix<f64>, cols: &[usize]) -> Result<DMatrix<f64>, Error> {
    if cols.is_empty() {
        return Err(Error::InvalidParameter { name: "cols", reason: "feature subset is empty".into() });
    }
    if let Some(&c) = cols.iter().find(|&&c| c >= x.ncols()) {
        return Err(Error::InvalidParameter { name: "cols", reason: format!("column {c} out of range for {} columns", x.ncols()) });
    }
    Ok(DMatrix::from_fn(x.nrows(), cols.len(), |i, j| x[(i, cols[j])]))
}

/// Checks kernels and inputs and returns one input matrix per kernel.
///
/// `inputs` holds one matrix shared by all kernels or one per kernel; all
/// must be non-empty, finite, and agree on the number of rows (`n`, or the
/// first matrix's row count when `n` is `None`).
pub(crate) fn inputs_per_kernel<'a>(
    kernels: &[Kernel],
    inputs: &[&'a DMatrix<f64>],
    n: Option<usize>,
) -> Result<Vec<&'a DMatrix<f64>>, Error> {
    check_kernels(kernels)?;
    if inputs.len() != 1 && inputs.len() != kernels.len() {
        return Err(Error::InputCount { kernels: kernels.len(), inputs: inputs.len() });
    }
    for x in inputs {
        check_matrix("inputs", x)?;
    }
    let n = n.unwrap_or(inputs[0].nrows());
    for (q, x) in inputs.iter().enumerate() {
        if x.nrows() != n {
            return Err(Error::SampleCountMismatch { kernel: q, expected: n, found: x.nrows() });
        }
    }
    Ok((0..kernels.len()).map(|q| if inputs.len() == 1 { inputs[0] } else { inputs[q] }).collect())
}

/// Checks the target against `n` samples and returns it centred with its mean.
///
/// Errors: length mismatch, NaN/Inf, or a constant target (nothing to fit).
pub(crate) fn centred_target(y: &DVector<f64>, n: usize) -> Result<(DVector<f64>, f64), Error> {
    if y.len() != n {
        return Err(Error::TargetLength { expected: n, found: y.len() });
    }
    if let Some(pos) = y.iter().position(|v| !v.is_finite()) {
        return Err(crate::Error::NonFinite { what: "target", row: pos, col: 0 });
    }
    let mean = y.mean();
    let centred = y.map(|v| v - mean);
    let scale = y.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(f64::MIN_POSITIVE);
    if centred.amax() <= 1e-12 * scale {
        return Err(Error::ConstantTarget);
    }
    Ok((centred, mean))
}

/// Checks a ridge parameter: finite and `>= 0`.
/// At least one kernel, each valid ([`Kernel::validate`]).
pub(crate) fn check_kernels(kernels: &[Kernel]) -> Result<(), Error> {
    if kernels.is_empty() {
        return Err(Error::InvalidParameter { name: "kernels", reason: "at least one kernel is needed".into() });
    }
    for k in kernels {
        k.validate()?;
    }
    Ok(())
}

pub(crate) fn check_lambda(lambda: f64) -> Result<(), Error> {
    if !(lambda.is_finite() && lambda >= 0.0) {
        return Err(Error::InvalidParameter { name: "lambda", reason: format!("must be finite and >= 0, got {lambda}") });
    }
    Ok(())
}
