//! AdamW (Loshchilov and Hutter, decoupled weight decay) with every update
//! written over the tensors it replaces, and the step count kept on the
//! device, so that a training step can be captured once and replayed
//! ([`super::replay`]).
//!
//! For a parameter `p` with gradient `g`, at step `t = 1, 2, ...`:
//!
//! `m <- b1 m + (1 - b1) g`, `v <- b2 v + (1 - b2) g^2`,
//! `p <- p (1 - lr wd) - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)`,
//!
//! the update of burn's `AdamW`, the same operations in the same order on the
//! same f32 values. burn divides by the host scalars `1 - b^t`, which a
//! replayed graph would keep at their captured values; here they are read
//! from a table of burn's own f32 values `1 - b^t` (computed once on the
//! host, [`CORRECTION_STEPS`] rows) at a step counter kept on the device.
//! `m`, `v` start at zero, which gives burn's first step exactly. The new
//! `p`, `m`, `v` are written into the buffers of the old ones
//! ([`write_over`]) when nothing else holds those
//! ([`burn::tensor::Tensor::can_mut`]); [`InPlaceAdamW::all_in_place`] says
//! whether that held for every tensor of the last step.
//!
//! [`adamw_on_host`] is the same update on host slices, in one pass over
//! each parameter (the first layer of a CPU fit, see `sparse_first`): the
//! same f32 operations in the same order with the same scalars and table
//! values, so that it gives burn's values exactly. [`HostAdamW`] steps a
//! module's other parameters with it on the CPU backend: one read of each
//! gradient and one write of each parameter per step instead of burn's
//! dozen operations per parameter.

use std::any::Any;
use std::collections::HashMap;

use burn::module::{Module, ModuleMapper, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Int, Tensor, TensorData};

use super::model::tensor_to_f32;

/// burn's `AdamWConfig` defaults, which the eager training used.
const BETA_1: f32 = 0.9;
const BETA_2: f32 = 0.999;
const EPSILON: f32 = 1e-5;

/// Rows of the bias-correction table: from step 20,000 on, `b^t < 3e-9` for
/// both betas and `1 - b^t` is 1 in f32, the last row's value.
pub(crate) const CORRECTION_STEPS: usize = 20_000;

/// burn's bias corrections `1 - b^t` (f32, `t = 1 ..= CORRECTION_STEPS`) for
/// `b = beta`.
fn correction_table(beta: f32, device: &Device) -> Tensor<1> {
    let values: Vec<f32> = (1..=CORRECTION_STEPS as i32).map(|t| 1f32 - beta.powi(t)).collect();
    Tensor::from_data(burn::tensor::TensorData::new(values, [CORRECTION_STEPS]), device)
}

/// The bias corrections `(1 - b1^t, 1 - b2^t)` of step `t >= 1` as the
/// tables hold them (step `CORRECTION_STEPS` from there on).
fn corrections_at(t: usize) -> (f32, f32) {
    let t = t.clamp(1, CORRECTION_STEPS) as i32;
    (1f32 - BETA_1.powi(t), 1f32 - BETA_2.powi(t))
}

/// The f32 scalars of one host AdamW step: the decay factor `1 - lr wd`,
/// `lr`, and the bias corrections `1 - b1^t`, `1 - b2^t`.
#[derive(Clone, Copy)]
struct HostStep {
    keep: f32,
    lr: f32,
    c1: f32,
    c2: f32,
}

impl HostStep {
    /// The scalars of step `t >= 1` at learning rate `lr` with decoupled
    /// weight decay `weight_decay`: burn's scalar operations take their f64
    /// scalars as f32; without weight decay burn skips the product by
    /// `1 - lr wd`, which is then 1 and leaves every value as it is.
    fn new(t: usize, lr: f64, weight_decay: f64) -> Self {
        let (c1, c2) = corrections_at(t);
        HostStep { keep: (1.0 - lr * weight_decay) as f32, lr: lr as f32, c1, c2 }
    }
}

