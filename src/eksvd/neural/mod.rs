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
//! The backend is chosen at run time ([`NeuralBackend::NdArray`] on the CPU,
//! [`NeuralBackend::Wgpu`] on a GPU through wgpu); the model code is the same.
//! Available with the cargo feature `neural`.
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
pub mod train;

pub use loss::{cross_entropy, objective_per_component, LossTensors, LossValues};
pub use model::{Activation, Architecture, NeuralEksvdNet, NeuralWeights};
pub use train::{EpochRecord, NeuralEksvd, NeuralEksvdParams, TrainingHistory};

use std::sync::OnceLock;

use burn::tensor::Device;

/// Neural eKSVD's error: an alias of the library's one [`Error`](crate::Error).
pub type NeuralError = crate::error::Error;

/// Result type of Neural eKSVD.
pub type Result<T, E = NeuralError> = std::result::Result<T, E>;

/// The burn backend to train and run on, chosen at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NeuralBackend {
    /// burn's NdArray backend on the CPU.
    #[default]
    NdArray,
    /// burn's Wgpu backend (Vulkan, Metal, DX12 or GL, whichever wgpu finds
    /// first; lavapipe on machines without a GPU).
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

    /// The burn device (without autodiff). The wgpu runtime is initialised
    /// once per process; failing to find an adapter gives
    /// [`NeuralError::BackendUnavailable`] instead of a panic.
    pub fn device(self) -> Result<Device> {
        match self {
            #[allow(deprecated)] // burn 0.22 deprecates NdArray in favour of Flex; the issue asks for NdArray
            NeuralBackend::NdArray => Ok(Device::ndarray()),
            NeuralBackend::Wgpu => {
                static WGPU: OnceLock<std::result::Result<Device, String>> = OnceLock::new();
                WGPU.get_or_init(|| Device::wgpu_options().init().map_err(|e| e.to_string()))
                    .clone()
                    .map_err(|reason| NeuralError::BackendUnavailable { backend: "wgpu", reason })
            }
        }
    }
}
