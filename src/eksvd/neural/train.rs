//! Training of Neural eKSVD (Section 3.4): [`NeuralEksvdParams`] (validated
//! builder) -> [`NeuralEksvd`] (transform, predict, save/load), Adam on
//! minibatches of `sum_k (J_k / N)^2 + eta L_CE` (optionally with dropout in
//! the feature maps), early stopping on validation macro-F1 or validation
//! cross-entropy keeping the best checkpoint, per-epoch curves.

use std::cell::RefCell;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use burn::module::Module;
use burn::tensor::{Device, Distribution, Int, Tensor, TensorData, Transaction};
use nalgebra::DMatrix;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use super::loss::{cross_entropy, objective_from_squared_scores, LossValues};
use super::optimizer::InPlaceAdamW;
use super::replay::{capture_step, check_replay, deep_copy, kernel_profiling_on, DeviceCursor, StepSettings, StepState, CAPTURE_STEPS};
use super::model::{tensor_to_f32, tensor_to_matrix, tensor_to_vector, Activation, Architecture, NeuralEksvdNet, NeuralWeights};
use super::placement::{burn_device, Placement};
use super::{NeuralBackend, Result};
use crate::error::Error;
use crate::datasets::try_macro_f1;
use crate::data::{check_shape, check_source_matrix};
use crate::data::MultiSource;

/// Hyperparameters of Neural eKSVD (linfa-like builder; checked by
/// [`NeuralEksvdParams::fit`]).
#[derive(Debug, Clone, PartialEq)]
pub struct NeuralEksvdParams {
    components: usize,
    hidden: Vec<usize>,
    d_phi: usize,
    activation: Activation,
    eta: f64,
    learning_rate: f64,
    weight_decay: f64,
    batch_size: usize,
    max_epochs: usize,
    patience: usize,
    dropout: f64,
    input_noise: f64,
    early_stopping: EarlyStopping,
    schedule: LearningRateSchedule,
    weight_averaging: f64,
    gamma_init: f64,
    seed: u64,
    backend: NeuralBackend,
    placement: Option<Placement>,
    progress: bool,
    divergence_factor: f64,
    graph_replay: bool,
}

