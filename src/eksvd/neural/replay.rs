//! Training steps replayed from a captured graph (GPU backends).
//!
//! A training step of the benchmark's size is bound by the host's work per
//! kernel (burn's op recording, autodiff, fusion, pipeline and bind-group
//! lookups), not by the GPU's arithmetic. burn's [`capture`] records one step
//! (after three warm-up steps that allocate every buffer it uses) and
//! [`Graph::replay`] re-encodes the recorded kernels with all of that done
//! once. A replay reads and writes the buffers the recorded step used, so the
//! step takes its minibatch from device state and writes every update over
//! the tensor it replaces:
//!
//! * the epoch's permutation `perm` (`[N]`, rewritten in place each epoch)
//!   and a cursor (`[1]`, advanced by the batch size in place each step):
//!   the step gathers rows `perm[cursor .. cursor + B]`;
//! * the parameters, both Adam moments and the step count
//!   ([`InPlaceAdamW`]).
//!
//! Where `B` does not divide `N`, the step is taken at full width with the
//! rows past `N` as padding ([`PaddedRows`]: their scores and labels are
//! zeroed, and the means are over the `N mod B` rows that count), so the same
//! graph replays the last, shorter minibatch of each epoch too, as long as
//! the padding adds at most an eighth to an epoch's arithmetic
//! ([`pads_last_batch`]; otherwise that minibatch runs eagerly). The eager
//! steps of a fit that does not replay keep the short minibatch as it is.
//!
//! Whether every update really wrote over its old buffer is checked once,
//! after the capture: the second replay must give the parameters that the
//! same step gives when run eagerly on a copy of the state. Otherwise (and
//! whenever an eager step of the fit did not stay in place) the fit goes on
//! with eager steps from correct state.

use std::cell::RefCell;

use burn::module::{Module, ModuleMapper, Param};
use burn::optim::GradientsParams;
use burn::tensor::{capture, Device, Graph, Int, Tensor, TensorData};

use super::loss::{cross_entropy, objective_per_component, padded_cross_entropy, padded_objective_per_component, LossTensors, PaddedRows};
use super::model::{tensor_to_f32, NeuralEksvdNet};
use super::optimizer::{own_copy, update, HostAdamW, InPlaceAdamW};

/// The network and optimizer a fit trains, behind the [`RefCell`] that the
/// captured step and the eager steps share.
pub(crate) struct StepState {
    /// `None` only while a step runs.
    pub(crate) net: Option<NeuralEksvdNet>,
    pub(crate) optim: InPlaceAdamW,
}

/// Settings of one Adam step on `sum_k (J_k / N)^2 + eta L_CE`.
#[derive(Clone, Copy)]
pub(crate) struct StepSettings {
    pub(crate) n_samples: usize,
    pub(crate) eta: f64,
    pub(crate) learning_rate: f64,
    pub(crate) dropout: f64,
}

impl StepState {
    /// One Adam step on the minibatch `x` (one `[B, d_q]` tensor per
    /// source) with labels
    /// `one_hot` (`[B, C]`), every row counting unless `padding` says which
    /// do.
    pub(crate) fn step(&mut self, x: Vec<Tensor<2>>, one_hot: Tensor<2>, padding: Option<PaddedRows>, s: StepSettings) {
        let net = self.net.take().expect("a step runs on a network");
        let scores = net.stacked_scores(x, s.dropout);
        let (objective, cross_entropy) = match padding {
            None => (objective_per_component(net.projections(), scores.clone(), net.gamma(), s.n_samples), cross_entropy(net.logits(scores), one_hot)),
            Some(rows) => (
                padded_objective_per_component(net.projections(), scores.clone(), net.gamma(), s.n_samples, &rows),
                padded_cross_entropy(net.logits(scores), one_hot, &rows),
            ),
        };
        let loss = LossTensors::new(objective, cross_entropy, s.eta);
        let mut grads = GradientsParams::from_grads(loss.total.backward(), &net);
        self.net = Some(self.optim.step(s.learning_rate, net, &mut grads));
    }
}

impl StepState {
    /// One Adam step as [`StepState::step`] from the first layer's outputs
    /// before their activation (`pre`, `[Q, B, h_1]` stacked over the
    /// sources and tracked, computed outside the network: `sparse_first`),
    /// every row counting, with the network's other parameters stepped by
    /// `optim` on the host; the network's first layers are left as they
    /// are. Returns `dL/dZ` (`[Q, B, h_1]`, row-major).
    pub(crate) fn step_after_first(&mut self, pre: Tensor<3>, one_hot: Tensor<2>, s: StepSettings, optim: &mut HostAdamW) -> Vec<f32> {
        let net = self.net.take().expect("a step runs on a network");
        let scores = net.scores_after_first(pre.clone(), s.dropout);
        let objective = objective_per_component(net.projections(), scores.clone(), net.gamma(), s.n_samples);
        let loss = LossTensors::new(objective, cross_entropy(net.logits(scores), one_hot), s.eta);
        let grads = loss.total.backward();
        let first = tensor_to_f32(pre.grad(&grads).expect("the first layer's outputs are tracked"));
        let mut grads = GradientsParams::from_grads(grads, &net);
        self.net = Some(optim.step(s.learning_rate, net, &mut grads));
        first
    }
}