/// One AdamW step (the module header's update) of the parameters `p` with
/// gradients `g` and moments `m`, `v` (all of one length) at step `t >= 1`
/// with learning rate `lr` and decoupled weight decay `weight_decay`, on
/// the host (each entry alone: callers may split the slices). `g` is
/// zeroed as it is read, ready for the next step's sums.
///
/// Where the CPU has AVX (checked at run time), eight entries at a time in
/// 256-bit registers: the same IEEE operations (products, sums, quotients
/// and square roots, each correctly rounded, none fused) in the same
/// order, so the same values as one entry at a time; a quotient by a bias
/// correction that is exactly 1 in f32 (`1 - b1^t` from step 165 on) is
/// left out, as `x / 1 = x` exactly.
pub(crate) fn adamw_on_host(p: &mut [f32], m: &mut [f32], v: &mut [f32], g: &mut [f32], t: usize, lr: f64, weight_decay: f64) {
    assert!(m.len() == p.len() && v.len() == p.len() && g.len() == p.len(), "one moment and gradient per parameter");
    let s = HostStep::new(t, lr, weight_decay);
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        // Safety: the CPU has AVX (checked above).
        done = unsafe {
            match (s.c1 == 1.0, s.c2 == 1.0) {
                (false, false) => adamw_on_host_avx::<false, false>(p, m, v, g, s),
                (true, false) => adamw_on_host_avx::<true, false>(p, m, v, g, s),
                (false, true) => adamw_on_host_avx::<false, true>(p, m, v, g, s),
                (true, true) => adamw_on_host_avx::<true, true>(p, m, v, g, s),
            }
        };
    }
    adamw_on_host_scalar(&mut p[done..], &mut m[done..], &mut v[done..], &mut g[done..], s);
}

/// [`adamw_on_host`] one entry at a time (slices of one length).
fn adamw_on_host_scalar(p: &mut [f32], m: &mut [f32], v: &mut [f32], g: &mut [f32], s: HostStep) {
    let (d1, d2) = (1.0 - BETA_1, 1.0 - BETA_2);
    // One length for all four, so that the loop vectorises.
    let n = p.len();
    let (m, v, g) = (&mut m[..n], &mut v[..n], &mut g[..n]);
    for i in 0..n {
        let grad = g[i];
        g[i] = 0.0;
        let m_next = m[i] * BETA_1 + grad * d1;
        let v_next = v[i] * BETA_2 + grad * grad * d2;
        m[i] = m_next;
        v[i] = v_next;
        p[i] = p[i] * s.keep - m_next / s.c1 / ((v_next / s.c2).sqrt() + EPSILON) * s.lr;
    }
}

/// [`adamw_on_host_scalar`] on the leading multiple of 8 entries (slices
/// of one length), 8 at a time; returns how many entries it updated.
/// `C1_IS_ONE` / `C2_IS_ONE`: `s.c1` / `s.c2` is 1, and the quotient by it
/// is left out.
///
/// Safety: the CPU must have AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn adamw_on_host_avx<const C1_IS_ONE: bool, const C2_IS_ONE: bool>(p: &mut [f32], m: &mut [f32], v: &mut [f32], g: &mut [f32], s: HostStep) -> usize {
    use std::arch::x86_64::*;
    let n = p.len();
    assert!(m.len() == n && v.len() == n && g.len() == n, "one moment and gradient per parameter");
    assert!((!C1_IS_ONE || s.c1 == 1.0) && (!C2_IS_ONE || s.c2 == 1.0), "a bias correction left out is 1");
    let full = n - n % 8;
    let (b1, b2) = (_mm256_set1_ps(BETA_1), _mm256_set1_ps(BETA_2));
    let (d1, d2) = (_mm256_set1_ps(1.0 - BETA_1), _mm256_set1_ps(1.0 - BETA_2));
    let (c1, c2, eps) = (_mm256_set1_ps(s.c1), _mm256_set1_ps(s.c2), _mm256_set1_ps(EPSILON));
    let (keep, lr, zero) = (_mm256_set1_ps(s.keep), _mm256_set1_ps(s.lr), _mm256_setzero_ps());
    let (p, m, v, g) = (p.as_mut_ptr(), m.as_mut_ptr(), v.as_mut_ptr(), g.as_mut_ptr());
    let mut i = 0;
    while i < full {
        // Safety: `i + 8 <= full <= n`, the length of all four slices.
        unsafe {
            let grad = _mm256_loadu_ps(g.add(i));
            _mm256_storeu_ps(g.add(i), zero);
            let m_next = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(m.add(i)), b1), _mm256_mul_ps(grad, d1));
            let v_next = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v.add(i)), b2), _mm256_mul_ps(_mm256_mul_ps(grad, grad), d2));
            _mm256_storeu_ps(m.add(i), m_next);
            _mm256_storeu_ps(v.add(i), v_next);
            let v_hat = if C2_IS_ONE { v_next } else { _mm256_div_ps(v_next, c2) };
            let m_hat = if C1_IS_ONE { m_next } else { _mm256_div_ps(m_next, c1) };
            let denominator = _mm256_add_ps(_mm256_sqrt_ps(v_hat), eps);
            let delta = _mm256_mul_ps(_mm256_div_ps(m_hat, denominator), lr);
            _mm256_storeu_ps(p.add(i), _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(p.add(i)), keep), delta));
        }
        i += 8;
    }
    full
}