impl NeuralEksvdParams {
    /// `components` projection components per source; defaults: one hidden
    /// layer of 256, `d_phi = 128`, ReLU, `eta = 1`, Adam with learning rate
    /// `1e-3` and no weight decay, batches of 128, at most 100 epochs,
    /// patience 20 epochs, no dropout, no input noise, early stopping on validation
    /// macro-F1, a constant learning rate, no weight averaging,
    /// `gamma_init = 1`, seed 0, the CPU (burn Flex), no progress bar, divergence
    /// factor `1e6`, replayed steps on a GPU where they apply.
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
            backend: NeuralBackend::Cpu,
            placement: None,
            progress: false,
            divergence_factor: 1e6,
            graph_replay: true,
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
    /// Backend to train and run on, by name ([`NeuralBackend::Wgpu`]: the
    /// process's [`super::shared_gpu`]); replaces a device given with
    /// [`NeuralEksvdParams::device`].
    pub fn backend(mut self, backend: NeuralBackend) -> Self {
        self.backend = backend;
        self.placement = None;
        self
    }
    /// The gramian device to train and run on, e.g. `Device::auto()`: its
    /// CPU path trains on burn's Flex backend, its GPU on burn's Wgpu
    /// backend on that very wgpu device and queue (so gramian's kernels and
    /// the network share one GPU). Sets the backend accordingly.
    pub fn device(mut self, device: crate::Device) -> Self {
        self.backend = Placement::backend_of(&device);
        self.placement = Some(Placement(device));
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

    /// The backend.
    pub fn get_backend(&self) -> NeuralBackend {
        self.backend
    }
    /// The gramian device given with [`NeuralEksvdParams::device`], if any.
    pub fn get_device(&self) -> Option<&crate::Device> {
        self.placement.as_ref().map(|p| &p.0)
    }

    /// The gramian device to run on: the one given, or the backend's.
    fn gramian_device(&self) -> Result<crate::Device> {
        match &self.placement {
            Some(p) => Ok(p.0.clone()),
            None => Placement::for_backend(self.backend),
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |name: &'static str, reason: String| Err(Error::InvalidParameter { name, reason });
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
        Ok(())
    }

    fn architecture(&self, input_dims: Vec<usize>, n_classes: usize) -> Architecture {
        Architecture { input_dims, hidden: self.hidden.clone(), d_phi: self.d_phi, components: self.components, n_classes, activation: self.activation }
    }

    /// An untrained model with the initial weights `fit` starts from.
    pub fn init(&self, input_dims: Vec<usize>, n_classes: usize) -> Result<NeuralEksvd> {
        self.validate()?;
        let arch = self.architecture(input_dims, n_classes);
        let gramian = self.gramian_device()?;
        let device = burn_device(&gramian)?;
        let net = NeuralEksvdNet::init(&arch, self.gamma_init, self.seed, &device)?;
        Ok(NeuralEksvd { net, device, gramian, arch, backend: self.backend, history: TrainingHistory::default(), best_epoch: 0 })
    }

    /// Trains on paired sources `train` with class labels (`0..C`), with
    /// early stopping on `validation` when given (by the rule of
    /// [`NeuralEksvdParams::early_stopping`]; the best epoch's weights are
    /// kept), else for `max_epochs`.
    ///
    /// Errors: invalid parameters or data ([`Error`]), values
    /// that overflow f32 ([`Error::SourceNotRepresentable`]), bad labels,
    /// [`Error::Diverged`], [`Error::BackendUnavailable`].
    pub fn fit(&self, train: &MultiSource, labels: &[usize], validation: Option<(&MultiSource, &[usize])>) -> Result<NeuralEksvd> {
        let setup = Instant::now();
        self.validate()?;
        let n_classes = check_labels(train, labels)?.max(validation.map_or(Ok(0), |(v, l)| check_labels(v, l))?);
        if let Some((v, _)) = validation {
            check_same_dims(train, v)?;
        }
        let host = HostData::new(train, Some(labels), n_classes)?;
        let validation_host = validation.map(|(v, l)| HostData::new(v, Some(l), n_classes)).transpose()?;
        let mut model = self.init(train.sources().iter().map(|x| x.ncols()).collect(), n_classes)?;
        let device = model.device.clone();
        let ad_device = device.clone().autodiff();
        let n = host.n;
        // The training set is uploaded once, stacked (`[Q, N, w]`), to the
        // training device (for the steps) and the plain one (for the
        // per-epoch loss); each epoch uploads its permutation (n integers)
        // and every minibatch is gathered on the device. Per epoch, the
        // loss and the validation scores come back in one read each.
        let resident = host.upload(&ad_device);
        let resident_eval = host.upload(&device);
        let resident_validation = validation_host.as_ref().map(|h| h.upload(&device));
        if self.dropout > 0.0 || self.input_noise > 0.0 {
            // The dropout masks and the input noise come from the device's
            // random state.
            ad_device.seed(self.seed);
        }
        // Replayed steps (see `replay`): on a GPU, at a constant rate,
        // without random masks or noise (a replay would repeat the captured
        // ones), with a full step left for the check after the capture's,
        // and not while CubeCL profiles each kernel.
        let mut replayable = self.graph_replay
            && self.backend == NeuralBackend::Wgpu
            && self.schedule == LearningRateSchedule::Constant
            && self.dropout == 0.0
            && self.input_noise == 0.0
            && n / self.batch_size > CAPTURE_STEPS;
        if replayable && kernel_profiling_on() {
            log::info!("Neural eKSVD: CubeCL's profiling logger is on, which graph capture cannot record; training with eager steps");
            replayable = false;
        }
        let net = model.net.clone().fork(&ad_device).train();
        let state = RefCell::new(StepState { net: Some(net), optim: InPlaceAdamW::new(self.weight_decay, &device, replayable) });
        let cursor = RefCell::new(DeviceCursor::new(n, self.batch_size, &ad_device, replayable));
        let mut rng = StdRng::seed_from_u64(self.seed ^ 0x9e37_79b9_7f4a_7c15);
        let mut order: Vec<usize> = (0..n).collect();
        let steps_per_epoch = n.div_ceil(self.batch_size);
        let graph_steps = cursor.borrow().graph_steps();
        let total_steps = self.max_epochs.saturating_mul(steps_per_epoch);
        let mut step = 0usize;
        let mut averaged: Option<NeuralWeights> = None;
        let settings = StepSettings { n_samples: n, eta: self.eta, learning_rate: self.learning_rate, dropout: self.dropout };
        let mut graph = None;
        let gather = |idx: Tensor<1, Int>| {
            let (x, one_hot) = resident.gather(idx);
            (x, one_hot.expect("labelled"))
        };

        let initial = model.evaluate(&resident_eval, self.eta, false)?.loss.expect("labelled");
        if !initial.total.is_finite() {
            return Err(Error::Diverged { epoch: 0, loss: initial.total, initial: initial.total });
        }
        let bar = self.progress.then(|| {
            let bar = indicatif::ProgressBar::new(self.max_epochs as u64);
            bar.set_style(indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} epochs {msg} [{elapsed}<{eta}]").expect("static template"));
            bar
        });
        let mut history = TrainingHistory { setup_seconds: setup.elapsed().as_secs_f64(), ..TrainingHistory::default() };
        let mut best: Option<(ValidationScore, usize, NeuralEksvdNet)> = None;
        // The data sets evaluated after each epoch: the training set, then
        // the validation set (with predictions).
        let targets: Vec<&ResidentData> = std::iter::once(&resident_eval).chain(resident_validation.as_ref()).collect();
        let mut evaluation_graph: Option<EvaluationGraph<'_>> = None;
        let mut evaluation_capture_tried = false;
        for epoch in 1..=self.max_epochs {
            let start = Instant::now();
            order.shuffle(&mut rng);
            cursor.borrow_mut().start_epoch(&order);
            let mut done = 0;
            if replayable && epoch == 1 {
                graph = capture_step(&device, &state, &cursor, gather, settings);
                done = CAPTURE_STEPS;
                step += CAPTURE_STEPS;
                match graph.as_mut() {
                    Some(g) => {
                        history.replayed_steps += 1;
                        match check_replay(g, &state, &cursor, gather, settings, done, &ad_device) {
                            Ok(()) => history.replayed_steps += 1,
                            Err(reason) => {
                                log::warn!("Neural eKSVD: replayed steps disagree with eager ones ({reason}); training with eager steps");
                                graph = None;
                            }
                        }
                        done += 1;
                        step += 1;
                    }
                    None => log::info!("Neural eKSVD: no graph replay here (no graph support, or the captured step did not stay in place); training with eager steps"),
                }
                replayable = graph.is_some();
            }
            if let Some(g) = graph.as_mut() {
                for _ in done..graph_steps {
                    // Safety: every buffer the captured step reads or writes
                    // is held by `state` and `cursor` (parameters, moments,
                    // step count and its tables, permutation, cursor) or `resident`, all alive
                    // for the whole fit and written over in place only, on
                    // this thread's stream.
                    unsafe { g.replay() };
                }
                step += graph_steps - done;
                history.replayed_steps += graph_steps - done;
                done = graph_steps;
            }
            for start in (done * self.batch_size..n).step_by(self.batch_size) {
                let len = self.batch_size.min(n - start);
                let (mut x, one_hot) = gather(cursor.borrow().slice(start, len));
                if self.input_noise > 0.0 {
                    // Noise on each source's own columns only: the padding
                    // stays zero.
                    let noise = x.random_like(Distribution::Normal(0.0, self.input_noise));
                    x = x + noise * resident.columns.clone();
                }
                let rate = self.schedule.rate(self.learning_rate, step, total_steps);
                state.borrow_mut().step(x, one_hot, None, StepSettings { learning_rate: rate, ..settings });
                step += 1;
                if graph.is_some() && !state.borrow().optim.all_in_place() {
                    // The graphs would write over (or read) buffers the
                    // network no longer uses.
                    log::info!("Neural eKSVD: an eager step did not stay in place; training with eager steps");
                    graph = None;
                    evaluation_graph = None;
                    replayable = false;
                }
            }
            // The steps are queued asynchronously on GPU backends: wait for
            // them, so that `seconds` is the epoch's work, not its queueing.
            ad_device.sync().map_err(|e| Error::Execution(format!("{e:?}")))?;
            let seconds = start.elapsed().as_secs_f64();
            let evaluation = Instant::now();
            // The network evaluated. With replayed steps it shares the
            // training network's buffers, which the next epoch's steps write
            // over in place: it is dropped before them (an eager step stays
            // in place only while nothing else holds its parameters), and
            // the best epoch's network is copied when it is kept.
            let mut evaluated = state.borrow().net.as_ref().expect("a network between steps").valid();
            if self.weight_averaging > 0.0 {
                // The average lives on the host in f64 (a few hundred
                // thousand weights: one download per epoch).
                let current = evaluated.export();
                let avg = match averaged.take() {
                    None => current,
                    Some(mut avg) => {
                        avg.blend(&current, self.weight_averaging);
                        avg
                    }
                };
                evaluated = NeuralEksvdNet::from_weights(&avg, &device)?;
                averaged = Some(avg);
            }
            let shares_buffers = replayable && self.weight_averaging == 0.0;
            // The training loss and the validation scores, read in one
            // transfer; replayed from a captured pass (see
            // `capture_evaluation`) once the steps are replayed.
            let passes = match evaluation_graph.as_mut() {
                Some(g) => {
                    // Safety: the graph reads the training network's
                    // parameters (held by `state`, written over in place
                    // only), `resident_eval` and `resident_validation`, all
                    // alive for the whole fit, and writes its own outputs.
                    let out = unsafe { g.replay() };
                    history.replayed_evaluations += 1;
                    read_passes(&out.0, &out.1, self.eta)?
                }
                None => {
                    let out = queue_evaluation(&evaluated, &targets);
                    let passes = read_passes(&out.0, &out.1, self.eta)?;
                    if shares_buffers && !evaluation_capture_tried {
                        evaluation_capture_tried = true;
                        evaluation_graph = capture_evaluation(&device, &state, targets.clone(), &passes, self.eta);
                    }
                    passes
                }
            };
            let mut passes = passes.into_iter();
            let training = passes.next().ok_or_else(|| Error::Execution("no training pass read".into()))?;
            let values = training.loss.expect("labelled");
            if !values.total.is_finite() || values.total > self.divergence_factor * initial.total {
                if let Some(bar) = &bar {
                    bar.abandon_with_message("diverged");
                }
                return Err(Error::Diverged { epoch, loss: values.total, initial: initial.total });
            }
            let score = match (validation, passes.next()) {
                (Some((_, l)), Some(on_validation)) => Some(ValidationScore {
                    macro_f1: try_macro_f1(l, &on_validation.predictions).map_err(|e| Error::Labels(format!("validation macro-F1: {e}")))?,
                    cross_entropy: on_validation.loss.expect("labelled").cross_entropy,
                }),
                _ => None,
            };
            let validation_f1 = score.map(|s| s.macro_f1);
            let mut stop = false;
            if let Some(score) = score {
                if best.as_ref().is_none_or(|(b, _, _)| score.better_than(b, self.early_stopping)) {
                    best = Some((score, epoch, if shares_buffers { deep_copy(evaluated) } else { evaluated }));
                } else {
                    stop = epoch - best.as_ref().map_or(0, |b| b.1) >= self.patience;
                }
            }
            let evaluation_seconds = evaluation.elapsed().as_secs_f64();
            history.epochs.push(EpochRecord { epoch, objective_squared: values.objective_squared, cross_entropy: values.cross_entropy, gamma: training.gamma, validation_f1, validation_cross_entropy: score.map(|s| s.cross_entropy), seconds, evaluation_seconds });
            if let Some(bar) = &bar {
                bar.set_position(epoch as u64);
                bar.set_message(format!("J^2 {:.3e} CE {:.4} val F1 {}", values.objective_squared, values.cross_entropy, validation_f1.map_or("-".into(), |f| format!("{f:.4}"))));
            }
            if stop {
                break;
            }
        }
        if let Some(bar) = &bar {
            bar.finish();
        }
        model.best_epoch = history.epochs.len();
        model.net = match (best, averaged) {
            (Some((_, epoch, net)), _) => {
                model.best_epoch = epoch;
                net
            }
            (None, Some(avg)) => NeuralEksvdNet::from_weights(&avg, &device)?,
            (None, None) => {
                let last = state.borrow_mut().net.take().expect("a network between steps").valid();
                // With replayed steps its buffers were the graphs': the
                // model gets its own.
                if replayable {
                    deep_copy(last)
                } else {
                    last
                }
            }
        };
        let gamma = model.gamma();
        if !(gamma.is_finite() && gamma > 0.0) {
            return Err(Error::Diverged { epoch: model.best_epoch, loss: gamma, initial: initial.total });
        }
        model.history = history;
        Ok(model)
    }
}

/// The learning rate of each Adam step of [`NeuralEksvdParams::fit`].
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

/// Which validation score [`NeuralEksvdParams::fit`] keeps the best epoch
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

/// The validation scores of one epoch.
#[derive(Debug, Clone, Copy)]
struct ValidationScore {
    macro_f1: f64,
    cross_entropy: f64,
}

impl ValidationScore {
    fn better_than(&self, other: &ValidationScore, rule: EarlyStopping) -> bool {
        match rule {
            EarlyStopping::ValidationF1 => self.macro_f1 > other.macro_f1 || (self.macro_f1 == other.macro_f1 && self.cross_entropy < other.cross_entropy),
            EarlyStopping::ValidationCrossEntropy => self.cross_entropy < other.cross_entropy,
        }
    }
}

/// The largest number of classes the neural variant trains on (labels in
/// `0..MAX_CLASSES`): its output layer and one-hot targets have one column
/// per class, so a stray label such as `1e12` must not size them.
pub const MAX_CLASSES: usize = 1 << 16;

/// Number of classes (`max label + 1`), after checking one label per sample
/// and every label below [`MAX_CLASSES`].
fn check_labels(data: &MultiSource, labels: &[usize]) -> Result<usize> {
    if !data.is_paired() {
        return Err(Error::Labels("Neural eKSVD trains on paired sources (one label per sample)".into()));
    }
    check_shape("labels vs samples", data.source(0).nrows(), labels.len())?;
    if let Some(&l) = labels.iter().find(|&&l| l >= MAX_CLASSES) {
        return Err(Error::Labels(format!("label {l} is not below MAX_CLASSES = {MAX_CLASSES}")));
    }
    let classes = labels.iter().max().map_or(0, |m| m + 1);
    if classes < 2 {
        return Err(Error::Labels(format!("need at least 2 classes, got {classes}")));
    }
    Ok(classes)
}

fn check_same_dims(a: &MultiSource, b: &MultiSource) -> Result<()> {
    check_shape("number of sources", a.n_sources(), b.n_sources())?;
    for q in 0..a.n_sources() {
        check_shape(format!("columns of source {q}"), a.source(q).ncols(), b.source(q).ncols())?;
    }
    Ok(())
}

/// Row-major f32 copies of the sources, checked to be finite in f32.
fn to_f32_rows(q: usize, x: &DMatrix<f64>) -> Result<Vec<f32>> {
    check_source_matrix("data", q, x)?;
    let mut v = Vec::with_capacity(x.len());
    for row in x.row_iter() {
        for &value in row.iter() {
            let f = value as f32;
            if !f.is_finite() {
                return Err(Error::SourceNotRepresentable { what: "data", source_index: q, value });
            }
            v.push(f);
        }
    }
    Ok(v)
}

/// A data set on the host, checked and in f32, before its upload: the
/// sources stacked as `[Q, n, w]` (row-major, source `q` in the first
/// `d_q` of the `w = max_q d_q` columns, the rest zero), and the labels if
/// any.
struct HostData {
    n: usize,
    dims: Vec<usize>,
    width: usize,
    stacked: Vec<f32>,
    labels: Option<Vec<usize>>,
    n_classes: usize,
}

impl HostData {
    fn new(data: &MultiSource, labels: Option<&[usize]>, n_classes: usize) -> Result<Self> {
        let n = data.source(0).nrows();
        let dims: Vec<usize> = data.sources().iter().map(|x| x.ncols()).collect();
        let width = dims.iter().copied().max().unwrap_or(0);
        let len = dims.len().checked_mul(n).and_then(|v| v.checked_mul(width)).ok_or(Error::InvalidParameter { name: "data", reason: "Q n max_q d_q overflows usize".into() })?;
        let mut stacked = vec![0f32; len];
        for (q, x) in data.sources().iter().enumerate() {
            // Checked non-empty by `to_f32_rows`, so `d >= 1`.
            let rows = to_f32_rows(q, x)?;
            let d = dims[q];
            for (i, row) in rows.chunks_exact(d).enumerate() {
                let at = (q * n + i) * width;
                stacked[at..at + d].copy_from_slice(row);
            }
        }
        Ok(HostData { n, dims, width, stacked, labels: labels.map(<[usize]>::to_vec), n_classes })
    }

    /// The stacked sources, the one-hot labels and the column mask as
    /// tensors on `device` (one upload each).
    fn upload(&self, device: &Device) -> ResidentData {
        let q = self.dims.len();
        let x = Tensor::from_data(TensorData::new(self.stacked.clone(), [q, self.n, self.width]), device);
        let one_hot = self.labels.as_ref().map(|labels| {
            let mut one_hot = vec![0f32; self.n * self.n_classes];
            for (r, &l) in labels.iter().enumerate() {
                one_hot[r * self.n_classes + l] = 1.0;
            }
            Tensor::from_data(TensorData::new(one_hot, [self.n, self.n_classes]), device)
        });
        let mut mask = vec![0f32; q * self.width];
        for (s, &d) in self.dims.iter().enumerate() {
            mask[s * self.width..s * self.width + d].fill(1.0);
        }
        ResidentData { n: self.n, x, one_hot, columns: Tensor::from_data(TensorData::new(mask, [q, 1, self.width]), device) }
    }
}

/// A data set resident on a burn device, sources stacked (`[Q, n, w]`):
/// minibatches are gathered (`select`) or sliced (`narrow`) there, with no
/// host transfer.
struct ResidentData {
    n: usize,
    x: Tensor<3>,
    one_hot: Option<Tensor<2>>,
    /// `[Q, 1, w]`: 1 on the columns of each source, 0 on its padding.
    columns: Tensor<3>,
}

impl ResidentData {
    /// The samples `idx` of every source and their one-hot labels.
    fn gather(&self, idx: Tensor<1, Int>) -> (Tensor<3>, Option<Tensor<2>>) {
        (self.x.clone().select(1, idx.clone()), self.one_hot.clone().map(|t| t.select(0, idx)))
    }

    /// Samples `start .. start + len` of every source and their one-hot labels.
    fn rows(&self, start: usize, len: usize) -> (Tensor<3>, Option<Tensor<2>>) {
        (self.x.clone().narrow(1, start, len), self.one_hot.clone().map(|t| t.narrow(0, start, len)))
    }
}

/// One pass of a model over resident data, read back in one transfer.
struct Evaluation {
    /// The loss terms (labelled data only).
    loss: Option<LossValues>,
    /// The predicted classes (when asked for).
    predictions: Vec<usize>,
    /// `gamma`.
    gamma: f64,
}

/// Samples per forward pass when evaluating on a whole data set.
const EVAL_CHUNK: usize = 4096;

/// The outputs of one pass of a network over resident data, queued on the
/// device and not read yet ([`read_passes`]).
struct QueuedPass {
    /// `J_k / N` (`[k]`) and the sum of the per-sample cross-entropies
    /// (`[1]`), on labelled data.
    loss: Option<(Tensor<1>, Tensor<1>)>,
    /// The predicted classes of each chunk (when asked for).
    classes: Vec<Tensor<2, Int>>,
    /// Samples.
    n: usize,
}

/// One pass of `net` over `data` in chunks of [`EVAL_CHUNK`] samples: the
/// `J_k` need only the per-component sums of squared scores
/// ([`objective_from_squared_scores`]), the cross-entropy the sum of the
/// per-sample terms. Nothing is read: the outputs stay on the device.
fn queue_pass(net: &NeuralEksvdNet, data: &ResidentData, predictions: bool) -> QueuedPass {
    let n = data.n;
    let mut sums: Option<(Tensor<2>, Tensor<1>)> = None;
    let mut classes = Vec::new();
    for start in (0..n).step_by(EVAL_CHUNK) {
        let len = EVAL_CHUNK.min(n - start);
        let (x, one_hot) = data.rows(start, len);
        let scores = net.stacked_scores(x, 0.0);
        let logits = net.logits(scores.clone());
        if let Some(one_hot) = one_hot {
            let [q, _, k] = scores.dims();
            let squared = scores.reshape([q * len, k]).square().sum_dim(0);
            let ce = cross_entropy(logits.clone(), one_hot).mul_scalar(len as f64);
            sums = Some(match sums.take() {
                None => (squared, ce),
                Some((s, c)) => (s + squared, c + ce),
            });
        }
        if predictions {
            classes.push(logits.argmax(1));
        }
    }
    let loss = sums.map(|(squared, ce)| (objective_from_squared_scores(net.projections(), squared, n, net.gamma(), n), ce));
    QueuedPass { loss, classes, n }
}

/// `gamma` and one [`QueuedPass`] per data set evaluated.
type EvaluationOutputs = (Tensor<1>, Vec<QueuedPass>);

/// The per-epoch evaluation of `net`, queued: `gamma` and a pass over each
/// of `targets` (the training set, then the validation set with
/// predictions).
fn queue_evaluation(net: &NeuralEksvdNet, targets: &[&ResidentData]) -> EvaluationOutputs {
    (net.gamma(), targets.iter().enumerate().map(|(i, d)| queue_pass(net, d, i > 0)).collect())
}

/// A captured per-epoch evaluation ([`capture_evaluation`]).
type EvaluationGraph<'a> = burn::tensor::Graph<EvaluationOutputs, Box<dyn FnMut() -> EvaluationOutputs + 'a>>;

/// Captures the per-epoch evaluation of the training network in `state`
/// (its parameters written over in place by replayed steps): a pass over each of `targets`, with
/// predictions on all but the first (burn's [`capture`](burn::tensor::capture):
/// three warm-up passes, then the recorded one). Replays then evaluate the
/// network as the steps leave it without burn's host work per operation.
/// Checked once: the first replay must read back `reference`, the same
/// evaluation run eagerly (1e-5 relative on the losses, the same
/// predictions). Returns `None` where the backend has no graphs or the check
/// fails (the fit then evaluates eagerly).
fn capture_evaluation<'a>(device: &Device, state: &'a RefCell<StepState>, targets: Vec<&'a ResidentData>, reference: &[Evaluation], eta: f64) -> Option<EvaluationGraph<'a>> {
    // The network is taken from `state` at each call and dropped after it:
    // the graph holds no handle on the parameters, so that eager steps may
    // still write them in place.
    let pass: Box<dyn FnMut() -> EvaluationOutputs + 'a> = Box::new(move || {
        let net = state.borrow().net.as_ref().expect("a network between steps").valid();
        queue_evaluation(&net, &targets)
    });
    let mut graph = burn::tensor::capture(device, pass);
    if !graph.is_hardware() {
        return None;
    }
    // Safety: as for the fit's evaluation replays.
    let out = unsafe { graph.replay() };
    let replayed = match read_passes(&out.0, &out.1, eta) {
        Ok(r) => r,
        Err(e) => {
            log::info!("Neural eKSVD: the captured evaluation did not read back ({e}); evaluating eagerly");
            return None;
        }
    };
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-5 * b.abs().max(1e-12);
    let same = replayed.len() == reference.len()
        && replayed.iter().zip(reference).all(|(a, b)| {
            close(a.gamma, b.gamma)
                && a.predictions == b.predictions
                && match (&a.loss, &b.loss) {
                    (Some(x), Some(y)) => close(x.total, y.total) && x.objective.iter().zip(&y.objective).all(|(p, q)| (p - q).abs() <= 1e-5 * y.objective_squared.sqrt().max(1e-12)),
                    (None, None) => true,
                    _ => false,
                }
        });
    if !same {
        log::info!("Neural eKSVD: the captured evaluation disagrees with the eager one; evaluating eagerly");
        return None;
    }
    Some(graph)
}

