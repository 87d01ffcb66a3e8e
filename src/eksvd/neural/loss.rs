//! `J_k / N` of Eq. 3 for all components at once and the training loss
//! `sum_k (J_k / N)^2 + eta L_CE` of Section 3.4, on burn tensors.

use burn::tensor::{activation, Bool, Tensor};

/// `J_k / N` of Eq. 3 for every component `k` (shape `[k]`), the objective
/// per training sample:
///
/// `J_k = (Q/2 - 1) sum_q ||w_qk||^2 - sum_{p<q} w_qk^T w_pk
///        + ((Q-1)/2) gamma sum_q sum_{i=1}^N (e_ik^(q))^2`,
///
/// computed as `((Q-1)/2) sum_q ||w_qk||^2 - ||sum_q w_qk||^2 / 2` (since
/// `2 sum_{p<q} w_p^T w_q = ||sum_q w_q||^2 - sum_q ||w_q||^2`), divided by
/// `N = n_samples`, plus `((Q-1)/2) gamma` times the **mean** over the rows
/// at hand of `sum_q (e_ik^(q))^2`. On a minibatch this is an unbiased
/// estimate of the full-data `J_k / N`; on all `N` samples it is exact.
/// `projections` are the `W_q` stacked (`[Q, d_phi, k]`), `scores` the
/// `E_q` stacked (`[Q, |B|, k]`).
pub fn objective_per_component(projections: Tensor<3>, scores: Tensor<3>, gamma: Tensor<1>, n_samples: usize) -> Tensor<1> {
    let [q, rows, k] = scores.dims();
    objective_from_squared_scores(projections, scores.reshape([q * rows, k]).square().sum_dim(0), rows, gamma, n_samples)
}

/// [`objective_per_component`] from the per-component sums
/// `sum_q sum_i (e_ik^(q))^2` over `rows` samples (`[1, k]`): the data
/// term of `J_k` is linear in them, so sums accumulated over chunks of a
/// data set give its exact `J_k / N`.
pub fn objective_from_squared_scores(projections: Tensor<3>, squared_scores: Tensor<2>, rows: usize, gamma: Tensor<1>, n_samples: usize) -> Tensor<1> {
    let q = projections.dims()[0] as f64;
    objective_scaled(projections, squared_scores, gamma, n_samples, |data| data.mul_scalar((q - 1.0) / (2.0 * rows as f64)))
}

/// [`objective_from_squared_scores`] with the data term's factor
/// `(Q - 1) / (2 |B|)` applied by `scale` (a host scalar, or for
/// [`PaddedRows`] a `[1]` tensor holding the same f32 value).
fn objective_scaled(projections: Tensor<3>, squared_scores: Tensor<2>, gamma: Tensor<1>, n_samples: usize, scale: impl FnOnce(Tensor<2>) -> Tensor<2>) -> Tensor<1> {
    let [q, d_phi, k] = projections.dims();
    let (qf, n) = (q as f64, n_samples as f64);
    // One reduction each: `sum_q ||w_qk||^2` over the stacked rows, and
    // `||sum_q w_qk||^2`.
    let norms = projections.clone().reshape([q * d_phi, k]).square().sum_dim(0);
    let total_norm = projections.sum_dim(0).reshape([d_phi, k]).square().sum_dim(0);
    let weights = norms.mul_scalar((qf - 1.0) / (2.0 * n)) - total_norm.mul_scalar(0.5 / n);
    (weights + scale(squared_scores.mul(gamma.unsqueeze::<2>()))).reshape([k])
}

/// A minibatch of fixed width `B` whose last rows may be padding: the last,
/// shorter minibatch of an epoch (`N mod B` rows) taken at full width, so
/// that one captured training step serves every minibatch of the epoch
/// (`replay.rs`). Which rows count is known on the device only.
pub(crate) struct PaddedRows {
    /// 1 for rows of the data set, 0 for padding (`[B, 1]`).
    pub(crate) weights: Tensor<2>,
    /// Whether no row is padding (`[1]`).
    pub(crate) full: Tensor<1, Bool>,
    /// The rows that count in a minibatch with padding (`N mod B`, at least 1).
    pub(crate) short_rows: usize,
}

