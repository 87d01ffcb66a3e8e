//! The library's [`gramian::Error`] as Python exceptions, and the boundary
//! every computation crosses (GIL released, panics caught).
//!
//! The exception classes live in the pure-Python module
//! `gramian.exceptions` (so that they can subclass both `GramianError` and
//! the built-in exception a caller expects):
//!
//! | `gramian::Error` | Python exception |
//! |---|---|
//! | invalid input ([`gramian::Error::is_invalid_input`]) | `InvalidInputError` (a `ValueError`) |
//! | `OutOfMemory` | `OutOfMemoryError` (a `MemoryError`) |
//! | `NoGpuAdapter`, `Gpu`, `Unsupported`, `TooLargeForGpu`, `BackendUnavailable`, `Execution` | `DeviceError` (a `RuntimeError`) |
//! | `NotConverged`, `EigenNotConverged`, `Diverged` | `ConvergenceError` (a `RuntimeError`) |
//! | `Overflow`, rank, singularity and positivity failures | `NumericalError` (an `ArithmeticError`) |
//! | anything else, and a panic | `GramianError` |
//!
//! Each exception carries the variant's name as its `variant` attribute.

use std::panic::{catch_unwind, AssertUnwindSafe};

use gramian::Error;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// The name of the `gramian.exceptions` class for `e`.
fn class_name(e: &Error) -> &'static str {
    if e.is_invalid_input() {
        return "InvalidInputError";
    }
    match e {
        Error::OutOfMemory { .. } => "OutOfMemoryError",
        Error::NoGpuAdapter(_) | Error::Gpu(_) | Error::Unsupported(_) | Error::TooLargeForGpu { .. } | Error::BackendUnavailable { .. } | Error::Execution(_) => "DeviceError",
        Error::NotConverged { .. } | Error::EigenNotConverged { .. } | Error::Diverged { .. } => "ConvergenceError",
        Error::Overflow { .. }
        | Error::IllConditioned { .. }
        | Error::RankDeficient { .. }
        | Error::RankDeficientKernel { .. }
        | Error::Singular(_)
        | Error::NoUsableFeature
        | Error::NotPositive { .. }
        | Error::NoPositiveEigenvalues
        | Error::TooFewPositiveEigenvalues { .. } => "NumericalError",
        _ => "GramianError",
    }
}

/// The enum variant's name (the leading identifier of its `Debug` form).
fn variant_name(e: &Error) -> String {
    format!("{e:?}").chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

/// An instance of `gramian.exceptions.<class>(message)` with `variant` set.
fn exception(py: Python<'_>, class: &str, message: String, variant: &str) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let cls = py.import("gramian.exceptions")?.getattr(class)?;
        let instance = cls.call1((message.clone(),))?;
        instance.setattr("variant", variant)?;
        Ok(PyErr::from_value(instance))
    })();
    // Without the pure-Python package (the extension imported on its own)
    // the error is still raised, as a RuntimeError.
    made.unwrap_or_else(|_| PyRuntimeError::new_err(message))
}

/// `e` as its Python exception.
pub fn to_py(py: Python<'_>, e: Error) -> PyErr {
    exception(py, class_name(&e), e.to_string(), &variant_name(&e))
}

/// A `ValueError`-type error raised by the bindings themselves (an argument
/// the library never sees, e.g. an unknown kernel name).
pub fn invalid(py: Python<'_>, message: impl Into<String>) -> PyErr {
    exception(py, "InvalidInputError", message.into(), "InvalidParameter")
}

/// Runs `f` with the GIL released; a library error becomes its Python
/// exception and a panic a `GramianError` (an internal error, never
/// PyO3's `PanicException`).
pub fn run<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T, Error> + Send) -> PyResult<T> {
    match py.detach(|| catch_unwind(AssertUnwindSafe(f))) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(to_py(py, e)),
        Err(panic) => {
            let what = panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned()).unwrap_or_else(|| "unknown panic".into());
            Err(exception(py, "GramianError", format!("internal error in gramian (please report): {what}"), "Panic"))
        }
    }
}
