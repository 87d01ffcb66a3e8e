//! Neural eKSVD (Section 3.4 of the eKSVD paper, Lemma 3.3): per-source
//! neural feature maps `phi_q` (MLPs), projection weights `W_q`
//! (`d_phi x k`, one column per component) and a shared, learned
//! regularisation constant `gamma = exp(log_gamma) > 0`, trained end to end
//! with Adam on `sum_k (J_k / N)^2 + eta * L_CE` through [burn](https://burn.dev).
//!
//! * [`model`]: the burn [`Module`](burn::module::Module) (feature maps,
//!   projections, positive `gamma`, linear classifier on the scores), with
//!   each source's first layer at its own width `d_q` (no padding) and the
//!   layers after it stacked over the `Q` sources, so that beyond the first
//!   products a training step costs a fixed number of kernels whatever `Q`.
//! * [`loss`]: `J_k` of Eq. 3 per component and the training loss.
//! * [`NeuralEksvdParams`] (`params`): the validated builder, with the
//!   [`LearningRateSchedule`] and the [`EarlyStopping`] rule.
//! * `fit`: [`Fit<Labelled>`](crate::estimator::Fit) and
//!   [`NeuralEksvdParams::fit_with_validation`]: Adam on minibatches, optional
//!   dropout in the feature maps and noise on the inputs, early stopping on
//!   validation macro-F1 or cross-entropy, weight averaging, graph replay
//!   on a GPU.
//! * [`TrainingHistory`] (`history`): the per-epoch curves, as CSV.
//! * [`NeuralEksvd`] (`fitted`): the fitted model ([`OnDevice`](crate::estimator::OnDevice),
//!   [`Transform<MultiSource>`](crate::estimator::Transform): the scores,
//!   [`Predict<MultiSource>`](crate::estimator::Predict): the classes),
//!   save and load.
//! * [`placement`]: burn devices from gramian's devices.
//!
//! It follows the library's estimator convention: parameters ->
//! `fit(&device, &data)` on a [`crate::Device`] -> a model that computes on
//! that device. The CPU path trains on burn's Flex backend; a GPU trains on
//! burn's Wgpu backend **on the same wgpu device and queue** as gramian's
//! own kernels. A loaded model is on the CPU and
//! [`OnDevice::to_device`](crate::estimator::OnDevice::to_device) moves it.
//! Available with the cargo feature `neural`.
//!
//! ```no_run
//! use gramian::eksvd::neural::NeuralEksvdParams;
//! use gramian::prelude::*;
//! # fn demo(train: Labelled, validation: Labelled, test: MultiSource) -> Result<(), gramian::Error> {
//! let device = Device::cpu(); // or Device::gpu()?
//! let params = NeuralEksvdParams::new(16).max_epochs(50);
//! let model = params.fit_with_validation(&device, &train, &validation)?;
//! let classes = model.predict(&test)?; // on `device`
//! let scores = model.transform(&test)?; // [E_1 ... E_Q]
//! # let _ = (classes, scores, params.fit(&device, &train)?);
//! # Ok(())
//! # }
//! ```
//!
//! **Batch convention.** The loss uses the objective per training sample,
//! `J_k / N` (`N` the number of training samples): on a minibatch `B` its
//! data term is `((Q-1)/2) gamma` times the batch **mean** of
//! `sum_q (e_ik^(q))^2` and its weight terms are divided by `N`, an unbiased
//! estimate of the full-data `J_k / N`. Like the mean cross-entropy it is
//! O(1) whatever `N` and `|B|`, so `eta` weighs the same two quantities at
//! any batch size and training-set size. `J_k / N = 0` exactly where
//! `J_k = 0` (Lemma 3.3), and the reported curves are `sum_k (J_k / N)^2`.

mod fit;
mod fitted;
mod format1;
mod history;
pub mod loss;
pub mod model;
mod optimizer;
mod params;
pub mod placement;
mod replay;
mod resident;
mod sparse_first;

pub use loss::{cross_entropy, objective_from_squared_scores, objective_per_component, LossTensors, LossValues};
pub use model::{Activation, Architecture, NeuralEksvdNet, NeuralWeights, StackedDense};
pub use placement::{burn_device, shared_gpu};
pub use fitted::NeuralEksvd;
pub use history::{EpochRecord, TrainingHistory};
pub use params::{EarlyStopping, LearningRateSchedule, NeuralEksvdParams};
pub use crate::data::{Labelled, MAX_CLASSES};

use crate::error::Error;
use crate::Device;

/// Result type of Neural eKSVD.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A burn backend by name, for command lines: [`NeuralBackend::device`]
/// gives the gramian [`Device`] to fit on, whose kind picks the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NeuralBackend {
    /// burn's Flex backend on the CPU ([`Device::Cpu`]): matrix products by
    /// the `gemm` crate on all cores (AVX-512 kernels where the CPU has
    /// them), SIMD elementwise kernels.
    #[default]
    Cpu,
    /// burn's Wgpu backend on a GPU: by name, the process's
    /// [`placement::shared_gpu`] (opened like [`Device::gpu`]: a hardware
    /// adapter first, a software one such as lavapipe accepted).
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

    /// Parses `cpu` (also `flex` and `ndarray`) / `wgpu` or `gpu`
    /// (case-insensitive).
    pub fn parse(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "cpu" | "flex" | "ndarray" => Some(NeuralBackend::Cpu),
            "wgpu" | "gpu" => Some(NeuralBackend::Wgpu),
            _ => None,
        }
    }

    /// The backend a gramian device runs Neural eKSVD on.
    pub fn of(device: &Device) -> Self {
        if device.is_gpu() {
            NeuralBackend::Wgpu
        } else {
            NeuralBackend::Cpu
        }
    }

    /// The gramian device of this backend: [`Device::cpu`], or the
    /// process's [`placement::shared_gpu`].
    ///
    /// Errors: [`Error::BackendUnavailable`] when there is no GPU adapter.
    pub fn device(self) -> Result<Device> {
        match self {
            NeuralBackend::Cpu => Ok(Device::cpu()),
            NeuralBackend::Wgpu => shared_gpu(),
        }
    }
}
