
/// The PSD models' error: an alias of the library's one [`Error`](crate::Error).
pub type PsdError = crate::error::Error;

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