/// A copy of every parameter of `module` in buffers of its own (a replay
/// writes over the training network's buffers, so a network kept across
/// replays must not share them).
pub(crate) fn deep_copy<M: Module>(module: M) -> M {
    struct Copier;
    impl ModuleMapper for Copier {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            let (id, tensor, mapper) = param.consume();
            Param::from_mapped_value(id, own_copy(&tensor), mapper)
        }
    }
    module.map(&mut Copier)
}

/// The minibatch position on the device: the epoch's permutation and the
/// cursor into it.
pub(crate) struct DeviceCursor {
    perm: Tensor<1, Int>,
    cursor: Tensor<1, Int>,
    offsets: Tensor<1, Int>,
    batch: usize,
    pad_short: bool,
    stable_buffers: bool,
    in_place: bool,
}

impl DeviceCursor {
    /// A cursor over `n` samples in minibatches of `batch` on `device`;
    /// with `stable_buffers` the permutation and the cursor are written
    /// over their buffers (for replayed steps).
    pub(crate) fn new(n: usize, batch: usize, device: &Device, stable_buffers: bool) -> Self {
        DeviceCursor {
            perm: Tensor::zeros([n], device),
            cursor: Tensor::zeros([1], device),
            offsets: Tensor::arange(0..batch as i64, device),
            batch,
            pad_short: pads_last_batch(n, batch),
            stable_buffers,
            in_place: true,
        }
    }

    /// Starts an epoch: `order` written over the permutation, the cursor
    /// back to 0.
    pub(crate) fn start_epoch(&mut self, order: &[usize]) {
        let v: Vec<i64> = order.iter().map(|&i| i as i64).collect();
        let fresh = Tensor::<1, Int>::from_data(TensorData::new(v, [order.len()]), &self.perm.device());
        self.in_place &= self.perm.can_mut() && self.cursor.can_mut();
        let keep = self.stable_buffers;
        self.perm.inplace(|p| update(p, fresh, keep));
        self.cursor.inplace(|c| {
            let zero = c.zeros_like();
            update(c, zero, keep)
        });
    }

    /// The sample indices of the minibatch at the cursor, advancing it; where
    /// the batch size does not divide `N`, which of them are padding (rows
    /// past `N`, which repeat the epoch's last sample).
    fn next_batch(&mut self) -> (Tensor<1, Int>, Option<PaddedRows>) {
        let positions = self.offsets.clone().add(self.cursor.clone().expand([self.batch]));
        let n = self.perm.dims()[0];
        let padding = (self.pad_short && !n.is_multiple_of(self.batch)).then(|| PaddedRows {
            weights: positions.clone().lower_elem(n as i64).float().reshape([self.batch, 1]),
            full: self.cursor.clone().lower_equal_elem((n - self.batch) as i64),
            short_rows: n % self.batch,
        });
        let positions = if padding.is_some() { positions.clamp_max(n as i64 - 1) } else { positions };
        let idx = self.perm.clone().select(0, positions);
        self.in_place &= self.cursor.can_mut();
        let keep = self.stable_buffers;
        self.cursor.inplace(|c| {
            let next = c.clone().add_scalar(self.batch as i64);
            update(c, next, keep)
        });
        (idx, padding)
    }

    /// The minibatches of an epoch that a captured step takes: all of them
    /// where the last is padded ([`pads_last_batch`]), else the full ones.
    pub(crate) fn graph_steps(&self) -> usize {
        let n = self.perm.dims()[0];
        if self.pad_short {
            n.div_ceil(self.batch)
        } else {
            n / self.batch
        }
    }

    /// Samples `start .. start + len` of the epoch's permutation (host
    /// positions, for the eager steps).
    pub(crate) fn slice(&self, start: usize, len: usize) -> Tensor<1, Int> {
        self.perm.clone().narrow(0, start, len)
    }

    /// Whether every write so far went over the old buffers.
    pub(crate) fn in_place(&self) -> bool {
        self.in_place
    }
}

/// Whether the replayed step also takes the last, shorter minibatch of an
/// epoch, padded to full width: where `batch` divides `n` (nothing to pad),
/// or where the padding adds at most an eighth to an epoch's arithmetic
/// (`8 (batch - n mod batch) <= n`). Beyond that (few minibatches and a
/// small remainder) the short minibatch runs eagerly: a device bound by its
/// arithmetic would lose more to the padding than the replay saves.
pub(crate) fn pads_last_batch(n: usize, batch: usize) -> bool {
    let short = n % batch;
    short == 0 || (n > batch && (batch - short).saturating_mul(8) <= n)
}