/// AdamW's state for one module on the host: every parameter with its
/// moments as row-major f32 and the steps taken, updated by
/// [`adamw_on_host`] (burn's `AdamW` exactly, see the module header). The
/// parameters it steps must be changed by nothing else between its steps:
/// it keeps their values and writes them into the module after each step.
pub(crate) struct HostAdamW {
    weight_decay: f64,
    steps: usize,
    /// `(p, m, v)` of each parameter that has had a gradient.
    state: HashMap<ParamId, (Vec<f32>, Vec<f32>, Vec<f32>)>,
}

impl HostAdamW {
    /// AdamW with decoupled weight decay `weight_decay`, before its first
    /// step.
    pub(crate) fn new(weight_decay: f64) -> Self {
        HostAdamW { weight_decay, steps: 0, state: HashMap::new() }
    }

    /// One AdamW step of `module` at learning rate `lr` with `grads`:
    /// each gradient read once, the update made on the host, and the new
    /// values written into the parameter with one upload (same identity,
    /// still tracked where it was); parameters without a gradient are kept
    /// as they are.
    pub(crate) fn step<M: Module>(&mut self, lr: f64, module: M, grads: &mut GradientsParams) -> M {
        self.steps += 1;
        let mut mapper = HostMapper { t: self.steps, lr, weight_decay: self.weight_decay, grads, state: &mut self.state };
        module.map(&mut mapper)
    }
}

struct HostMapper<'a> {
    t: usize,
    lr: f64,
    weight_decay: f64,
    grads: &'a mut GradientsParams,
    state: &'a mut HashMap<ParamId, (Vec<f32>, Vec<f32>, Vec<f32>)>,
}

impl ModuleMapper for HostMapper<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let (id, tensor, mapper) = param.consume();
        let Some(grad) = self.grads.remove::<D>(id) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let (require_grad, dims, device) = (tensor.is_require_grad(), tensor.dims(), grad.device());
        let (p, m, v) = self.state.entry(id).or_insert_with(|| {
            let p = tensor_to_f32(tensor.inner());
            let n = p.len();
            (p, vec![0f32; n], vec![0f32; n])
        });
        let mut g = tensor_to_f32(grad);
        adamw_on_host(p, m, v, &mut g, self.t, self.lr, self.weight_decay);
        let p = Tensor::from_inner(Tensor::<D>::from_data(TensorData::new(p.clone(), dims), &device));
        Param::from_mapped_value(id, if require_grad { p.require_grad() } else { p }, mapper)
    }
}

/// AdamW's state for one module: both moments of every parameter (in its
/// shape) and the step count on the device.
pub(crate) struct InPlaceAdamW {
    weight_decay: f64,
    /// `(m, v)` of each parameter, in its shape: a `(Tensor<D>, Tensor<D>)`
    /// for a parameter of rank `D` (no reshape between steps: burn's fusion
    /// writes over a buffer only for the very tensor that held it).
    moments: HashMap<ParamId, Box<dyn Any + Send>>,
    /// The tables of `1 - b1^t` and `1 - b2^t` and the steps taken so far
    /// (`[1]`, on the device), made at the first step.
    corrections: Option<(Tensor<1>, Tensor<1>, Tensor<1, Int>)>,
    device: Device,
    stable_buffers: bool,
    all_in_place: bool,
}

