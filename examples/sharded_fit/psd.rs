//! PSD models on sharded rows.

use super::{Case, Outcome};

/// Density.
pub fn density(_case: &Case) -> gramian::error::Result<Outcome> {
    Err(gramian::Error::NotAvailable("sharded PSD density"))
}

/// Heteroscedastic regression.
pub fn heteroscedastic(_case: &Case) -> gramian::error::Result<Outcome> {
    Err(gramian::Error::NotAvailable("sharded heteroscedastic regression"))
}

/// Quantile regression.
pub fn quantile(_case: &Case) -> gramian::error::Result<Outcome> {
    Err(gramian::Error::NotAvailable("sharded quantile regression"))
}
