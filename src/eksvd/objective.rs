//! The primal objective `J` of Eq. 3 and the KKT conditions of Eq. 5, for
//! checking solutions (Lemma 3.3: `J = 0` at every stationary point) and as
//! the loss term of the neural variant (`sum_k J_k^2`, Section 3.4).

use nalgebra::{DMatrix, DVector};

use crate::data::{check_shape, check_source_matrix};
use crate::error::Result;
use crate::error::Error;
use crate::linalg::matmul_tn;

/// The three terms of `J` (Eq. 3) for one component:
/// `J = (Q/2 - 1) sum_q w_q^T w_q - sum_{p<q} w_q^T w_p + ((Q-1)/2) gamma sum_q sum_i (e_i^(q))^2`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ObjectiveTerms {
    /// `(Q/2 - 1) sum_q w_q^T w_q`.
    pub weight_norms: f64,
    /// `sum_{p<q} w_q^T w_p` (enters `J` with a minus sign).
    pub coupling: f64,
    /// `((Q-1)/2) gamma sum_q ||e^(q)||^2`.
    pub variance: f64,
}

impl ObjectiveTerms {
    /// `J = weight_norms - coupling + variance`.
    pub fn value(&self) -> f64 {
        self.weight_norms - self.coupling + self.variance
    }

    /// `|J|` relative to the sum of the terms' magnitudes (0 when all vanish).
    pub fn relative_value(&self) -> f64 {
        let scale = self.weight_norms.abs() + self.coupling.abs() + self.variance.abs();
        if scale == 0.0 { 0.0 } else { self.value().abs() / scale }
    }
}

/// `J` of Eq. 3 for one component: weights `w_q` (`d_phi` each), scores
/// `e^(q)` (`N_q` each) and `gamma > 0` (finite).
///
/// Errors: fewer than 2 sources, shape mismatches, non-finite inputs, an
/// invalid `gamma`, and `Compute(Overflow)` when a term overflows.
pub fn objective_terms(weights: &[DVector<f64>], scores: &[DVector<f64>], gamma: f64) -> Result<ObjectiveTerms> {
    let n = weights.len();
    if n < 2 {
        return Err(Error::TooFewSources(n));
    }
    check_shape("number of score vectors vs weight vectors", n, scores.len())?;
    if !(gamma.is_finite() && gamma > 0.0) {
        return Err(Error::InvalidParameter { name: "gamma", reason: format!("must be finite and > 0, got {gamma}") });
    }
    for (q, w) in weights.iter().enumerate() {
        check_shape(format!("length of w_{q} vs w_0"), weights[0].len(), w.len())?;
        finite_vector("w", q, w)?;
    }
    for (q, e) in scores.iter().enumerate() {
        finite_vector("scores", q, e)?;
    }
    let qf = n as f64;
    let weight_norms = (qf / 2.0 - 1.0) * weights.iter().map(|w| w.norm_squared()).sum::<f64>();
    let mut coupling = 0.0;
    for p in 0..n {
        for q in (p + 1)..n {
            coupling += weights[q].dot(&weights[p]);
        }
    }
    let variance = (qf - 1.0) / 2.0 * gamma * scores.iter().map(|e| e.norm_squared()).sum::<f64>();
    for (v, name) in [(weight_norms, "objective: weight norms"), (coupling, "objective: coupling"), (variance, "objective: variance")] {
        if !v.is_finite() {
            return Err(Error::Overflow { what: name, row: 0, col: 0 });
        }
    }
    Ok(ObjectiveTerms { weight_norms, coupling, variance })
}

/// Relative residuals of the KKT conditions (Eq. 5) for one component, with
/// the scores defined by the third condition, `e^(q) = Phi_q w_q`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KktResiduals {
    /// `||sum_{p != q} w_p - (Q-2) w_q - Phi_q^T alpha^(q)||` over all `q`,
    /// relative to `||Phi_q^T alpha^(q)||` (first condition).
    pub stationarity: f64,
    /// `||(Q-1) gamma e^(q) - alpha^(q)||` over all `q`, relative to
    /// `||alpha||` (second condition).
    pub dual_scaling: f64,
}

/// KKT residuals (Eq. 5) of one component from features `Phi_q`
/// (`N_q x d_phi`), weights `w_q`, dual variables `alpha^(q)` and `gamma`.
///
/// Errors: fewer than 2 sources, shape mismatches, empty or non-finite
/// inputs, a non-finite `gamma`, and [`Error::Overflow`] when finite inputs
/// overflow the residuals.
pub fn kkt_residuals(features: &[DMatrix<f64>], weights: &[DVector<f64>], alphas: &[DVector<f64>], gamma: f64) -> Result<KktResiduals> {
    let n = features.len();
    if n < 2 {
        return Err(Error::TooFewSources(n));
    }
    check_shape("number of weight vectors vs sources", n, weights.len())?;
    check_shape("number of dual vectors vs sources", n, alphas.len())?;
    if !gamma.is_finite() {
        return Err(Error::InvalidParameter { name: "gamma", reason: format!("must be finite, got {gamma}") });
    }
    // All shapes before any arithmetic: the sum of the w_q needs one length.
    for q in 0..n {
        check_source_matrix("features", q, &features[q])?;
        finite_vector("w", q, &weights[q])?;
        finite_vector("alpha", q, &alphas[q])?;
        check_shape(format!("rows of Phi_{q} vs alpha^({q})"), features[q].nrows(), alphas[q].len())?;
        check_shape(format!("columns of Phi_{q} vs w_{q}"), features[q].ncols(), weights[q].len())?;
        check_shape(format!("length of w_{q} vs w_0"), weights[0].len(), weights[q].len())?;
    }
    let total: DVector<f64> = weights.iter().fold(DVector::zeros(weights[0].len()), |acc, w| acc + w);
    let (mut st_num, mut st_den, mut sc_num, mut sc_den) = (0.0, 0.0, 0.0, 0.0);
    for q in 0..n {
        let phi_t_alpha = matmul_tn(&features[q], &DMatrix::from_column_slice(alphas[q].len(), 1, alphas[q].as_slice()));
        let lhs = &total - &weights[q] - &weights[q] * (n as f64 - 2.0);
        st_num += (lhs - phi_t_alpha.column(0)).norm_squared();
        st_den += phi_t_alpha.norm_squared();
        let e = &features[q] * &weights[q];
        sc_num += (e * ((n as f64 - 1.0) * gamma) - &alphas[q]).norm_squared();
        sc_den += alphas[q].norm_squared();
    }
    let rel = |num: f64, den: f64| if den == 0.0 { num.sqrt() } else { (num / den).sqrt() };
    let (stationarity, dual_scaling) = (rel(st_num, st_den), rel(sc_num, sc_den));
    if !(stationarity.is_finite() && dual_scaling.is_finite()) {
        return Err(Error::Overflow { what: "KKT residuals", row: 0, col: 0 });
    }
    Ok(KktResiduals { stationarity, dual_scaling })
}

/// [`Error::NonFiniteSource`] at the first NaN/Inf entry of `v` (of source `q`).
fn finite_vector(what: &'static str, q: usize, v: &DVector<f64>) -> Result<()> {
    match v.iter().position(|x| !x.is_finite()) {
        Some(row) => Err(Error::NonFiniteSource { what, source_index: q, row, col: 0 }),
        None => Ok(()),
    }
}