impl InPlaceAdamW {
    /// AdamW with decoupled weight decay `weight_decay` on `device`; with
    /// `stable_buffers`, every step writes its new tensors over the old ones
    /// ([`write_over`], for replayed steps), otherwise it returns them as
    /// they come (one copy fewer per tensor).
    pub(crate) fn new(weight_decay: f64, device: &Device, stable_buffers: bool) -> Self {
        InPlaceAdamW { weight_decay, moments: HashMap::new(), corrections: None, device: device.clone(), stable_buffers, all_in_place: true }
    }

    /// One AdamW step of `module` at learning rate `lr` with `grads`;
    /// parameters without a gradient are kept as they are.
    pub(crate) fn step<M: Module>(&mut self, lr: f64, module: M, grads: &mut GradientsParams) -> M {
        let (table_1, table_2, steps) = self.corrections.take().unwrap_or_else(|| (correction_table(BETA_1, &self.device), correction_table(BETA_2, &self.device), Tensor::zeros([1], &self.device)));
        let mut in_place = steps.can_mut();
        // Row `t - 1` for step `t` (the last row from there on).
        let row = steps.clone().clamp_max(CORRECTION_STEPS as i64 - 1);
        let corrections = (table_1.clone().select(0, row.clone()), table_2.clone().select(0, row));
        let keep = self.stable_buffers;
        let next = steps.clone().add_scalar(1);
        let steps = update(steps, next, keep);
        let mut mapper = Mapper { lr, weight_decay: self.weight_decay, grads, moments: &mut self.moments, corrections, stable_buffers: keep, in_place: true };
        let module = module.map(&mut mapper);
        in_place &= mapper.in_place;
        self.corrections = Some((table_1, table_2, steps));
        self.all_in_place = in_place;
        module
    }

    /// Whether every parameter, moment and the step count of the last [`Self::step`]
    /// was the only handle to its buffer, so that the step wrote over it.
    pub(crate) fn all_in_place(&self) -> bool {
        self.all_in_place
    }

    /// A copy of the state in buffers of its own (the tables, which no step
    /// writes, are shared).
    pub(crate) fn deep_copy(&self) -> Self {
        InPlaceAdamW {
            weight_decay: self.weight_decay,
            moments: self.moments.iter().map(|(id, moments)| (*id, copy_moments(moments.as_ref()))).collect(),
            corrections: self.corrections.as_ref().map(|(a, b, t)| (a.clone(), b.clone(), own_copy(t))),
            device: self.device.clone(),
            stable_buffers: self.stable_buffers,
            all_in_place: self.all_in_place,
        }
    }
}

struct Mapper<'a> {
    lr: f64,
    weight_decay: f64,
    grads: &'a mut GradientsParams,
    moments: &'a mut HashMap<ParamId, Box<dyn Any + Send>>,
    corrections: (Tensor<1>, Tensor<1>),
    stable_buffers: bool,
    in_place: bool,
}

