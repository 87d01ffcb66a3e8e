//! eKSVD on sharded sources.

use super::{Case, Outcome};

/// The Dual solver, matrix-free.
pub fn dual(_case: &Case) -> gramian::error::Result<Outcome> {
    Err(gramian::Error::NotAvailable("sharded eKSVD Dual"))
}

/// The Covariance solver.
pub fn covariance(_case: &Case) -> gramian::error::Result<Outcome> {
    Err(gramian::Error::NotAvailable("sharded eKSVD Covariance"))
}
