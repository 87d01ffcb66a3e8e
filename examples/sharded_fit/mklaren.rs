//! Incomplete Cholesky and mklaren on sharded rows.

use super::{Case, Outcome};

/// Incomplete Cholesky (the ICD baseline).
pub fn icd(_case: &Case) -> gramian::error::Result<Outcome> {
    Err(gramian::Error::NotAvailable("sharded incomplete Cholesky"))
}

/// mklaren.
pub fn mklaren(_case: &Case) -> gramian::error::Result<Outcome> {
    Err(gramian::Error::NotAvailable("sharded mklaren"))
}