impl ModuleMapper for Mapper<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let (id, tensor, mapper) = param.consume();
        let Some(grad) = self.grads.remove::<D>(id) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let require_grad = tensor.is_require_grad();
        let p = tensor.inner();
        let (m, v) = match self.moments.remove(&id).map(|b| b.downcast::<(Tensor<D>, Tensor<D>)>()) {
            Some(Ok(moments)) => *moments,
            // First step (or, unreachably, a rank that changed).
            _ => (p.zeros_like(), p.zeros_like()),
        };
        self.in_place &= p.can_mut() && m.can_mut() && v.can_mut();
        let decay = self.lr * self.weight_decay;
        let (c1, c2) = (self.corrections.0.clone().reshape([1; D]), self.corrections.1.clone().reshape([1; D]));
        if self.stable_buffers {
            // The new values from clones of the old tensors (so that no
            // fused kernel writes them over an old one's buffer), then
            // written over the old buffers: a parameter, its moments and the
            // step count stay in the same buffers from step to step, which a
            // replayed step needs.
            let m_next = m.clone().mul_scalar(BETA_1).add(grad.clone().mul_scalar(1.0 - BETA_1));
            let v_next = v.clone().mul_scalar(BETA_2).add(grad.square().mul_scalar(1.0 - BETA_2));
            let delta = m_next.clone().div(c1).div(v_next.clone().div(c2).sqrt().add_scalar(EPSILON));
            let decayed = if decay == 0.0 { p.clone() } else { p.clone().mul_scalar(1.0 - decay) };
            let p_next = decayed - delta.mul_scalar(self.lr);
            let p = update(p, p_next, true);
            self.moments.insert(id, Box::new((update(m, m_next, true), update(v, v_next, true))));
            let p = Tensor::from_inner(p);
            return Param::from_mapped_value(id, if require_grad { p.require_grad() } else { p }, mapper);
        }
        // The same operations in the same order, each consuming the tensor
        // it replaces: on the CPU backend an operation on the only handle
        // to a buffer writes over it, so a step allocates three temporaries
        // per parameter (`(1 - b1) g`, `m / (1 - b1^t)` and the denominator)
        // instead of one buffer per operation.
        let m_next = m.mul_scalar(BETA_1).add(grad.clone().mul_scalar(1.0 - BETA_1));
        let v_next = v.mul_scalar(BETA_2).add(grad.square().mul_scalar(1.0 - BETA_2));
        let delta = m_next.clone().div(c1).div(v_next.clone().div(c2).sqrt().add_scalar(EPSILON));
        let decayed = if decay == 0.0 { p } else { p.mul_scalar(1.0 - decay) };
        let p = decayed - delta.mul_scalar(self.lr);
        self.moments.insert(id, Box::new((m_next, v_next)));
        let p = Tensor::from_inner(p);
        Param::from_mapped_value(id, if require_grad { p.require_grad() } else { p }, mapper)
    }
}

/// `tensor`'s values in a buffer of its own: a product of a second handle
/// (which therefore cannot reuse the buffer) by 1.
pub(crate) fn own_copy<const D: usize, K: burn::tensor::kind::Numeric>(tensor: &Tensor<D, K>) -> Tensor<D, K> {
    tensor.clone().mul_scalar(1)
}

/// `value` written over `target`'s buffer: a `slice_assign` of the whole
/// tensor, which writes in place when `target` is the only handle to its
/// buffer ([`Tensor::can_mut`], checked by the callers), with or without
/// burn's fusion.
pub(crate) fn write_over<const D: usize, K: burn::tensor::kind::Basic>(target: Tensor<D, K>, value: Tensor<D, K>) -> Tensor<D, K> {
    let dims = target.dims();
    target.slice_assign(std::array::from_fn::<_, D, _>(|i| 0..dims[i]), value)
}

/// The next value of a state tensor: written over `old`'s buffer with
/// `stable_buffers`, else `next` itself.
pub(crate) fn update<const D: usize, K: burn::tensor::kind::Basic>(old: Tensor<D, K>, next: Tensor<D, K>, stable_buffers: bool) -> Tensor<D, K> {
    if stable_buffers {
        write_over(old, next)
    } else {
        next
    }
}

/// A copy of one parameter's `(m, v)` in buffers of their own (ranks 1-3,
/// the network's).
fn copy_moments(moments: &(dyn Any + Send)) -> Box<dyn Any + Send> {
    fn copy<const D: usize>(m: &(dyn Any + Send)) -> Option<Box<dyn Any + Send>> {
        m.downcast_ref::<(Tensor<D>, Tensor<D>)>().map(|(a, b)| Box::new((own_copy(a), own_copy(b))) as Box<dyn Any + Send>)
    }
    copy::<1>(moments).or_else(|| copy::<2>(moments)).or_else(|| copy::<3>(moments)).expect("moments of a parameter of rank 1-3")
}

#[cfg(test)]
mod tests {
    use burn::module::Module;
    use burn::optim::{AdamWConfig, GradientsParams};
    use burn::tensor::{Distribution, Tensor};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::InPlaceAdamW;
    use crate::eksvd::neural::loss::{cross_entropy, objective_per_component, LossTensors};
    use crate::eksvd::neural::model::{Activation, Architecture, NeuralEksvdNet};
    use crate::eksvd::neural::placement::burn_device;