impl PaddedRows {
    /// `f(|B|)` for the rows that count, `[1]`: one of the two host values
    /// `f(B)` and `f(N mod B)`, chosen on the device as `s f(B) + (1 - s)
    /// f(N mod B)` with `s` 1 or 0 (exact), so that a full minibatch is
    /// scaled by exactly the f32 value of the unpadded step's
    /// `mul_scalar(f(B))`. Scalars only: a captured step may not write
    /// host data into a buffer (as `Tensor::full` does).
    fn per_rows(&self, f: impl Fn(f64) -> f64) -> Tensor<1> {
        let width = self.weights.dims()[0];
        let full = self.full.clone().float();
        full.clone().mul_scalar(f(width as f64)) + full.neg().add_scalar(1.0).mul_scalar(f(self.short_rows as f64))
    }
}

/// [`objective_per_component`] on a minibatch with padding: the padded rows'
/// scores are zeroed before squaring and the mean is over the rows that
/// count.
pub(crate) fn padded_objective_per_component(projections: Tensor<3>, scores: Tensor<3>, gamma: Tensor<1>, n_samples: usize, rows: &PaddedRows) -> Tensor<1> {
    let [q, width, k] = scores.dims();
    let qf = q as f64;
    let squared = scores.mul(rows.weights.clone().unsqueeze::<3>()).reshape([q * width, k]).square().sum_dim(0);
    let factor = rows.per_rows(|r| (qf - 1.0) / (2.0 * r));
    objective_scaled(projections, squared, gamma, n_samples, |data| data.mul(factor.unsqueeze::<2>()))
}

/// [`cross_entropy`] on a minibatch with padding: the mean over the rows
/// that count.
pub(crate) fn padded_cross_entropy(logits: Tensor<2>, one_hot: Tensor<2>, rows: &PaddedRows) -> Tensor<1> {
    activation::log_softmax(logits, 1).mul(one_hot.mul(rows.weights.clone())).sum().mul(rows.per_rows(|r| -1.0 / r))
}

/// Mean cross-entropy of `logits` (`n x C`) against one-hot targets.
pub fn cross_entropy(logits: Tensor<2>, one_hot: Tensor<2>) -> Tensor<1> {
    let n = logits.dims()[0] as f64;
    activation::log_softmax(logits, 1).mul(one_hot).sum().mul_scalar(-1.0 / n)
}

/// The loss terms of one batch, as tensors (for backpropagation).
#[derive(Debug, Clone)]
pub struct LossTensors {
    /// `J_k / N` per component (`[k]`).
    pub objective: Tensor<1>,
    /// `sum_k (J_k / N)^2` (`[1]`).
    pub objective_squared: Tensor<1>,
    /// Mean cross-entropy (`[1]`).
    pub cross_entropy: Tensor<1>,
    /// `sum_k (J_k / N)^2 + eta L_CE` (`[1]`).
    pub total: Tensor<1>,
}

impl LossTensors {
    /// The loss of Section 3.4 from its parts.
    pub fn new(objective: Tensor<1>, cross_entropy: Tensor<1>, eta: f64) -> Self {
        let objective_squared = objective.clone().square().sum();
        let total = objective_squared.clone() + cross_entropy.clone().mul_scalar(eta);
        LossTensors { objective, objective_squared, cross_entropy, total }
    }
}

/// The loss terms read back to the host.
#[derive(Debug, Clone, PartialEq)]
pub struct LossValues {
    /// `J_k / N` per component.
    pub objective: Vec<f64>,
    /// `sum_k (J_k / N)^2`.
    pub objective_squared: f64,
    /// Mean cross-entropy.
    pub cross_entropy: f64,
    /// `sum_k (J_k / N)^2 + eta L_CE`.
    pub total: f64,
}

#[cfg(test)]
mod tests {
    use burn::module::{Module, ModuleVisitor, Param};
    use burn::tensor::{Bool, Distribution, Tensor, TensorData};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::{cross_entropy, objective_per_component, padded_cross_entropy, padded_objective_per_component, LossTensors, PaddedRows};
    use crate::eksvd::neural::model::{Activation, Architecture, NeuralEksvdNet};
    use crate::eksvd::neural::placement::burn_device;

    fn values(t: Tensor<1>) -> Vec<f64> {
        t.into_data().convert::<f64>().try_to_vec::<f64>().unwrap()
    }

