//! `J_k / N` of Eq. 3 for all components at once and the training loss
//! `sum_k (J_k / N)^2 + eta L_CE` of Section 3.4, on burn tensors.

use burn::tensor::{activation, Tensor};

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
    let [q, d_phi, k] = projections.dims();
    let (qf, n) = (q as f64, n_samples as f64);
    // One reduction each: `sum_q ||w_qk||^2` over the stacked rows, and
    // `||sum_q w_qk||^2`.
    let norms = projections.clone().reshape([q * d_phi, k]).square().sum_dim(0);
    let total_norm = projections.sum_dim(0).reshape([d_phi, k]).square().sum_dim(0);
    let weights = norms.mul_scalar((qf - 1.0) / (2.0 * n)) - total_norm.mul_scalar(0.5 / n);
    let j = weights + squared_scores.mul(gamma.unsqueeze::<2>()).mul_scalar((qf - 1.0) / (2.0 * rows as f64));
    j.reshape([k])
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