    /// Eight AdamW steps (weight decay on, random minibatches) from the same
    /// start give exactly the weights of burn's `AdamW` on the CPU backend
    /// (the same f32 operations on the same values), with the updates
    /// written over the old buffers, with each operation consuming its
    /// input, and on the host ([`super::HostAdamW`]).
    #[test]
    fn in_place_adamw_matches_burns_adamw() {
        let mut rng = StdRng::seed_from_u64(0x5eed_ada3);
        let device = burn_device(&crate::Device::Cpu).unwrap();
        let ad = device.clone().autodiff();
        let arch = Architecture { input_dims: vec![5, 7], hidden: vec![8], d_phi: 6, components: 3, n_classes: 4, activation: Activation::Relu };
        let start = NeuralEksvdNet::init(&arch, 1.0, rng.random(), &device).unwrap();
        let (lr, wd) = (3e-3, 0.05);
        let mut ours = (start.clone().fork(&ad).train(), InPlaceAdamW::new(wd, &device, true));
        let mut plain = (start.clone().fork(&ad).train(), InPlaceAdamW::new(wd, &device, false));
        let mut burns = (start.clone().fork(&ad).train(), AdamWConfig::new().with_weight_decay(wd as f32).init());
        let mut host = (start.clone().fork(&ad).train(), super::HostAdamW::new(wd));
        let loss = |net: &NeuralEksvdNet, x: Vec<Tensor<2>>, one_hot: Tensor<2>| {
            let scores = net.stacked_scores(x, 0.0);
            let objective = objective_per_component(net.projections(), scores.clone(), net.gamma(), 100);
            LossTensors::new(objective, cross_entropy(net.logits(scores), one_hot), 0.5).total
        };
        for _ in 0..8 {
            let x: Vec<Tensor<2>> = [5, 7].iter().map(|&d| Tensor::<2>::random([10, d], Distribution::Normal(0.0, 1.0), &ad)).collect();
            let one_hot = Tensor::<2>::from_data(burn::tensor::TensorData::new((0..40).map(|i| if i % 4 == (i / 4) % 4 { 1.0f32 } else { 0.0 }).collect::<Vec<_>>(), [10, 4]), &ad);
            let mut grads = GradientsParams::from_grads(loss(&ours.0, x.clone(), one_hot.clone()).backward(), &ours.0);
            ours.0 = ours.1.step(lr, ours.0.clone(), &mut grads);
            let mut grads = GradientsParams::from_grads(loss(&plain.0, x.clone(), one_hot.clone()).backward(), &plain.0);
            plain.0 = plain.1.step(lr, plain.0.clone(), &mut grads);
            let mut grads = GradientsParams::from_grads(loss(&host.0, x.clone(), one_hot.clone()).backward(), &host.0);
            host.0 = host.1.step(lr, host.0.clone(), &mut grads);
            let grads = GradientsParams::from_grads(loss(&burns.0, x, one_hot).backward(), &burns.0);
            burns.0 = burns.1.step(lr, burns.0.clone(), grads);
        }
        let (a, b, s) = (ours.0.valid().export().values(), burns.0.valid().export().values(), start.export().values());
        let change = a.iter().zip(&s).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
        let gap = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
        eprintln!("in-place AdamW against burn's: largest difference {gap:e}, largest change {change:e}");
        assert!(change > 1e-3, "the steps moved the weights by {change}");
        assert_eq!(gap, 0.0, "in-place AdamW differs from burn's by {gap} (change {change})");
        assert_eq!(plain.0.valid().export().values(), a, "the consuming (CPU) path differs from the in-place one");
        assert_eq!(host.0.valid().export().values(), a, "AdamW on the host differs from the in-place one");
    }

