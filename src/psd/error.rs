

use crate::error::Error;
pub(crate) fn check_positive(name: &'static str, v: f64) -> Result<(), Error> {
    if !(v.is_finite() && v > 0.0) {
        return Err(Error::InvalidParameter { name, reason: format!("must be finite and > 0, got {v}") });
    }
    Ok(())
}

pub(crate) fn check_nonnegative(name: &'static str, v: f64) -> Result<(), Error> {
    if !(v.is_finite() && v >= 0.0) {
        return Err(Error::InvalidParameter { name, reason: format!("must be finite and >= 0, got {v}") });
    }
    Ok(())
}