/// Reads `gamma` (`[1]`) and the queued passes back in one transfer.
fn read_passes(gamma: &Tensor<1>, passes: &[QueuedPass], eta: f64) -> Result<Vec<Evaluation>> {
    let mut read = Transaction::default().register(gamma.clone());
    for pass in passes {
        if let Some((objective, ce)) = &pass.loss {
            read = read.register(objective.clone()).register(ce.clone());
        }
        for c in &pass.classes {
            read = read.register(c.clone());
        }
    }
    let mut data = read.try_execute().map_err(|e| Error::Execution(format!("{e:?}")))?.into_iter();
    let read_error = |e: burn::tensor::DataError| Error::Execution(format!("{e:?}"));
    let mut next = || data.next().ok_or_else(|| Error::Execution("the read returned fewer tensors than registered".into()));
    let floats = |d: TensorData| -> Result<Vec<f64>> { Ok(d.convert::<f32>().try_to_vec::<f32>().map_err(read_error)?.into_iter().map(f64::from).collect()) };
    let gamma = floats(next()?)?.first().copied().unwrap_or(f64::NAN);
    let mut out = Vec::with_capacity(passes.len());
    for pass in passes {
        let loss = match pass.loss {
            Some(_) => {
                let objective = floats(next()?)?;
                let cross_entropy = floats(next()?)?.first().copied().unwrap_or(f64::NAN) / pass.n as f64;
                let objective_squared = objective.iter().map(|j| j * j).sum::<f64>();
                Some(LossValues { objective_squared, cross_entropy, total: objective_squared + eta * cross_entropy, objective })
            }
            None => None,
        };
        let mut predictions = Vec::with_capacity(if pass.classes.is_empty() { 0 } else { pass.n });
        for _ in &pass.classes {
            let v = next()?.convert::<i64>().try_to_vec::<i64>().map_err(read_error)?;
            predictions.extend(v.into_iter().map(|c| usize::try_from(c).unwrap_or(usize::MAX)));
        }
        out.push(Evaluation { loss, predictions, gamma });
    }
    Ok(out)
}

