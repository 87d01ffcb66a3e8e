//! Errors of the compute core.

use thiserror::Error;

/// Everything that can go wrong in the compute core (kernel functions,
/// kernel and Gram matrices, matrix products) on either execution path.
///
/// Method modules (`eksvd`, `mklaren`, `psd`) have their own error enums that
/// wrap this one.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ComputeError {
    /// An input matrix has no rows or no columns.
    #[error("{what} is empty ({rows} x {cols})")]
    Empty {
        /// Which argument.
        what: &'static str,
        /// Its number of rows.
        rows: usize,
        /// Its number of columns.
        cols: usize,
    },
    /// Two arguments disagree on a dimension.
    #[error("dimension mismatch: {what} (expected {expected}, found {found})")]
    DimensionMismatch {
        /// Which dimension.
        what: &'static str,
        /// The size implied by the other argument.
        expected: usize,
        /// The size found.
        found: usize,
    },
    /// An input holds NaN or an infinity.
    #[error("{what} contains NaN or infinite values (first at row {row}, column {col})")]
    NonFinite {
        /// Which argument.
        what: &'static str,
        /// Row of the first offending entry.
        row: usize,
        /// Column of the first offending entry.
        col: usize,
    },
    /// A parameter is outside its valid range.
    #[error("invalid parameter {name}: {reason}")]
    InvalidParameter {
        /// The parameter.
        name: &'static str,
        /// Why it is invalid.
        reason: String,
    },
    /// An index is out of range.
    #[error("index {index} out of range for {what} of length {len}")]
    IndexOutOfRange {
        /// What was indexed.
        what: &'static str,
        /// The index.
        index: usize,
        /// The valid length.
        len: usize,
    },
    /// A GPU was asked for but no adapter was found.
    #[error("no GPU adapter found ({0})")]
    NoGpuAdapter(String),
    /// The GPU reported an error (device lost, out of memory, validation).
    #[error("GPU error: {0}")]
    Gpu(String),
    /// The device cannot do what was asked (e.g. `f64` on an adapter without `SHADER_F64`).
    #[error("not supported on this device: {0}")]
    Unsupported(String),
    /// A device matrix was used with a device other than the one that holds it.
    #[error("a device matrix was used on a device other than the one that holds it")]
    DeviceMismatch,
    /// Device matrices of different precisions were combined.
    #[error("precision mismatch: expected {expected:?}, found {found:?}")]
    PrecisionMismatch {
        /// The precision of the first operand.
        expected: crate::gpu::Precision,
        /// The precision of the operand that differs.
        found: crate::gpu::Precision,
    },
    /// A finite input does not fit the precision it is computed in on the
    /// device (an `f64` beyond the `f32` range on an `f32` path).
    #[error("{what} holds {value:e} at row {row}, column {col}, beyond the f32 range of the device path (use f64 or rescale)")]
    NotRepresentable {
        /// Which argument.
        what: &'static str,
        /// Row of the first such entry.
        row: usize,
        /// Column of the first such entry.
        col: usize,
        /// The value.
        value: f64,
    },
    /// Finite inputs gave NaN or an infinity: the result does not fit the
    /// precision it is computed in (e.g. entries near `1e200` in a linear or
    /// polynomial kernel, a Gram matrix or a product; a large `gamma` on
    /// `f32` data). Rescale the data, or use `f64`.
    #[error("overflow in {what}: finite inputs gave a non-finite value at row {row}, column {col} (rescale the data or use f64)")]
    Overflow {
        /// Which result.
        what: &'static str,
        /// Row of the first non-finite entry.
        row: usize,
        /// Column of the first non-finite entry.
        col: usize,
    },
    /// The GPU ran out of memory.
    #[error("GPU out of memory: {0}")]
    OutOfMemory(String),
    /// A single row of an input is larger than the GPU allows in one buffer binding.
    #[error("{what} needs {bytes} bytes in one GPU binding, over the adapter limit of {limit}")]
    TooLargeForGpu {
        /// What did not fit.
        what: &'static str,
        /// Bytes needed.
        bytes: u64,
        /// The adapter's limit.
        limit: u64,
    },
}

/// Result type of the compute core.
pub type Result<T, E = ComputeError> = std::result::Result<T, E>;