    /// The padded loss of a minibatch of width 10 whose last 4 rows are
    /// padding (arbitrary values) is the loss of its first 6 rows: the same
    /// value and the same gradients (f32 rounding, 1e-5 relative), where
    /// `N = 106`. With no row padded it is exactly the unpadded loss.
    #[test]
    fn padded_loss_is_the_loss_of_the_rows_that_count() {
        let mut rng = StdRng::seed_from_u64(0x9add_ed10);
        let device = burn_device(&crate::Device::Cpu).unwrap();
        let ad = device.clone().autodiff();
        let arch = Architecture { input_dims: vec![5, 7], hidden: vec![8], d_phi: 6, components: 3, n_classes: 4, activation: Activation::Relu };
        let net = NeuralEksvdNet::init(&arch, 1.0, rng.random(), &device).unwrap().fork(&ad).train();
        let (width, short, n, eta) = (10, 6, 106, 0.7);
        let x: Vec<Tensor<2>> = arch.input_dims.iter().map(|&d| Tensor::<2>::random([width, d], Distribution::Normal(0.0, 1.0), &ad)).collect();
        let labels: Vec<usize> = (0..width).map(|_| rng.random_range(0..4)).collect();
        let one_hot = Tensor::<2>::from_data(TensorData::new((0..width * 4).map(|i| if labels[i / 4] == i % 4 { 1.0f32 } else { 0.0 }).collect::<Vec<_>>(), [width, 4]), &ad);
        let rows = |counted: usize| PaddedRows {
            weights: Tensor::from_data(TensorData::new((0..width).map(|i| if i < counted { 1.0f32 } else { 0.0 }).collect::<Vec<_>>(), [width, 1]), &ad),
            full: Tensor::<1, Bool>::from_data(TensorData::new(vec![counted == width], [1]), &ad),
            short_rows: short,
        };
        let plain = |x: Vec<Tensor<2>>, one_hot: Tensor<2>| {
            let scores = net.stacked_scores(x, 0.0);
            let objective = objective_per_component(net.projections(), scores.clone(), net.gamma(), n);
            LossTensors::new(objective, cross_entropy(net.logits(scores), one_hot), eta)
        };
        let padded = |rows: PaddedRows| {
            let scores = net.stacked_scores(x.clone(), 0.0);
            let objective = padded_objective_per_component(net.projections(), scores.clone(), net.gamma(), n, &rows);
            LossTensors::new(objective, padded_cross_entropy(net.logits(scores), one_hot.clone(), &rows), eta)
        };
        // The gradients of the loss for every parameter, flattened.
        struct Collect<'a>(&'a burn::tensor::Gradients, Vec<f64>);
        impl ModuleVisitor for Collect<'_> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                let grad = param.val().grad(self.0).expect("a parameter's gradient");
                self.1.extend(values(grad.reshape([-1])));
            }
        }
        let gradients = |loss: &LossTensors| {
            let grads = loss.total.backward();
            let mut collect = Collect(&grads, Vec::new());
            net.visit(&mut collect);
            collect.1
        };
        let close = |a: &[f64], b: &[f64], what: &str| {
            let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let gap = a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
            assert!(scale > 0.0 && gap <= 1e-5 * scale, "{what}: gap {gap:e} against {scale:e}");
        };

        let (a, b) = (padded(rows(short)), plain(x.iter().map(|x| x.clone().narrow(0, 0, short)).collect(), one_hot.clone().narrow(0, 0, short)));
        for (pa, pb, what) in [(&a.objective, &b.objective, "J_k / N"), (&a.cross_entropy, &b.cross_entropy, "cross-entropy"), (&a.total, &b.total, "loss")] {
            close(&values(pa.clone()), &values(pb.clone()), what);
        }
        close(&gradients(&a), &gradients(&b), "gradients");
        // The padding counts: the same rows unmasked give another loss.
        let unmasked = values(plain(x.clone(), one_hot.clone()).total)[0];
        assert!((unmasked - values(a.total.clone())[0]).abs() > 1e-4 * unmasked.abs());

        let (a, b) = (padded(rows(width)), plain(x.clone(), one_hot.clone()));
        assert_eq!(values(a.total.clone()), values(b.total.clone()));
        assert_eq!(gradients(&a), gradients(&b));
    }
}