/// Per-epoch training curve values (Figure 1 of the paper).
#[derive(Debug, Clone, PartialEq)]
pub struct EpochRecord {
    /// Epoch, from 1.
    pub epoch: usize,
    /// `sum_k (J_k / N)^2` on the whole training set at the end of the epoch.
    pub objective_squared: f64,
    /// Mean cross-entropy on the whole training set at the end of the epoch.
    pub cross_entropy: f64,
    /// `gamma` at the end of the epoch.
    pub gamma: f64,
    /// Validation macro-F1 (when a validation set was given).
    pub validation_f1: Option<f64>,
    /// Mean validation cross-entropy (when a validation set was given).
    pub validation_cross_entropy: Option<f64>,
    /// Wall-clock seconds of the epoch's Adam steps.
    pub seconds: f64,
    /// Wall-clock seconds after the steps: keeping the network, weight
    /// averaging, the training loss, the validation scores and the
    /// early-stopping bookkeeping (each evaluation waits for its read).
    pub evaluation_seconds: f64,
}

/// The training curves.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TrainingHistory {
    /// One record per epoch run.
    pub epochs: Vec<EpochRecord>,
    /// Adam steps replayed from a captured one (see
    /// [`NeuralEksvdParams::graph_replay`]); 0 where every step ran eagerly.
    pub replayed_steps: usize,
    /// Per-epoch evaluations (training loss and validation scores) replayed
    /// from a captured one: with replayed steps, every epoch's after the
    /// first; 0 where every evaluation ran eagerly.
    pub replayed_evaluations: usize,
    /// Wall-clock seconds before the first epoch: checks, uploads, the
    /// network's initialisation and the initial loss (which waits for the
    /// device, and so includes its first shader compilations).
    pub setup_seconds: f64,
}

