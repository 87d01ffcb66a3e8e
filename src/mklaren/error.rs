//! The error type of the mklaren module.

use thiserror::Error;

use crate::ComputeError;

/// Everything that can go wrong when fitting or applying mklaren, the
/// incomplete Cholesky / Nystrom factorisations or the baselines.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum MklarenError {
    /// An error of the compute core (empty or non-finite input, shapes, GPU).
    #[error(transparent)]
    Compute(#[from] ComputeError),
    /// A parameter is outside its valid range.
    #[error("invalid parameter {name}: {reason}")]
    InvalidParameter {
        /// The parameter.
        name: &'static str,
        /// Why it is invalid.
        reason: String,
    },
    /// The requested rank is larger than the number of samples.
    #[error("rank {rank} is larger than the number of samples {n}")]
    RankTooLarge {
        /// Requested rank.
        rank: usize,
        /// Number of samples.
        n: usize,
    },
    /// The inputs are neither one shared matrix nor one per kernel.
    #[error("{inputs} input matrices for {kernels} kernels (give 1 shared or one per kernel)")]
    InputCount {
        /// Number of kernels.
        kernels: usize,
        /// Number of input matrices.
        inputs: usize,
    },
    /// The input of a kernel has a different number of samples.
    #[error("input of kernel {kernel} has {found} samples, expected {expected}")]
    SampleCountMismatch {
        /// Kernel index.
        kernel: usize,
        /// Samples expected.
        expected: usize,
        /// Samples found.
        found: usize,
    },
    /// The target does not have one entry per sample.
    #[error("target has {found} entries, expected {expected}")]
    TargetLength {
        /// Samples.
        expected: usize,
        /// Entries found.
        found: usize,
    },
    /// The target is constant: there is nothing to regress.
    #[error("the target is constant")]
    ConstantTarget,
    /// The kernels do not have the requested rank (numerically), or the
    /// selected features are collinear.
    #[error("rank deficient: {reached} independent columns found, {requested} requested")]
    RankDeficient {
        /// Rank requested.
        requested: usize,
        /// Rank reached before the kernels were exhausted.
        reached: usize,
    },
    /// A linear system to be solved is singular or not positive definite.
    #[error("singular system: {0}")]
    Singular(&'static str),
}