    /// [`super::adamw_on_host`] (8 entries at a time where the CPU has AVX)
    /// gives bit for bit the values of one entry at a time, on lengths with
    /// and without a remainder of 8, over steps with zero, tiny, huge and
    /// ordinary gradients (the moments then span many binades), with and
    /// without weight decay, at steps past the correction table's end.
    #[test]
    fn adamw_on_host_by_blocks_equals_one_entry_at_a_time() {
        let mut rng = StdRng::seed_from_u64(0x5eed_a7c8);
        // The first step whose `1 - b1^t` is 1 in f32 (the steps below take
        // both sides of it), as the doc of `adamw_on_host` says.
        assert_eq!((1..super::CORRECTION_STEPS).find(|&t| super::corrections_at(t).0 == 1.0), Some(165));
        for (n, wd) in [(1003, 0.05), (64, 0.0), (7, 0.01)] {
            let start: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
            let (mut p, mut m, mut v) = (start.clone(), vec![0f32; n], vec![0f32; n]);
            let (mut p1, mut m1, mut v1) = (start, vec![0f32; n], vec![0f32; n]);
            for t in [1, 2, 3, 10, 500, super::CORRECTION_STEPS + 7] {
                let lr = 1e-3 * (1 + t % 5) as f64;
                let g: Vec<f32> = (0..n)
                    .map(|i| match (i + t) % 5 {
                        0 => 0.0,
                        1 => rng.random_range(-1e-30f32..1e-30),
                        2 => rng.random_range(-1e15f32..1e15),
                        _ => rng.random_range(-2.0f32..2.0),
                    })
                    .collect();
                let (mut g_blocks, mut g_one) = (g.clone(), g);
                super::adamw_on_host(&mut p, &mut m, &mut v, &mut g_blocks, t, lr, wd);
                super::adamw_on_host_scalar(&mut p1, &mut m1, &mut v1, &mut g_one, super::HostStep::new(t, lr, wd));
                assert!(g_blocks.iter().chain(&g_one).all(|&x| x == 0.0), "the gradients are zeroed");
            }
            let bits = |x: &[f32]| x.iter().map(|y| y.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&m), bits(&m1), "n {n}: first moments differ");
            assert_eq!(bits(&v), bits(&v1), "n {n}: second moments differ");
            assert_eq!(bits(&p), bits(&p1), "n {n}: parameters differ");
            assert!(p.iter().all(|x| x.is_finite()), "n {n}: finite parameters");
        }
    }

    /// One parameter for [`adamw_on_host_matches_burns_adamw`].
    #[derive(Module, Debug)]
    struct OneParameter {
        w: burn::module::Param<Tensor<2>>,
    }

    /// AdamW on host slices gives exactly burn's `AdamW` on the CPU backend:
    /// twelve steps of a 300 x 70 parameter
    /// with random gradients, a third of the rows without gradient in each
    /// step (as the rows of a first layer at columns a minibatch lacks),
    /// weight decay on, and with weight decay off for the bias's case.
    #[test]
    fn adamw_on_host_matches_burns_adamw() {
        let mut rng = StdRng::seed_from_u64(0x5eed_0a57);
        let device = burn_device(&crate::Device::Cpu).unwrap();
        let (rows, cols) = (300, 70);
        for wd in [0.05, 0.0] {
            let start: Vec<f32> = (0..rows * cols).map(|_| rng.random_range(-1.0f32..1.0)).collect();
            // burn's optimisers step modules on an autodiff device, with
            // the gradients on the inner one.
            let ad = device.clone().autodiff();
            let mut module = OneParameter { w: burn::module::Param::from_tensor(Tensor::<2>::from_data(burn::tensor::TensorData::new(start.clone(), [rows, cols]), &ad)) };
            let mut adamw = AdamWConfig::new().with_weight_decay(wd as f32).init();
            let (mut p, mut m, mut v) = (start, vec![0f32; rows * cols], vec![0f32; rows * cols]);
            for t in 1..=12 {
                let lr = 1e-3 * t as f64;
                let g: Vec<f32> = (0..rows * cols).map(|i| if (i / cols + t) % 3 == 0 { 0.0 } else { rng.random_range(-2.0f32..2.0) }).collect();
                let mut grads = GradientsParams::new();
                grads.register(module.w.id, Tensor::<2>::from_data(burn::tensor::TensorData::new(g.clone(), [rows, cols]), &device));
                module = adamw.step(lr, module, grads);
                let mut g = g;
                super::adamw_on_host(&mut p, &mut m, &mut v, &mut g, t, lr, wd);
                assert!(g.iter().all(|&x| x == 0.0), "the gradient is zeroed");
            }
            let burns = module.w.val().into_data().convert::<f32>().try_to_vec::<f32>().unwrap();
            let differing = p.iter().zip(&burns).filter(|(a, b)| a != b).count();
            assert_eq!(differing, 0, "weight decay {wd}: host AdamW differs from burn's in {differing} values");
        }
    }
}
