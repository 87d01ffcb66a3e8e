//! The parameters of Neural eKSVD: [`NeuralEksvdParams`] (builder and
//! [`NeuralEksvdParams::validate`]), the learning-rate schedule
//! ([`LearningRateSchedule`]) and the early-stopping rule ([`EarlyStopping`]).

use super::fitted::NeuralEksvd;
use super::model::{Activation, Architecture, NeuralEksvdNet};
use super::placement::burn_device;
use super::Result;
use crate::error::Error;
use crate::Device;

/// Hyperparameters of Neural eKSVD: a builder, checked by
/// [`NeuralEksvdParams::validate`], which [`Fit::fit`](crate::estimator::Fit::fit)
/// and [`NeuralEksvdParams::fit_with_validation`] call first. The device is
/// given to the fit, not held here.
#[derive(Debug, Clone, PartialEq)]
pub struct NeuralEksvdParams {
    pub(super) components: usize,
    pub(super) hidden: Vec<usize>,
    pub(super) d_phi: usize,
    pub(super) activation: Activation,
    pub(super) eta: f64,
    pub(super) learning_rate: f64,
    pub(super) weight_decay: f64,
    pub(super) batch_size: usize,
    pub(super) max_epochs: usize,
    pub(super) patience: usize,
    pub(super) dropout: f64,
    pub(super) input_noise: f64,
    pub(super) early_stopping: EarlyStopping,
    pub(super) schedule: LearningRateSchedule,
    pub(super) weight_averaging: f64,
    pub(super) gamma_init: f64,
    pub(super) seed: u64,
    pub(super) progress: bool,
    pub(super) divergence_factor: f64,
    pub(super) graph_replay: bool,
    pub(super) sparse_first_layer: bool,
    pub(super) precision: crate::WorkingPrecision,
}

impl NeuralEksvdParams {
    /// `components` projection components per source; defaults: one hidden
    /// layer of 256, `d_phi = 128`, ReLU, `eta = 1`, Adam with learning rate
    /// `1e-3` and no weight decay, batches of 128, at most 100 epochs,
    /// patience 20 epochs, no dropout, no input noise, early stopping on validation
    /// macro-F1, a constant learning rate, no weight averaging,
    /// `gamma_init = 1`, seed 0, no progress bar, divergence
    /// factor `1e6`, replayed steps on a GPU where they apply, the first
    /// layer from the inputs' non-zeros on the CPU where it applies.
    pub fn new(components: usize) -> Self {
        NeuralEksvdParams {
            components,
            hidden: vec![256],
            d_phi: 128,
            activation: Activation::Relu,
            eta: 1.0,
            learning_rate: 1e-3,
            weight_decay: 0.0,
            batch_size: 128,
            max_epochs: 100,
            patience: 20,
            dropout: 0.0,
            input_noise: 0.0,
            early_stopping: EarlyStopping::ValidationF1,
            schedule: LearningRateSchedule::Constant,
            weight_averaging: 0.0,
            gamma_init: 1.0,
            seed: 0,
            progress: false,
            divergence_factor: 1e6,
            graph_replay: true,
            sparse_first_layer: true,
            precision: crate::WorkingPrecision::Auto,
        }
    }

    /// Hidden widths of every feature-map MLP (empty: one layer `d_q -> d_phi`).
    pub fn hidden(mut self, widths: Vec<usize>) -> Self {
        self.hidden = widths;
        self
    }
    /// Feature dimension `d_phi`.
    pub fn d_phi(mut self, d_phi: usize) -> Self {
        self.d_phi = d_phi;
        self
    }
    /// Activation of the MLPs.
    pub fn activation(mut self, activation: Activation) -> Self {
        self.activation = activation;
        self
    }
    /// Weight `eta >= 0` of the task loss (Section 3.4).
    pub fn eta(mut self, eta: f64) -> Self {
        self.eta = eta;
        self
    }
    /// Adam learning rate.
    pub fn learning_rate(mut self, lr: f64) -> Self {
        self.learning_rate = lr;
        self
    }
    /// Decoupled weight decay `wd >= 0` (AdamW, Loshchilov & Hutter 2019:
    /// every step also scales the weights by `1 - lr wd`); 0 is plain Adam.
    pub fn weight_decay(mut self, wd: f64) -> Self {
        self.weight_decay = wd;
        self
    }

