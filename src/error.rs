//! The one error type of the library.
//!
//! Every fallible call in `gramian` (compute core, eKSVD, Neural eKSVD,
//! mklaren, PSD models) returns [`Error`]. The variants are grouped by where
//! they arise: the compute core (shapes, non-finite input, parameters, the
//! GPU), then the few cases specific to one method. The enum is
//! `#[non_exhaustive]`: match the variants you handle and keep a `_` arm.
//!
//! The reproduction harness (package `gramian-repro`: data loaders,
//! evaluation) has its own errors for files and splits, which wrap this one.

use crate::precision::Precision;
use thiserror::Error as ThisError;

/// Everything that can go wrong in `gramian`.
///
/// [`Error::is_invalid_input`] tells bad arguments (shapes, NaN/Inf,
/// parameters) from failures of a valid call (the GPU, convergence, rank).
#[derive(Debug, ThisError, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    // ----- compute core: inputs, parameters, the GPU -----

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
        expected: Precision,
        /// The precision of the operand that differs.
        found: Precision,
    },
    /// A finite input does not fit the precision it is computed in on the
    /// device (an `f64` beyond the `f32` range on an `f32` path).
    #[error("{what} holds {value:e} at row {row}, column {col}, beyond the range of f32, which this device path computes in (rescale the data, or compute in f64: resident data uploaded as Precision::F64, or the CPU device)")]
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
    #[error("overflow in {what}: finite inputs gave a non-finite value at row {row}, column {col} (rescale the data; where the computation is in f32, compute in f64)")]
    Overflow {
        /// Which result.
        what: &'static str,
        /// Row of the first non-finite entry.
        row: usize,
        /// Column of the first non-finite entry.
        col: usize,
    },
    /// A shape whose number of entries, `rows * cols`, overflows `usize`
    /// (e.g. a [`RowMajor`](crate::input::RowMajor) input built from a bad
    /// shape).
    #[error("{what}: a {rows} x {cols} shape has more entries than usize can count")]
    ShapeOverflow {
        /// Which input.
        what: &'static str,
        /// Its number of rows.
        rows: usize,
        /// Its number of columns.
        cols: usize,
    },
    /// Memory for a result or a working buffer could not be had: a size
    /// that overflows the address space, exceeds the host's physical memory
    /// or the device's budget, or an allocation the system refused. Raised
    /// before any work where the size is known up front.
    #[error("{memory} out of memory: {detail}")]
    OutOfMemory {
        /// Host (CPU) or device (GPU) memory.
        memory: Memory,
        /// What was being allocated, and how large it was.
        detail: String,
    },
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

    // ----- eKSVD -----
    /// eKSVD couples at least two sources.
    #[error("eKSVD needs at least 2 sources, got {0}")]
    TooFewSources(usize),
    /// A source (or its features, or a kernel block) is empty.
    #[error("{what} of source {source_index} is empty ({rows} x {cols})")]
    EmptySource {
        /// What was empty (data, features, kernel block).
        what: &'static str,
        /// Index of the source.
        source_index: usize,
        /// Its rows.
        rows: usize,
        /// Its columns.
        cols: usize,
    },
    /// A source holds NaN or an infinity.
    #[error("{what} of source {source_index} contains NaN or infinite values (first at row {row}, column {col})")]
    NonFiniteSource {
        /// What was checked (data, features, kernel block).
        what: &'static str,
        /// Index of the source.
        source_index: usize,
        /// Row of the first offending entry.
        row: usize,
        /// Column of the first offending entry.
        col: usize,
    },
    /// A finite `f64` value of a source overflows `f32`, the precision it is
    /// computed in (Neural eKSVD training).
    #[error("{what} of source {source_index} has a value ({value:e}) that is not finite in f32")]
    SourceNotRepresentable {
        /// What was converted.
        what: &'static str,
        /// Index of the source.
        source_index: usize,
        /// The offending value.
        value: f64,
    },
    /// Shapes disagree (sample counts of paired sources, feature dimensions,
    /// kernel block sizes, number of per-source settings).
    #[error("shape mismatch: {what} (expected {expected}, found {found})")]
    ShapeMismatch {
        /// Which dimension.
        what: String,
        /// The size implied by the other inputs.
        expected: usize,
        /// The size found.
        found: usize,
    },
    /// The coupling matrix has no positive eigenvalue, so no component
    /// `lambda = 1/gamma > 0` exists.
    #[error("the coupling matrix has no positive eigenvalue")]
    NoPositiveEigenvalues,
    /// Fewer positive eigenvalues than components were asked for.
    #[error("{requested} components requested but the coupling matrix has only {available} positive eigenvalues")]
    TooFewPositiveEigenvalues {
        /// Components asked for.
        requested: usize,
        /// Positive eigenvalues found.
        available: usize,
    },
    /// The iterative eigensolver stopped before all wanted pairs converged.
    #[error("eigensolver did not converge: {converged} of {requested} eigenpairs after {restarts} restarts")]
    EigenNotConverged {
        /// Pairs that met the tolerance.
        converged: usize,
        /// Pairs asked for.
        requested: usize,
        /// Restarts done.
        restarts: usize,
    },
    /// The problem is too ill-conditioned for `f64` to answer to the
    /// tolerance asked: e.g. a PSD density whose integral constraint
    /// (Eq. 12) has entries so small that the dual objective reaches
    /// magnitudes where its rounding exceeds the tolerance. Change the
    /// settings the message names.
    #[error("ill-conditioned {what}: {reason}")]
    IllConditioned {
        /// Which computation.
        what: &'static str,
        /// What went out of range, and what to change.
        reason: String,
    },
    /// A kernel matrix has lower numerical rank than the number of features
    /// asked of a Nystrom map.
    #[error("kernel matrix of source {source_index} has numerical rank {rank}, below the {requested} Nystrom features asked for")]
    RankDeficientKernel {
        /// Index of the source.
        source_index: usize,
        /// Eigenvalues above the tolerance.
        rank: usize,
        /// Features asked for.
        requested: usize,
    },
    /// The operation needs something the model was not fitted with (e.g.
    /// primal weights of a model fitted on precomputed kernel blocks).
    #[error("not available: {0}")]
    NotAvailable(&'static str),
    /// Class labels do not match the samples (Neural eKSVD's supervised term).
    #[error("labels: {0}")]
    Labels(String),
    /// Training loss became NaN/infinite or grew beyond the divergence bound;
    /// no model is returned.
    #[error("training diverged at epoch {epoch}: loss {loss:e} (initial {initial:e}); lower the learning rate")]
    Diverged {
        /// Epoch (1-based) at whose end the loss was checked.
        epoch: usize,
        /// The loss found (may be NaN or infinite).
        loss: f64,
        /// The loss before training.
        initial: f64,
    },
    /// The requested training backend cannot run here (e.g. no wgpu adapter).
    #[error("backend {backend} unavailable: {reason}")]
    BackendUnavailable {
        /// The backend.
        backend: &'static str,
        /// Why.
        reason: String,
    },
    /// Saving or loading a model failed (unknown format version, corrupt
    /// bytes, I/O).
    #[error("model record: {0}")]
    Record(String),
    /// A training backend failed to run queued work (burn's execution error).
    #[error("backend execution: {0}")]
    Execution(String),

    // ----- mklaren -----
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

    // ----- PSD models -----
    /// The kernel matrix of the centres is numerically zero (no usable feature).
    #[error("kernel matrix of the centres has numerical rank 0")]
    NoUsableFeature,
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

    // ----- sharded fits (crate::distributed) -----

    /// A rank of a sharded fit failed; every rank of the group returns this
    /// same error (the lowest failing rank's), the failing one included.
    #[error("rank {rank} failed: {message}")]
    RankFailed {
        /// The lowest rank that failed.
        rank: usize,
        /// Whether its error was caused by its arguments ([`Error::is_invalid_input`]).
        invalid_input: bool,
        /// Its error, as text.
        message: String,
    },
    /// The ranks of a sharded fit disagree on something that must be the same
    /// everywhere (feature count, kernel, parameters), found before any work.
    #[error("ranks disagree on {what}: rank {rank} differs")]
    ShardMismatch {
        /// What differs.
        what: &'static str,
        /// The lowest rank that differs from the reference rank (rank 0, or
        /// for shapes the first rank holding rows).
        rank: usize,
    },
}

