use thiserror::Error;

use crate::error::ComputeError;

/// Everything that can go wrong when building, fitting or using a PSD model.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum PsdError {
    /// An error of the compute core: empty data, shape mismatch, NaN/Inf input, GPU failure.
    #[error(transparent)]
    Compute(#[from] ComputeError),
    /// A parameter is outside its valid range (sigma <= 0, lambda_2 <= 0, ...).
    #[error("invalid parameter {name}: {reason}")]
    InvalidParameter {
        /// The parameter.
        name: &'static str,
        /// Why it is invalid.
        reason: String,
    },
    /// The kernel matrix of the centres is numerically zero (no usable feature).
    #[error("kernel matrix of the centres has numerical rank 0")]
    RankDeficient,
    /// The solver stopped at its iteration budget before the duality gap reached the tolerance.
    #[error("solver did not converge in {iterations} iterations: duality gap {gap:e} > tolerance {tolerance:e}")]
    NotConverged {
        /// Iterations done.
        iterations: usize,
        /// Duality gap reached (may be infinite if the primal point was never feasible).
        gap: f64,
        /// Requested gap.
        tolerance: f64,
    },
    /// A quantity that must be positive is not (e.g. the integral of a model to be normalised).
    #[error("{what} must be positive, got {value:e}")]
    NotPositive {
        /// What.
        what: &'static str,
        /// Its value.
        value: f64,
    },
}

pub(crate) fn check_positive(name: &'static str, v: f64) -> Result<(), PsdError> {
    if !(v.is_finite() && v > 0.0) {
        return Err(PsdError::InvalidParameter { name, reason: format!("must be finite and > 0, got {v}") });
    }
    Ok(())
}

pub(crate) fn check_nonnegative(name: &'static str, v: f64) -> Result<(), PsdError> {
    if !(v.is_finite() && v >= 0.0) {
        return Err(PsdError::InvalidParameter { name, reason: format!("must be finite and >= 0, got {v}") });
    }
    Ok(())
}