impl TrainingHistory {
    /// Writes `epoch,objective_squared,cross_entropy,gamma,validation_f1,validation_cross_entropy,seconds,evaluation_seconds` as CSV.
    pub fn write_csv(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        writeln!(f, "epoch,objective_squared,cross_entropy,gamma,validation_f1,validation_cross_entropy,seconds,evaluation_seconds")?;
        for e in &self.epochs {
            let f1 = e.validation_f1.map_or(String::new(), |v| v.to_string());
            let ce = e.validation_cross_entropy.map_or(String::new(), |v| v.to_string());
            writeln!(f, "{},{},{},{},{},{},{},{}", e.epoch, e.objective_squared, e.cross_entropy, e.gamma, f1, ce, e.seconds, e.evaluation_seconds)?;
        }
        f.flush()
    }

    /// Mean seconds per epoch, leaving out the first epoch when there are
    /// more (it includes warm-up such as shader compilation).
    pub fn seconds_per_epoch(&self) -> f64 {
        let e = if self.epochs.len() > 1 { &self.epochs[1..] } else { &self.epochs[..] };
        if e.is_empty() { 0.0 } else { e.iter().map(|r| r.seconds).sum::<f64>() / e.len() as f64 }
    }
}

/// A Neural eKSVD model (trained by [`NeuralEksvdParams::fit`] or fresh from
/// [`NeuralEksvdParams::init`]).
#[derive(Debug, Clone)]
pub struct NeuralEksvd {
    net: NeuralEksvdNet,
    device: Device,
    gramian: crate::Device,
    arch: Architecture,
    backend: NeuralBackend,
    history: TrainingHistory,
    best_epoch: usize,
}

