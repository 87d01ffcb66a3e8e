//! Neural eKSVD (Section 3.4 of the eKSVD paper, Lemma 3.3): per-source
//! neural feature maps `phi_q` (MLPs), projection weights `W_q`
//! (`d_phi x k`, one column per component) and a shared, learned
//! regularisation constant `gamma = exp(log_gamma) > 0`, trained end to end
//! with Adam on `sum_k (J_k / N)^2 + eta * L_CE` through [burn](https://burn.dev).
//!
//! * [`model`]: the burn [`Module`](burn::module::Module) (feature maps,
//!   projections, positive `gamma`, linear classifier on the scores), with
//!   the `Q` sources stacked so that a training step costs a fixed number
//!   of kernels whatever `Q`.
//! * [`loss`]: `J_k` of Eq. 3 per component and the training loss.
//! * [`train`]: [`NeuralEksvdParams`] (validated builder) -> [`NeuralEksvd`]
//!   (transform, predict, save/load), with optional dropout in the feature
//!   maps, early stopping on validation macro-F1 or cross-entropy
//!   ([`EarlyStopping`]) and per-epoch training curves ([`TrainingHistory`]).
//!
//! * [`placement`]: burn devices from gramian's device selection.
//!
//! The device is chosen at run time, as for the rest of the library: a
//! gramian [`crate::Device`] ([`NeuralEksvdParams::device`], e.g.
//! `Device::auto()`), whose CPU path trains on burn's Flex backend and
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
mod optimizer;
pub mod placement;
mod replay;
pub mod train;

pub use loss::{cross_entropy, objective_from_squared_scores, objective_per_component, LossTensors, LossValues};
pub use model::{Activation, Architecture, NeuralEksvdNet, NeuralWeights, StackedDense};
pub use placement::{burn_device, shared_gpu};
pub use train::{EarlyStopping, EpochRecord, LearningRateSchedule, NeuralEksvd, NeuralEksvdParams, TrainingHistory};

use crate::error::Error;
use burn::tensor::Device;


/// Result type of Neural eKSVD.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The burn backend to train and run on, chosen at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NeuralBackend {
    /// burn's Flex backend on the CPU: matrix products by the `gemm` crate
    /// on all cores (AVX-512 kernels where the CPU has them), SIMD
    /// elementwise kernels. (burn's NdArray backend, which burn 0.22
    /// deprecates for Flex, ran here on one core: the UCI Digit fit 2.3-2.6x
    /// slower per epoch on 2 cores; BENCHMARKS.md.)
    #[default]
    Cpu,
    /// burn's Wgpu backend on gramian's GPU: the process's
    /// [`placement::shared_gpu`] (opened like [`crate::Device::gpu`]: a
    /// hardware adapter first, a software one such as lavapipe accepted),
    /// unless a gramian device is given with [`NeuralEksvdParams::device`].
    Wgpu,
}

impl NeuralBackend {
    /// Short name (`cpu`, `wgpu`).
    pub fn name(self) -> &'static str {
        match self {
            NeuralBackend::Cpu => "cpu",
            NeuralBackend::Wgpu => "wgpu",
        }
    }

    /// Parses `cpu` (also `flex`, and `ndarray`, the CPU backend's name
    /// before burn's Flex replaced NdArray) / `wgpu` or `gpu`
    /// (case-insensitive).
    pub fn parse(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "cpu" | "flex" | "ndarray" => Some(NeuralBackend::Cpu),
            "wgpu" | "gpu" => Some(NeuralBackend::Wgpu),
            _ => None,
        }
    }

    /// The burn device (without autodiff): burn's Flex on the CPU, or its Wgpu backend
    /// on [`placement::shared_gpu`] (registered with burn once per process).
    /// No adapter gives [`Error::BackendUnavailable`] instead of a panic.
    pub fn device(self) -> Result<Device> {
        burn_device(&placement::Placement::for_backend(self)?)
    }
}