    /// Whether a GPU fit records one step and replays it for the others,
    /// the last, shorter minibatch of each epoch included where padding it
    /// adds at most an eighth to an epoch's arithmetic (taken at full
    /// width with its extra rows masked out of the loss; default `true`;
    /// see `eksvd::neural::replay` in the source). A replay skips the host's work per kernel (burn's op
    /// recording, autodiff, fusion, bind groups), which bounds a step of
    /// this size. It applies on GPU backends with a constant learning rate,
    /// no dropout and no input noise, when an epoch has more than four full
    /// minibatches; elsewhere, and with `false`, every step runs eagerly.
    /// With replayed steps and no weight averaging, the evaluation after
    /// each epoch (training loss, validation scores) is captured after
    /// epoch 1 and replayed too. Both give the same training up to
    /// rounding: the replayed step and evaluation are checked once against
    /// eager ones, and the fit falls back to eager runs if they disagree.
    pub fn graph_replay(mut self, on: bool) -> Self {
        self.graph_replay = on;
        self
    }

    /// Whether a CPU fit computes the first layer of every feature map from
    /// the non-zeros of its minibatch and updates that layer on the host
    /// (default `true`; see `eksvd::neural::sparse_first` in the source):
    /// `X_B A_q + b_q` and the gradient `X_B^T G` cost `O(nnz(X_B) h_1)`
    /// instead of `O(|B| d_q h_1)`, and the layer's AdamW update is one pass
    /// over its weights. It applies on the CPU without input noise (noise
    /// fills the inputs); elsewhere, and with `false`, the first layer is a
    /// dense product in burn. Both train the same network up to f32
    /// rounding (the sums run in another order).
    pub fn sparse_first_layer(mut self, on: bool) -> Self {
        self.sparse_first_layer = on;
        self
    }

    /// Minibatch size (samples per Adam step; the last batch of an epoch may be smaller).
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }
    /// Maximum number of epochs.
    pub fn max_epochs(mut self, epochs: usize) -> Self {
        self.max_epochs = epochs;
        self
    }
    /// Epochs without a better validation score (see
    /// [`NeuralEksvdParams::early_stopping`]) before stopping.
    pub fn patience(mut self, epochs: usize) -> Self {
        self.patience = epochs;
        self
    }
    /// Dropout probability `0 <= p < 1` on the hidden layers of every
    /// feature map during the Adam steps (inverted dropout; none at
    /// evaluation). 0 (the default) turns it off.
    pub fn dropout(mut self, p: f64) -> Self {
        self.dropout = p;
        self
    }
    /// Standard deviation `s >= 0` of Gaussian noise added to every input
    /// entry of every Adam step (a fresh draw per step, none at evaluation):
    /// the inputs `x` of a minibatch become `x + s z`, `z ~ N(0, I)`. With
    /// standardised sources, `s` is a fraction of each feature's spread.
    /// 0 (the default) turns it off.
    pub fn input_noise(mut self, s: f64) -> Self {
        self.input_noise = s;
        self
    }
    /// Which validation score picks the kept epoch and drives the patience.
    pub fn early_stopping(mut self, rule: EarlyStopping) -> Self {
        self.early_stopping = rule;
        self
    }
    /// How the learning rate changes over the Adam steps.
    pub fn schedule(mut self, schedule: LearningRateSchedule) -> Self {
        self.schedule = schedule;
        self
    }
    /// Exponential moving average of the weights over the epochs, `0 <=
    /// decay < 1`: after each epoch the averaged network becomes `decay
    /// avg + (1 - decay) current` (starting from the first epoch's weights),
    /// and the per-epoch losses, the validation scores, early stopping and
    /// the returned model all use the averaged network; the Adam steps go on
    /// from the current weights. 0 (the default) is no averaging.
    pub fn weight_averaging(mut self, decay: f64) -> Self {
        self.weight_averaging = decay;
        self
    }
    /// Initial `gamma > 0`.
    pub fn gamma_init(mut self, gamma: f64) -> Self {
        self.gamma_init = gamma;
        self
    }
    /// Seed of the initial weights and of the batch order.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
    /// Show a progress bar (indicatif, on stderr) while training.
    pub fn progress(mut self, show: bool) -> Self {
        self.progress = show;
        self
    }
    /// Training stops with [`Error::Diverged`] when the loss on the
    /// training set exceeds this factor times its value before training (or
    /// is not finite).
    pub fn divergence_factor(mut self, factor: f64) -> Self {
        self.divergence_factor = factor;
        self
    }

    /// The working precision ([`crate::WorkingPrecision`]). The networks
    /// train in `f32` on both of burn's backends (Flex on the CPU, Wgpu on
    /// a GPU): `Auto` (the default) and `F32` are that; `F64` is
    /// [`Error::InvalidParameter`] from [`NeuralEksvdParams::validate`].
    pub fn precision(mut self, precision: crate::WorkingPrecision) -> Self {
        self.precision = precision;
        self
    }

    /// Checks the settings that do not depend on the data.
    ///
    /// Errors: [`Error::InvalidParameter`] naming the setting: `components`,
    /// `d_phi` or a hidden width of 0, `eta`, `weight_decay` or
    /// `input_noise` negative or not finite, `learning_rate` not finite and
    /// positive, `weight_averaging` or `dropout` outside `[0, 1)`,
    /// `gamma_init` not finite and positive, `batch_size` or `max_epochs`
    /// of 0, `divergence_factor` not above 1, `precision`
    /// [`crate::WorkingPrecision::F64`].
    pub fn validate(&self) -> Result<()> {
        let bad = |name: &'static str, reason: String| Err(Error::InvalidParameter { name, reason });
        if self.components == 0 {
            return bad("components", "must be positive".into());
        }
        if self.d_phi == 0 {
            return bad("d_phi", "must be positive".into());
        }
        if self.hidden.contains(&0) {
            return bad("hidden", "all layer widths must be positive".into());
        }
        if !(self.gamma_init.is_finite() && self.gamma_init > 0.0) {
            return bad("gamma_init", format!("must be finite and > 0, got {}", self.gamma_init));
        }
        if !(self.eta.is_finite() && self.eta >= 0.0) {
            return bad("eta", format!("must be finite and >= 0, got {}", self.eta));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return bad("weight_decay", format!("must be finite and >= 0, got {}", self.weight_decay));
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return bad("learning_rate", format!("must be finite and > 0, got {}", self.learning_rate));
        }
        if !(self.weight_averaging.is_finite() && (0.0..1.0).contains(&self.weight_averaging)) {
            return bad("weight_averaging", format!("must be in [0, 1), got {}", self.weight_averaging));
        }
        if !(self.dropout.is_finite() && (0.0..1.0).contains(&self.dropout)) {
            return bad("dropout", format!("must be in [0, 1), got {}", self.dropout));
        }
        if !(self.input_noise.is_finite() && self.input_noise >= 0.0) {
            return bad("input_noise", format!("must be finite and >= 0, got {}", self.input_noise));
        }
        if self.batch_size == 0 {
            return bad("batch_size", "must be positive".into());
        }
        if self.max_epochs == 0 {
            return bad("max_epochs", "must be positive".into());
        }
        if !(self.divergence_factor > 1.0) {
            return bad("divergence_factor", format!("must be > 1, got {}", self.divergence_factor));
        }
        if self.precision == crate::WorkingPrecision::F64 {
            return bad("precision", "the networks train in f32 on burn's backends; float64 is not supported, use auto or float32".into());
        }
        Ok(())
    }

    pub(super) fn architecture(&self, input_dims: Vec<usize>, n_classes: usize) -> Architecture {
        Architecture { input_dims, hidden: self.hidden.clone(), d_phi: self.d_phi, components: self.components, n_classes, activation: self.activation }
    }

    /// An untrained model on `device` with the initial weights a fit
    /// starts from, for sources of `input_dims` columns and `n_classes`
    /// classes.
    ///
    /// Errors: those of [`NeuralEksvdParams::validate`], an architecture
    /// that [`Architecture::validate`] turns down, and
    /// [`Error::BackendUnavailable`] when burn cannot run on `device`.
    pub fn init(&self, device: &Device, input_dims: Vec<usize>, n_classes: usize) -> Result<NeuralEksvd> {
        self.validate()?;
        let arch = self.architecture(input_dims, n_classes);
        let burn = burn_device(device)?;
        let net = NeuralEksvdNet::init(&arch, self.gamma_init, self.seed, &burn)?;
        Ok(NeuralEksvd::untrained(net, burn, device.clone(), arch))
    }

}