impl NeuralEksvd {
    /// The network's shapes.
    pub fn architecture(&self) -> &Architecture {
        &self.arch
    }
    /// The backend it runs on.
    pub fn backend(&self) -> NeuralBackend {
        self.backend
    }
    /// Per-epoch curves of the training run (empty for an untrained model).
    pub fn history(&self) -> &TrainingHistory {
        &self.history
    }
    /// The epoch whose weights were kept (0 when untrained).
    pub fn best_epoch(&self) -> usize {
        self.best_epoch
    }
    /// The burn device (without autodiff) the model lives on.
    pub fn device(&self) -> &Device {
        &self.device
    }
    /// The gramian device the model runs on (its GPU is shared with burn).
    pub fn gramian_device(&self) -> &crate::Device {
        &self.gramian
    }
    /// The burn network.
    pub fn net(&self) -> &NeuralEksvdNet {
        &self.net
    }
    /// `gamma > 0`.
    pub fn gamma(&self) -> f64 {
        tensor_to_vector(self.net.gamma())[0]
    }
    /// All weights in f64.
    pub fn weights(&self) -> NeuralWeights {
        self.net.export()
    }

    fn check_input(&self, q: usize, x: &DMatrix<f64>) -> Result<Vec<f32>> {
        if q >= self.arch.n_sources() {
            return Err(Error::InvalidParameter { name: "source", reason: format!("source {q} of a model with {} sources", self.arch.n_sources()) });
        }
        check_shape(format!("columns of source {q}"), self.arch.input_dims[q], x.ncols())?;
        to_f32_rows(q, x)
    }