/// Whether CubeCL's profiling logger is on (a `cubecl.toml` or
/// `CUBECL_DEBUG_LOG` / `CUBECL_DEBUG_OPTION`): it times each kernel, which a
/// capture cannot record (burn's capture then fails inside the device's
/// worker and the next read panics), so a fit with it on trains eagerly.
pub(crate) fn kernel_profiling_on() -> bool {
    use burn::cubecl::config::profiling::ProfilingLogLevel;
    use burn::cubecl::config::{CubeClRuntimeConfig, RuntimeConfig};
    !matches!(CubeClRuntimeConfig::get().profiling.logger.level, ProfilingLogLevel::Disabled)
}

/// The steps [`capture`] runs before it records one: warm-ups that allocate
/// every buffer the recorded step uses (steps of the fit, taking the next
/// minibatches). The recorded step is queued into the graph, not run.
pub(crate) const WARMUP_STEPS: usize = 3;

/// The steps of the fit [`capture_step`] runs: the warm-ups and the
/// recorded step (replayed once, or run by the closure where the backend has
/// no graphs).
pub(crate) const CAPTURE_STEPS: usize = WARMUP_STEPS + 1;

/// Captures the step at the cursor (at full width, with padding where the
/// batch size does not divide `N`) and runs [`CAPTURE_STEPS`]
/// steps of the fit. Returns the graph, or `None` when the backend has no
/// graph support or the recorded step did not write over the buffers it
/// read (then a second replay would read them as they were: the first one
/// is right either way, as it reads exactly what the warm-ups left).
pub(crate) fn capture_step<'a>(
    device: &Device,
    state: &'a RefCell<StepState>,
    cursor: &'a RefCell<DeviceCursor>,
    gather: impl Fn(Tensor<1, Int>) -> (Vec<Tensor<2>>, Tensor<2>) + 'a,
    settings: StepSettings,
) -> Option<Graph<(), impl FnMut() + 'a>> {
    let step = move || {
        let (idx, padding) = cursor.borrow_mut().next_batch();
        let (x, one_hot) = gather(idx);
        state.borrow_mut().step(x, one_hot, padding, settings);
    };
    let mut graph = capture(device, step);
    if !graph.is_hardware() {
        return None;
    }
    // Safety: as for the fit's replays (`fit::train`).
    unsafe { graph.replay() };
    let in_place = state.borrow().optim.all_in_place() && cursor.borrow().in_place();
    in_place.then_some(graph)
}

/// Checks the captured step once, after its first replay: a replay from the
/// current state must give the parameters that the same step gives when run
/// eagerly on a copy of that state (step `step_in_epoch` of the epoch, counted from 0). If a
/// recorded update did not write over the buffer it replaces, this second
/// replay reads parameters, moments or the cursor as the warm-ups left them,
/// and the two differ by about one step's change. On disagreement
/// the eager copy (correct state) replaces the fit's state.
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_replay<F: FnMut()>(
    graph: &mut Graph<(), F>,
    state: &RefCell<StepState>,
    cursor: &RefCell<DeviceCursor>,
    gather: impl Fn(Tensor<1, Int>) -> (Vec<Tensor<2>>, Tensor<2>),
    settings: StepSettings,
    step_in_epoch: usize,
    ad_device: &Device,
) -> Result<(), String> {
    let (before, mut copy) = {
        let s = state.borrow();
        let net = s.net.as_ref().expect("a network between steps");
        (net.valid().export().values(), StepState { net: Some(deep_copy(net.valid()).fork(ad_device).train()), optim: s.optim.deep_copy() })
    };
    let batch = cursor.borrow().batch;
    let (x, one_hot) = gather(cursor.borrow().slice(step_in_epoch * batch, batch));
    // Safety: as for the fit's replays; the copy shares no buffer with the
    // state.
    unsafe { graph.replay() };
    copy.step(x, one_hot, None, settings);
    let replayed = state.borrow().net.as_ref().expect("a network between steps").valid().export().values();
    let eager = copy.net.as_ref().expect("a network after a step").valid().export().values();
    let change = eager.iter().zip(&before).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    let gap = eager.iter().zip(&replayed).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    // The same kernels on the same inputs: equal up to rounding, far below
    // one step's change.
    if gap.is_finite() && gap <= 1e-3 * change {
        Ok(())
    } else {
        *state.borrow_mut() = copy;
        Err(format!("largest difference {gap:.3e} against a step's change of {change:.3e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::pads_last_batch;

    /// The padded last minibatch is replayed where the padding adds at most
    /// an eighth to an epoch's rows, and wherever the batch divides `N`.
    #[test]
    fn the_last_batch_is_padded_where_the_padding_is_cheap() {
        // The benchmark (304 rows left, 720 padded), its batches of 4096
        // (2768 padded), the UCI fit (16 padded), the replay test (24 of 200).
        for (n, batch) in [(30_000, 1024), (30_000, 4096), (1200, 64), (200, 32), (1280, 256)] {
            assert!(pads_last_batch(n, batch), "{n} / {batch}");
        }
        // 236 padded rows for 1300 (more than 162), 28 for 200.
        for (n, batch) in [(1300, 256), (200, 38), (5 * 256 + 1, 256), (10, 64)] {
            assert!(!pads_last_batch(n, batch), "{n} / {batch}");
        }
    }
}
