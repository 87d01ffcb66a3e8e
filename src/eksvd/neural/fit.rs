//! The training of Neural eKSVD: [`Fit<Labelled>`](crate::estimator::Fit)
//! for [`NeuralEksvdParams`] and [`NeuralEksvdParams::fit_with_validation`].
//! Adam on minibatches of `sum_k (J_k / N)^2 + eta L_CE` (optionally with
//! dropout in the feature maps and noise on the inputs) under a
//! learning-rate schedule, with the training set resident on the device and
//! each minibatch gathered there; per-epoch training loss and validation
//! scores read back in one transfer; early stopping on validation macro-F1
//! or validation cross-entropy keeping the best epoch's network; optional
//! weight averaging; on a GPU, steps and evaluations replayed from captured
//! graphs (see `replay`); on the CPU, the first layers from the
//! minibatches' non-zeros, updated on the host (see `sparse_first`).

use std::cell::RefCell;
use std::time::Instant;

use burn::module::Module;
use burn::tensor::{Device, Distribution, Int, Tensor};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use super::fitted::NeuralEksvd;
use super::history::{EpochRecord, TrainingHistory};
use super::model::{NeuralEksvdNet, NeuralWeights};
use super::optimizer::{HostAdamW, InPlaceAdamW};
use super::params::{EarlyStopping, LearningRateSchedule, NeuralEksvdParams};
use super::replay::{capture_step, check_replay, deep_copy, kernel_profiling_on, DeviceCursor, StepSettings, StepState, CAPTURE_STEPS};
use super::sparse_first::SparseFirstLayers;
use super::resident::{queue_evaluation, read_passes, Evaluation, EvaluationOutputs, HostData, ResidentData};
use super::Result;
use crate::data::{check_shape, macro_f1, Labelled, MultiSource};
use crate::error::Error;
use crate::estimator::Fit;

impl Fit<Labelled> for NeuralEksvdParams {
    type Fitted = NeuralEksvd;

    /// Trains on `data` on `device` (the CPU path on burn's Flex backend, a
    /// GPU on burn's Wgpu backend on that GPU's wgpu device and queue) for
    /// [`NeuralEksvdParams::max_epochs`] epochs, keeping the last epoch's
    /// network (or the weight average, see
    /// [`NeuralEksvdParams::weight_averaging`]).
    ///
    /// Errors: those of [`NeuralEksvdParams::validate`], values that
    /// overflow f32 ([`Error::SourceNotRepresentable`]),
    /// [`Error::Diverged`], [`Error::BackendUnavailable`].
    fn fit(&self, device: &crate::Device, data: &Labelled) -> Result<NeuralEksvd> {
        train(self, device, data, None)
    }
}

impl NeuralEksvdParams {
    /// Trains on `train` on `device` as [`Fit::fit`] does, with early
    /// stopping on `validation`: after each epoch the validation set is
    /// scored, the epoch with the best score (by
    /// [`NeuralEksvdParams::early_stopping`]) is kept, and training stops
    /// [`NeuralEksvdParams::patience`] epochs after it. The model has
    /// `max(C_train, C_validation)` classes.
    ///
    /// Errors: those of [`Fit::fit`], and sources of `validation` that do
    /// not match `train`'s ([`Error::ShapeMismatch`]).
    pub fn fit_with_validation(&self, device: &crate::Device, train: &Labelled, validation: &Labelled) -> Result<NeuralEksvd> {
        self::train(self, device, train, Some(validation))
    }
}

/// The error of a labelled pass that read back no loss.
fn no_loss() -> Error {
    Error::Execution("no loss read for labelled data".into())
}