    /// Projection scores `E_q = phi_q(X_q) W_q` of new samples of source `q`
    /// (`n x k`).
    pub fn transform(&self, q: usize, x: &DMatrix<f64>) -> Result<DMatrix<f64>> {
        let rows = self.check_input(q, x)?;
        let d = x.ncols();
        let mut out = DMatrix::zeros(x.nrows(), self.arch.components);
        for start in (0..x.nrows()).step_by(EVAL_CHUNK) {
            let len = EVAL_CHUNK.min(x.nrows() - start);
            let t = Tensor::from_data(TensorData::new(rows[start * d..(start + len) * d].to_vec(), [len, d]), &self.device);
            out.rows_mut(start, len).copy_from(&tensor_to_matrix(self.net.scores(q, t)));
        }
        Ok(out)
    }

    /// Scores of all sources side by side, `[E_1 ... E_Q]` (`N x Qk`).
    pub fn transform_all(&self, data: &MultiSource) -> Result<DMatrix<f64>> {
        let resident = self.upload_unlabelled(data)?;
        let (q, k) = (self.arch.n_sources(), self.arch.components);
        let mut out = DMatrix::zeros(resident.n, q * k);
        for start in (0..resident.n).step_by(EVAL_CHUNK) {
            let len = EVAL_CHUNK.min(resident.n - start);
            let scores = tensor_to_f32(self.net.stacked_scores(resident.rows(start, len).0, 0.0));
            for s in 0..q {
                for i in 0..len {
                    for c in 0..k {
                        out[(start + i, s * k + c)] = f64::from(scores[(s * len + i) * k + c]);
                    }
                }
            }
        }
        Ok(out)
    }

    fn check_paired(&self, data: &MultiSource) -> Result<()> {
        if !data.is_paired() {
            return Err(Error::Labels("prediction needs paired sources".into()));
        }
        check_shape("number of sources", self.arch.n_sources(), data.n_sources())?;
        for q in 0..data.n_sources() {
            check_shape(format!("columns of source {q}"), self.arch.input_dims[q], data.source(q).ncols())?;
        }
        Ok(())
    }

