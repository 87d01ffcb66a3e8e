//! Neural eKSVD (Section 3.4 of the eKSVD paper, Lemma 3.3): per-source
//! neural feature maps `phi_q` (MLPs), projection weights `W_q`
//! (`d_phi x k`, one column per component) and a shared, learned
//! regularisation constant `gamma = exp(log_gamma) > 0`, trained end to end
//! with Adam on `sum_k (J_k / N)^2 + eta * L_CE` through [burn](https://burn.dev).
//!
//! * [`model`]: the burn [`Module`](burn::module::Module) (feature maps,
//!   projections, positive `gamma`, linear classifier on the scores).
//! * [`loss`]: `J_k` of Eq. 3 per component and the training loss.
//! * [`train`]: [`NeuralEksvdParams`] (validated builder) -> [`NeuralEksvd`]
//!   (transform, predict, save/load), with early stopping on validation
//!   macro-F1 and per-epoch training curves ([`TrainingHistory`]).
//!
//! * [`placement`]: burn devices from gramian's device selection.
//!
//! The device is chosen at run time, as for the rest of the library: a
//! gramian [`crate::Device`] ([`NeuralEksvdParams::device`], e.g.
//! `Device::auto()`), whose CPU path trains on burn's NdArray backend and
//! whose GPU trains on burn's Wgpu backend **on the same wgpu device and
//! queue** as gramian's own kernels; or a [`NeuralBackend`] by name
//! (`Wgpu` opens the process's [`placement::shared_gpu`]). The model code is
//! the same. Available with the cargo feature `neural`.
//!
//! **Batch convention.** The loss uses the objective per training sample,
//! `J_k / N` (`N` the number of training samples): on a minibatch `B` its
//! data term is `((Q-1)/2) gamma` times the batch **mean** of
//! `sum_q (e_ik^(q))^2` and its weight terms are divided by `N`, an unbiased
//! estimate of the full-data `J_k / N`. Like the mean cross-entropy it is
//! O(1) whatever `N` and `|B|`, so `eta` weighs the same two quantities at
//! any batch size and training-set size. `J_k / N = 0` exactly where
//! `J_k = 0` (Lemma 3.3), and the reported curves are `sum_k (J_k / N)^2`.

pub mod loss;
pub mod model;
pub mod placement;
pub mod train;

pub use loss::{cross_entropy, objective_per_component, LossTensors, LossValues};
pub use model::{Activation, Architecture, NeuralEksvdNet, NeuralWeights};
pub use placement::{burn_device, shared_gpu};
pub use train::{EpochRecord, NeuralEksvd, NeuralEksvdParams, TrainingHistory};

use burn::tensor::Device;
use thiserror::Error;

use super::EksvdError;

/// Errors of Neural eKSVD.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum NeuralError {
    /// Invalid data (empty, NaN/inf, mismatched shapes) or parameters, as for
    /// the other eKSVD solvers.
    #[error(transparent)]
    Eksvd(#[from] EksvdError),
    /// A value that is finite in f64 overflows f32, the precision of training.
    #[error("{what} of source {source_index} has a value ({value:e}) that is not finite in f32")]
    NotRepresentable {
        /// What was converted.
        what: &'static str,
        /// Index of the source.
        source_index: usize,
        /// The offending value.
        value: f64,
    },
    /// Labels do not match the samples.
    #[error("labels: {0}")]
    Labels(String),
    /// The training loss became NaN/infinite or grew beyond the divergence
    /// bound; no model is returned.
    #[error("training diverged at epoch {epoch}: loss {loss:e} (initial {initial:e}); lower the learning rate")]
    Diverged {
        /// Epoch (1-based) at whose end the loss was checked.
        epoch: usize,
        /// The loss found (may be NaN or infinite).
        loss: f64,
        /// The loss before training.
        initial: f64,
    },
    /// The requested backend cannot run here (e.g. no wgpu adapter).
    #[error("backend {backend} unavailable: {reason}")]
    BackendUnavailable {
        /// The backend.
        backend: &'static str,
        /// Why.
        reason: String,
    },
    /// Saving or loading a model failed.
    #[error("model record: {0}")]
    Record(String),
    /// The backend failed to run queued work (burn's execution error).
    #[error("backend execution: {0}")]
    Execution(String),
}

/// Result type of Neural eKSVD.
pub type Result<T, E = NeuralError> = std::result::Result<T, E>;

/// The burn backend to train and run on, chosen at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NeuralBackend {
    /// burn's NdArray backend on the CPU.
    #[default]
    NdArray,
    /// burn's Wgpu backend on gramian's GPU: the process's
    /// [`placement::shared_gpu`] (opened like [`crate::Device::gpu`]: a
    /// hardware adapter first, a software one such as lavapipe accepted),
    /// unless a gramian device is given with [`NeuralEksvdParams::device`].
    Wgpu,
}

impl NeuralBackend {
    /// Short name (`ndarray`, `wgpu`).
    pub fn name(self) -> &'static str {
        match self {
            NeuralBackend::NdArray => "ndarray",
            NeuralBackend::Wgpu => "wgpu",
        }
    }

    /// Parses `ndarray` / `wgpu` (case-insensitive).
    pub fn parse(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "ndarray" | "cpu" => Some(NeuralBackend::NdArray),
            "wgpu" | "gpu" => Some(NeuralBackend::Wgpu),
            _ => None,
        }
    }

    /// The burn device (without autodiff): NdArray, or burn's Wgpu backend
    /// on [`placement::shared_gpu`] (registered with burn once per process).
    /// No adapter gives [`NeuralError::BackendUnavailable`] instead of a panic.
    pub fn device(self) -> Result<Device> {
        burn_device(&placement::Placement::for_backend(self)?)
    }
}