impl Error {
    /// `true` for errors caused by the arguments of the call (empty or
    /// mismatched shapes, NaN/Inf or unrepresentable values, out-of-range
    /// parameters or indices, wrong label or input counts), `false` for
    /// failures of a valid call (GPU, memory, convergence, rank, overflow).
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self,
            Error::Empty { .. }
                | Error::DimensionMismatch { .. }
                | Error::ShapeOverflow { .. }
                | Error::NonFinite { .. }
                | Error::InvalidParameter { .. }
                | Error::IndexOutOfRange { .. }
                | Error::DeviceMismatch
                | Error::PrecisionMismatch { .. }
                | Error::NotRepresentable { .. }
                | Error::TooFewSources(_)
                | Error::EmptySource { .. }
                | Error::NonFiniteSource { .. }
                | Error::SourceNotRepresentable { .. }
                | Error::ShapeMismatch { .. }
                | Error::Labels(_)
                | Error::RankTooLarge { .. }
                | Error::InputCount { .. }
                | Error::SampleCountMismatch { .. }
                | Error::TargetLength { .. }
                | Error::ConstantTarget
                | Error::ShardMismatch { .. }
                | Error::RankFailed { invalid_input: true, .. }
        )
    }
}

/// The memory an [`Error::OutOfMemory`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    /// Host (CPU) memory.
    Host,
    /// The GPU's memory.
    Device,
}

impl std::fmt::Display for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Memory::Host => "host",
            Memory::Device => "GPU",
        })
    }
}

impl Error {
    /// An [`Error::OutOfMemory`] of the host.
    pub(crate) fn host_memory(detail: impl Into<String>) -> Self {
        Error::OutOfMemory { memory: Memory::Host, detail: detail.into() }
    }

    /// An [`Error::OutOfMemory`] of the GPU.
    pub(crate) fn device_memory(detail: impl Into<String>) -> Self {
        Error::OutOfMemory { memory: Memory::Device, detail: detail.into() }
    }
}


/// Result type of the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;
