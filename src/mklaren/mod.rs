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
//!
//! Sparse inputs ([`CsrMatrix`](crate::sparse::CsrMatrix), one sample per
//! row, recognised by [`AsMatrix::as_csr`](crate::input::AsMatrix::as_csr))
//! are never densified by [`MklarenParams::fit_inputs`], [`IcdParams::fit`]
//! and the predictions and transforms of their models: the kernel diagonals
//! come from the rows' squared norms, and each kernel column `K(:, i)` (the
//! exact Cholesky steps and the look-ahead ICD) is `k` applied to the
//! statistic column `||x_k - x_i||^2` or `<x_k, x_i>` of sparse inner
//! products, O(nnz(X)) per column: in a GPU fit in `f64` on the device (one
//! merge of each row's sorted column indices with the pivot's, the rows'
//! squared norms uploaded once with the CSR arrays), elsewhere on the CPU
//! ([`crate::sparse`]; also a GPU fit whose input has a row beyond the
//! device's loop budget). Predictions of sparse rows run on the CPU. A fitted
//! transform keeps the pivots' rows dense (K x d numbers), and new sparse
//! rows meet them through the sparse kernel matrix
//! ([`crate::nystrom::features_sparse`]). A sparse input and its dense copy
//! give the same kernel columns up to the summation order of the inner
//! products (about `1e-15` relative).

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

use crate::Kernel;
use columns::Rows;

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
    let rows: Vec<Rows<'a>> = inputs.iter().map(|x| Rows::Dense(x)).collect();
    Ok(rows_per_kernel(kernels, &rows, n)?.iter().filter_map(Rows::dense).collect())
}

/// [`inputs_per_kernel`] for dense or sparse inputs (sparse ones checked
/// for empty and non-finite entries without densifying).
pub(crate) fn rows_per_kernel<'a>(kernels: &[Kernel], inputs: &[Rows<'a>], n: Option<usize>) -> Result<Vec<Rows<'a>>, Error> {
    check_kernels(kernels)?;
    if inputs.len() != 1 && inputs.len() != kernels.len() {
        return Err(Error::InputCount { kernels: kernels.len(), inputs: inputs.len() });
    }
    for x in inputs {
        x.check("inputs")?;
    }
    let n = n.unwrap_or(inputs[0].nrows());
    for (q, x) in inputs.iter().enumerate() {
        if x.nrows() != n {
            return Err(Error::SampleCountMismatch { kernel: q, expected: n, found: x.nrows() });
        }
    }
    Ok((0..kernels.len()).map(|q| if inputs.len() == 1 { inputs[0] } else { inputs[q] }).collect())
}

/// An input of a fit or a prediction as the methods compute on it: sparse
/// rows kept as they are, anything else as a dense matrix (borrowed where
/// it already is one).
pub(crate) enum Input<'a> {
    /// A dense matrix.
    Dense(std::borrow::Cow<'a, DMatrix<f64>>),
    /// Sparse rows.
    Sparse(&'a crate::sparse::CsrMatrix<f64>),
}

impl Input<'_> {
    /// The rows to compute on.
    pub(crate) fn rows(&self) -> Rows<'_> {
        match self {
            Input::Dense(x) => Rows::Dense(x),
            Input::Sparse(x) => Rows::Sparse(x),
        }
    }
}

/// Each input as [`Input`]: CSR inputs ([`AsMatrix::as_csr`](crate::input::AsMatrix::as_csr)) sparse,
/// the others dense (converted once where they are not a `DMatrix`).
pub(crate) fn convert_inputs<'a, X: crate::input::AsMatrix<Elem = f64> + ?Sized>(inputs: &[&'a X]) -> Result<Vec<Input<'a>>, Error> {
    inputs
        .iter()
        .map(|&x| match x.as_csr() {
            Some(csr) => Ok(Input::Sparse(csr)),
            None => x.as_matrix().map(Input::Dense),
        })
        .collect()
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