/// The learning rate of each Adam step of a fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LearningRateSchedule {
    /// The learning rate at every step.
    #[default]
    Constant,
    /// Cosine annealing without restarts (Loshchilov & Hutter, ICLR 2017):
    /// step `t` of `T = max_epochs * ceil(N / batch)` uses
    /// `lr (1 + cos(pi t / T)) / 2`, from `lr` down towards 0 at the last
    /// epoch (early stopping may end the run before).
    Cosine,
}

impl LearningRateSchedule {
    /// The rate of step `step` (from 0) of `total` for base rate `lr`.
    pub fn rate(self, lr: f64, step: usize, total: usize) -> f64 {
        match self {
            LearningRateSchedule::Constant => lr,
            LearningRateSchedule::Cosine => {
                let fraction = if total == 0 { 0.0 } else { (step.min(total) as f64) / total as f64 };
                0.5 * lr * (1.0 + (std::f64::consts::PI * fraction).cos())
            }
        }
    }
}

/// Which validation score a fit keeps the best epoch
/// by (and counts the patience against).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EarlyStopping {
    /// The highest validation macro-F1; among epochs with the same F1 the
    /// lower validation cross-entropy (on a few hundred samples F1 moves in
    /// steps of one sample, so ties are common).
    #[default]
    ValidationF1,
    /// The lowest validation cross-entropy (continuous, so less noisy than
    /// F1 on small validation sets).
    ValidationCrossEntropy,
}