    /// Paired samples, checked, stacked and uploaded to the model's device.
    fn upload_unlabelled(&self, data: &MultiSource) -> Result<ResidentData> {
        self.check_paired(data)?;
        Ok(HostData::new(data, None, self.arch.n_classes)?.upload(&self.device))
    }

    /// Class logits of paired samples (`N x C`).
    pub fn logits(&self, data: &MultiSource) -> Result<DMatrix<f64>> {
        let resident = self.upload_unlabelled(data)?;
        let mut out = DMatrix::zeros(resident.n, self.arch.n_classes);
        for start in (0..resident.n).step_by(EVAL_CHUNK) {
            let len = EVAL_CHUNK.min(resident.n - start);
            out.rows_mut(start, len).copy_from(&tensor_to_matrix(self.net.logits(self.net.stacked_scores(resident.rows(start, len).0, 0.0))));
        }
        Ok(out)
    }

    /// Predicted classes of paired samples (all sources of each sample):
    /// the arg max of the logits, computed on the device.
    pub fn predict(&self, data: &MultiSource) -> Result<Vec<usize>> {
        let resident = self.upload_unlabelled(data)?;
        Ok(self.evaluate(&resident, 0.0, true)?.predictions)
    }

    /// `J_k / N` (Eq. 3 on all `N` samples given, per sample),
    /// `sum_k (J_k / N)^2`, the mean cross-entropy and
    /// `sum_k (J_k / N)^2 + eta L_CE` on paired samples with labels.
    pub fn loss(&self, data: &MultiSource, labels: &[usize], eta: f64) -> Result<LossValues> {
        check_labels(data, labels)?;
        if labels.iter().any(|&l| l >= self.arch.n_classes) {
            return Err(Error::Labels(format!("label beyond the model's {} classes", self.arch.n_classes)));
        }
        self.check_paired(data)?;
        let host = HostData::new(data, Some(labels), self.arch.n_classes)?;
        Ok(self.evaluate(&host.upload(&self.device), eta, false)?.loss.expect("labelled"))
    }

    /// The loss (labelled data), the predicted classes (`predictions`) and
    /// `gamma` on resident data ([`queue_pass`], one read).
    fn evaluate(&self, data: &ResidentData, eta: f64, predictions: bool) -> Result<Evaluation> {
        let mut read = read_passes(&self.net.gamma(), &[queue_pass(&self.net, data, predictions)], eta)?;
        read.pop().ok_or_else(|| Error::Execution("no pass read".into()))
    }

    /// Saves the weights (burnpack `model.bpk`) and the architecture
    /// (`architecture.txt`) into directory `dir` (created if missing).
    pub fn save(&self, dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        let io = |e: std::io::Error| Error::Record(format!("{}: {e}", dir.display()));
        std::fs::create_dir_all(dir).map_err(io)?;
        let a = &self.arch;
        let list = |v: &[usize]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(" ");
        let text = format!(
            "input_dims={}\nhidden={}\nd_phi={}\ncomponents={}\nn_classes={}\nactivation={}\n",
            list(&a.input_dims),
            list(&a.hidden),
            a.d_phi,
            a.components,
            a.n_classes,
            a.activation.name()
        );
        std::fs::write(dir.join("architecture.txt"), text).map_err(io)?;
        self.net.clone().save_file(dir.join("model.bpk")).map_err(|e| Error::Record(e.to_string()))
    }

    /// Loads a model written by [`NeuralEksvd::save`] onto `backend`.
    pub fn load(dir: impl AsRef<Path>, backend: NeuralBackend) -> Result<Self> {
        Self::load_on(dir, &Placement::for_backend(backend)?)
    }

    /// Loads a model written by [`NeuralEksvd::save`] onto a gramian device
    /// (burn's Wgpu backend on its GPU, or Flex for the CPU path).
    pub fn load_on(dir: impl AsRef<Path>, gramian: &crate::Device) -> Result<Self> {
        let dir = dir.as_ref();
        let backend = Placement::backend_of(gramian);
        let text = std::fs::read_to_string(dir.join("architecture.txt")).map_err(|e| Error::Record(format!("{}: {e}", dir.display())))?;
        let arch = parse_architecture(&text)?;
        let device = burn_device(gramian)?;
        let net = NeuralEksvdNet::init(&arch, 1.0, 0, &device)?
            .try_load_file(dir.join("model.bpk"))
            .map_err(|e| Error::Record(e.to_string()))?;
        Ok(NeuralEksvd { net, device, gramian: gramian.clone(), arch, backend, history: TrainingHistory::default(), best_epoch: 0 })
    }
}

fn parse_architecture(text: &str) -> Result<Architecture> {
    let bad = |what: &str| Error::Record(format!("architecture.txt: bad or missing {what}"));
    let get = |key: &str| text.lines().find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('='))).ok_or_else(|| bad(key));
    let list = |key: &str| -> Result<Vec<usize>> { get(key)?.split_whitespace().map(|s| s.parse().map_err(|_| bad(key))).collect() };
    let one = |key: &str| -> Result<usize> { get(key)?.trim().parse().map_err(|_| bad(key)) };
    let arch = Architecture {
        input_dims: list("input_dims")?,
        hidden: list("hidden")?,
        d_phi: one("d_phi")?,
        components: one("components")?,
        n_classes: one("n_classes")?,
        activation: Activation::parse(get("activation")?.trim()).ok_or_else(|| bad("activation"))?,
    };
    arch.validate()?;
    Ok(arch)
}