/// The training loop of [`Fit::fit`] and
/// [`NeuralEksvdParams::fit_with_validation`].
fn train(params: &NeuralEksvdParams, gramian_device: &crate::Device, train: &Labelled, validation: Option<&Labelled>) -> Result<NeuralEksvd> {
    let setup = Instant::now();
params.validate()?;
    let n_classes = train.n_classes().max(validation.map_or(0, Labelled::n_classes));
    if let Some(v) = validation {
        check_same_dims(train.sources(), v.sources())?;
    }
    let host = HostData::new(train.sources(), Some(train.labels()), n_classes)?;
    let validation_host = validation.map(|v| HostData::new(v.sources(), Some(v.labels()), n_classes)).transpose()?;
    let mut model = params.init(gramian_device, (0..train.sources().n_sources()).map(|q| train.sources().input(q).shape().1).collect(), n_classes)?;
    let device = model.burn_device().clone();
    let ad_device = device.clone().autodiff();
    let n = host.n;
    // The training set is uploaded once (one `[N, d_q]` tensor per
    // source, each at its own width), to the
    // training device (for the steps) and the plain one (for the
    // per-epoch loss); each epoch uploads its permutation (n integers)
    // and every minibatch is gathered on the device. Per epoch, the
    // loss and the validation scores come back in one read each.
    // On the CPU without input noise, the first layers are computed from
    // the minibatches' non-zeros and updated on the host
    // (`sparse_first`); the steps then read the training set there, and
    // it is not uploaded for them.
    let sparse = params.sparse_first_layer && !gramian_device.is_gpu() && params.input_noise == 0.0;
    let resident = (!sparse).then(|| host.upload(&ad_device));
    let resident_eval = host.upload(&device);
    let resident_validation = validation_host.as_ref().map(|h| h.upload(&device));
    if params.dropout > 0.0 || params.input_noise > 0.0 {
        // The dropout masks and the input noise come from the device's
        // random state.
        ad_device.seed(params.seed);
    }
    // Replayed steps (see `replay`): on a GPU, at a constant rate,
    // without random masks or noise (a replay would repeat the captured
    // ones), with a full step left for the check after the capture's,
    // and not while CubeCL profiles each kernel.
    let mut replayable = params.graph_replay
        && gramian_device.is_gpu()
        && params.schedule == LearningRateSchedule::Constant
        && params.dropout == 0.0
        && params.input_noise == 0.0
        && n / params.batch_size > CAPTURE_STEPS;
    if replayable && kernel_profiling_on() {
        log::info!("Neural eKSVD: CubeCL's profiling logger is on, which graph capture cannot record; training with eager steps");
        replayable = false;
    }
    // With the sparse first layer, the other parameters are stepped on the
    // host too (`HostAdamW`, burn's AdamW exactly).
    let mut sparse_first = sparse.then(|| (SparseFirstLayers::new(&host, &model.net, params.weight_decay), HostAdamW::new(params.weight_decay)));
    let net = model.net.clone().fork(&ad_device).train();
    let state = RefCell::new(StepState { net: Some(net), optim: InPlaceAdamW::new(params.weight_decay, &device, replayable) });
    let cursor = RefCell::new(DeviceCursor::new(n, params.batch_size, &ad_device, replayable));
    let mut rng = StdRng::seed_from_u64(params.seed ^ 0x9e37_79b9_7f4a_7c15);
    let mut order: Vec<usize> = (0..n).collect();
    let steps_per_epoch = n.div_ceil(params.batch_size);
    let graph_steps = cursor.borrow().graph_steps();
    let total_steps = params.max_epochs.saturating_mul(steps_per_epoch);
    let mut step = 0usize;
    let mut averaged: Option<NeuralWeights> = None;
    let settings = StepSettings { n_samples: n, eta: params.eta, learning_rate: params.learning_rate, dropout: params.dropout };
    let mut graph = None;
    let gather = |idx: Tensor<1, Int>| {
        let (x, one_hot) = resident.as_ref().expect("the training set on the device").gather(idx);
        (x, one_hot.expect("labelled"))
    };

    let initial = model.evaluate(&resident_eval, params.eta, false)?.loss.ok_or_else(no_loss)?;
    if !initial.total.is_finite() {
        return Err(Error::Diverged { epoch: 0, loss: initial.total, initial: initial.total });
    }
    let bar = params.progress.then(|| {
        let bar = indicatif::ProgressBar::new(params.max_epochs as u64);
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
    for epoch in 1..=params.max_epochs {
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
        for start in (done * params.batch_size..n).step_by(params.batch_size) {
            let len = params.batch_size.min(n - start);
            if let Some((first, optim)) = sparse_first.as_mut() {
                let rows = &order[start..start + len];
                let one_hot = host.one_hot_rows(rows, &ad_device).expect("labelled");
                let rate = params.schedule.rate(params.learning_rate, step, total_steps);
                let grads = state.borrow_mut().step_after_first(first.forward(rows, &ad_device), one_hot, StepSettings { learning_rate: rate, ..settings }, optim);
                first.step(rows, &grads, rate);
                step += 1;
                continue;
            }
            let (mut x, one_hot) = gather(cursor.borrow().slice(start, len));
            if params.input_noise > 0.0 {
                x = x.into_iter().map(|x| x.clone() + x.random_like(Distribution::Normal(0.0, params.input_noise))).collect();
            }
            let rate = params.schedule.rate(params.learning_rate, step, total_steps);
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
        if let Some((first, _)) = &sparse_first {
            first.write_into(state.borrow_mut().net.as_mut().expect("a network between steps"));
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
        if params.weight_averaging > 0.0 {
            // The average lives on the host in f64 (a few hundred
            // thousand weights: one download per epoch).
            let current = evaluated.export();
            let avg = match averaged.take() {
                None => current,
                Some(mut avg) => {
                    avg.blend(&current, params.weight_averaging);
                    avg
                }
            };
            evaluated = NeuralEksvdNet::from_weights(&avg, &device)?;
            averaged = Some(avg);
        }
        let shares_buffers = replayable && params.weight_averaging == 0.0;
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
                read_passes(&out.0, &out.1, params.eta)?
            }
            None => {
                let out = queue_evaluation(&evaluated, &targets);
                let passes = read_passes(&out.0, &out.1, params.eta)?;
                if shares_buffers && !evaluation_capture_tried {
                    evaluation_capture_tried = true;
                    evaluation_graph = capture_evaluation(&device, &state, targets.clone(), &passes, params.eta);
                }
                passes
            }
        };
        let mut passes = passes.into_iter();
        let training = passes.next().ok_or_else(|| Error::Execution("no training pass read".into()))?;
        let values = training.loss.ok_or_else(no_loss)?;
        if !values.total.is_finite() || values.total > params.divergence_factor * initial.total {
            if let Some(bar) = &bar {
                bar.abandon_with_message("diverged");
            }
            return Err(Error::Diverged { epoch, loss: values.total, initial: initial.total });
        }
        let score = match (validation, passes.next()) {
            (Some(v), Some(on_validation)) => Some(ValidationScore {
                macro_f1: macro_f1(v.labels(), &on_validation.predictions)?,
                cross_entropy: on_validation.loss.ok_or_else(no_loss)?.cross_entropy,
            }),
            _ => None,
        };
        let validation_f1 = score.map(|s| s.macro_f1);
        let mut stop = false;
        if let Some(score) = score {
            if best.as_ref().is_none_or(|(b, _, _)| score.better_than(b, params.early_stopping)) {
                best = Some((score, epoch, if shares_buffers { deep_copy(evaluated) } else { evaluated }));
            } else {
                stop = epoch - best.as_ref().map_or(0, |b| b.1) >= params.patience;
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

fn check_same_dims(a: &MultiSource, b: &MultiSource) -> Result<()> {
    check_shape("number of sources", a.n_sources(), b.n_sources())?;
    for q in 0..a.n_sources() {
        check_shape(format!("columns of source {q}"), a.input(q).shape().1, b.input(q).shape().1)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::data::macro_f1;

    /// Macro-F1 against the per-class counts by hand; perfect predictions
    /// give 1, no samples 0, and lengths must match.
    #[test]
    fn macro_f1_by_hand() {
        let truth = [0, 0, 1, 1, 2];
        let predicted = [0, 0, 1, 0, 2];
        // class 0: tp 2, fp 1, fn 0 -> 4/5; class 1: tp 1, fp 0, fn 1 -> 2/3; class 2: tp 1 -> 1.
        let want = (0.8 + 2.0 / 3.0 + 1.0) / 3.0;
        assert!((macro_f1(&truth, &predicted).unwrap() - want).abs() < 1e-15);
        assert_eq!(macro_f1(&truth, &truth).unwrap(), 1.0);
        assert_eq!(macro_f1(&[], &[]).unwrap(), 0.0);
        assert!(macro_f1(&truth, &predicted[..4]).is_err());
    }
}
