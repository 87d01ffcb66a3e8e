//! Full-kernel baselines: kernel ridge regression on a weighted sum of kernel
//! matrices, weights uniform or from centred kernel alignment (Cortes, Mohri
//! & Rostamizadeh 2012).

use nalgebra::{DMatrix, DVector};

use crate::input::AsMatrix;
use crate::error::Error;
use super::{centred_target, check_lambda, inputs_per_kernel};
use crate::linalg::{faer_mut, faer_ref};
use crate::precision::WorkingPrecision;
use crate::{Device, Kernel};

/// How the kernel weights `mu` are chosen. With centred kernels
/// `K^c = P K P` and `a_q = <K_q^c, y y^T>_F = y^T K_q^c y`:
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum KernelCombination {
    /// `mu_q = 1`: the unweighted sum (`uniform`).
    Uniform,
    /// `mu_q ~ a_q / ||K_q^c||_F`: each kernel's own alignment with `y y^T` (`align`).
    Align,
    /// `mu = M^{-1} a / ||M^{-1} a||`, `M_kl = <K_k^c, K_l^c>_F` (`alignf`;
    /// `M^{-1}` is the pseudo-inverse when similar kernels make `M` singular).
    Alignf,
    /// `mu = v / ||v||`, `v = argmin_{v >= 0} v^T M v - 2 v^T a` (`alignfc`),
    /// solved by the Lawson-Hanson active-set method.
    Alignfc,
}

/// Parameters of kernel ridge regression on a combination of full kernels.
#[derive(Debug, Clone, PartialEq)]
pub struct FullKernelRidgeParams {
    kernels: Vec<Kernel>,
    combination: KernelCombination,
    lambda: f64,
    precision: WorkingPrecision,
}

impl FullKernelRidgeParams {
    /// `combination` of the kernels; `lambda = 1`.
    pub fn new(combination: KernelCombination) -> Self {
        FullKernelRidgeParams { kernels: Vec::new(), combination, lambda: 1.0, precision: WorkingPrecision::Auto }
    }

    /// The working precision of the kernel matrices on a GPU
    /// ([`Device::working_precision`]): `Auto` builds them with the
    /// host-matrix [`Device::kernel_matrix_symmetric`] (`f32` inside), an
    /// explicit precision from the inputs resident in it (`F64` on an
    /// adapter without `SHADER_F64` is [`Error::Unsupported`] at fit). The
    /// weights and the Cholesky solve are `f64` on the host, and on the CPU
    /// the whole fit is `f64`, whatever the setting.
    pub fn precision(mut self, precision: WorkingPrecision) -> Self {
        self.precision = precision;
        self
    }

    /// The working precision set ([`FullKernelRidgeParams::precision`]).
    pub fn precision_setting(&self) -> WorkingPrecision {
        self.precision
    }

    /// The kernels `k_1 .. k_p` (at least one; checked at fit), each on
    /// the shared input or on its own input ([`FullKernelRidgeParams::fit_inputs`]).
    pub fn kernels(mut self, kernels: &[Kernel]) -> Self {
        self.kernels = kernels.to_vec();
        self
    }

    /// The kernels.
    pub fn kernel_list(&self) -> &[Kernel] {
        &self.kernels
    }

    /// Ridge parameter `lambda >= 0` of `(K_mu + lambda I) alpha = y`.
    pub fn lambda(mut self, lambda: f64) -> Self {
        self.lambda = lambda;
        self
    }

    /// Checks the parameters (the data are checked by `fit`); `fit` calls it
    /// first.
    ///
    /// Errors, [`Error::InvalidParameter`] unless noted: no kernel, an
    /// invalid kernel (the error of [`Kernel::validate`]), a `lambda` not
    /// finite and `>= 0`.
    pub fn validate(&self) -> Result<(), Error> {
        super::check_kernels(&self.kernels)?;
        check_lambda(self.lambda)
    }

    /// Fits on `data`: every kernel on the shared input `data.x`, target
    /// `data.y` ([`FullKernelRidgeParams::fit_inputs`] for one input per kernel).
    pub fn fit(&self, device: &Device, data: &crate::estimator::Supervised) -> Result<FullKernelRidge, Error> {
        self.fit_inputs(device, &[&data.x], &data.y)
    }

    /// Builds every kernel matrix on `device` (O(p n^2) memory), computes the
    /// weights `mu` (rescaled so that `sum |mu_q| = p`, which leaves the
    /// uniform sum unchanged and keeps `lambda` comparable), and solves
    /// `(sum_q mu_q K_q + lambda I) alpha = y - mean(y)` by Cholesky (by
    /// pivoted LBL^T when negative alignf weights make it indefinite).
    ///
    /// Errors: lambda < 0, inputs that disagree on n, NaN/Inf, constant
    /// target, [`Error::Singular`] when the system is not positive
    /// definite (e.g. `lambda = 0` on a rank-deficient kernel sum) or, with
    /// negative alignf weights, singular.
    pub fn fit_inputs(&self, device: &Device, inputs: &[&DMatrix<f64>], y: &DVector<f64>) -> Result<FullKernelRidge, Error> {
        self.validate()?;
        let kernels: &[Kernel] = &self.kernels;
        let xs = inputs_per_kernel(kernels, inputs, None)?;
        let n = xs[0].nrows();
        let (yc, target_mean) = centred_target(y, n)?;
        // One n x n matrix per kernel, their centred copies (alignment) and the system.
        let squares = kernels.len().saturating_mul(2).saturating_add(1);
        crate::memory::check_host::<f64>(crate::memory::entries(n, n, "full-kernel ridge")?.saturating_mul(squares), "full-kernel ridge (kernel matrices and system)")?;
        device.working_precision(self.precision)?;
        let matrices: Vec<DMatrix<f64>> = kernels
            .iter()
            .zip(&xs)
            .map(|(k, x)| match self.precision {
                WorkingPrecision::Auto => device.kernel_matrix_symmetric(k, x),
                setting => device.kernel_matrix_in(k, x, x, setting).map(|m| (&m + m.transpose()) * 0.5),
            })
            .collect::<Result<_, _>>()?;
        let mut weights = alignment_weights(self.combination, &matrices, &yc)?;
        let total: f64 = weights.iter().map(|w| w.abs()).sum();
        if !(total > 0.0) {
            return Err(Error::Singular("all kernel weights are zero"));
        }
        weights *= kernels.len() as f64 / total;
        let mut system = DMatrix::<f64>::zeros(n, n);
        for (w, k) in weights.iter().zip(&matrices) {
            system += k * *w;
        }
        for i in 0..n {
            system[(i, i)] += self.lambda;
        }
        let mut alpha = DMatrix::from_column_slice(n, 1, yc.as_slice());
        match faer_ref(&system).llt(faer::Side::Lower) {
            Ok(llt) => faer::prelude::Solve::solve_in_place(&llt, faer_mut(&mut alpha)),
            // Negative alignf weights can make the combination indefinite:
            // the system is still solvable, by symmetric pivoted LBL^T.
            Err(_) if weights.iter().any(|&w| w < 0.0) => {
                faer::prelude::Solve::solve_in_place(&faer_ref(&system).lblt(faer::Side::Lower), faer_mut(&mut alpha));
                let residual = (&system * &alpha - DMatrix::from_column_slice(n, 1, yc.as_slice())).norm();
                if !(residual <= 1e-8 * yc.norm()) {
                    return Err(Error::Singular("K_mu + lambda I (indefinite alignf combination) is singular"));
                }
            }
            Err(_) => return Err(Error::Singular("K_mu + lambda I is not positive definite")),
        }
        crate::linalg::clear_upper_simd_state(true);
        let dual = alpha.column(0).into_owned();
        Ok(FullKernelRidge { device: device.clone(), kernels: kernels.to_vec(), training_inputs: xs.iter().map(|x| (*x).clone()).collect(), weights, dual, target_mean })
    }
}

/// Kernel weights (before the rescaling) for `combination`.
pub(crate) fn alignment_weights(combination: KernelCombination, matrices: &[DMatrix<f64>], y: &DVector<f64>) -> Result<DVector<f64>, Error> {
    let p = matrices.len();
    if combination == KernelCombination::Uniform {
        return Ok(DVector::from_element(p, 1.0));
    }
    let centred: Vec<DMatrix<f64>> = matrices.iter().map(centre_kernel).collect();
    let a = DVector::from_fn(p, |q, _| (&centred[q] * y).dot(y));
    let mut m = DMatrix::<f64>::zeros(p, p);
    for k in 0..p {
        for l in 0..=k {
            let v = centred[k].dot(&centred[l]);
            m[(k, l)] = v;
            m[(l, k)] = v;
        }
    }
    let mu = match combination {
        KernelCombination::Uniform => unreachable!("handled above"),
        KernelCombination::Align => DVector::from_fn(p, |q, _| if m[(q, q)] > 0.0 { a[q] / m[(q, q)].sqrt() } else { 0.0 }),
        KernelCombination::Alignf => pseudo_inverse_solve(&m, &a)?,
        KernelCombination::Alignfc => nonnegative_quadratic(&m, &a)?,
    };
    let norm = mu.norm();
    if !(norm > 0.0 && norm.is_finite()) {
        return Err(Error::Singular("kernel weights are zero (no kernel is aligned with y)"));
    }
    Ok(mu / norm)
}

/// `M^+ a` with eigenvalues of `M` below `1e-12 max` dropped.
fn pseudo_inverse_solve(m: &DMatrix<f64>, a: &DVector<f64>) -> Result<DVector<f64>, Error> {
    let eig = crate::linalg::symmetric_eigen(m)?;
    let top = eig.eigenvalues.amax();
    let mut out = DVector::<f64>::zeros(a.len());
    for (t, &s) in eig.eigenvalues.iter().enumerate() {
        if s > 1e-12 * top {
            let u = eig.eigenvectors.column(t);
            out.axpy(u.dot(a) / s, &u, 1.0);
        }
    }
    Ok(out)
}

/// `P K P` with `P = I - 1 1^T / n`.
pub(crate) fn centre_kernel(k: &DMatrix<f64>) -> DMatrix<f64> {
    let n = k.nrows() as f64;
    let row_means = DVector::from_fn(k.nrows(), |i, _| k.row(i).sum() / n);
    let total = row_means.sum() / n;
    DMatrix::from_fn(k.nrows(), k.ncols(), |i, j| k[(i, j)] - row_means[i] - row_means[j] + total)
}

/// `argmin_{v >= 0} v^T M v - 2 v^T a` by the active-set method of Lawson
/// & Hanson (`M` positive semidefinite, p small); the result satisfies the
/// KKT conditions `(M v - a)_q = 0` where `v_q > 0` and `>= 0` where `v_q = 0`.
pub(crate) fn nonnegative_quadratic(m: &DMatrix<f64>, a: &DVector<f64>) -> Result<DVector<f64>, Error> {
    let p = a.len();
    if (0..p).any(|q| !(m[(q, q)] > 0.0)) {
        return Err(Error::Singular("alignment matrix M has a zero diagonal entry"));
    }
    let tol = 1e-12 * (m.amax() + a.amax());
    let mut v = DVector::<f64>::zeros(p);
    let mut free = vec![false; p];
    // Solution of the equality-constrained problem on the free set.
    let solve_free = |free: &[bool]| -> Result<DVector<f64>, Error> {
        let idx: Vec<usize> = (0..p).filter(|&q| free[q]).collect();
        let sub = DMatrix::from_fn(idx.len(), idx.len(), |i, j| m[(idx[i], idx[j])]);
        let rhs = DVector::from_fn(idx.len(), |i, _| a[idx[i]]);
        let sol = pseudo_inverse_solve(&sub, &rhs)?;
        let mut out = DVector::<f64>::zeros(p);
        for (i, &q) in idx.iter().enumerate() {
            out[q] = sol[i];
        }
        Ok(out)
    };
    for _ in 0..10 * p + 10 {
        let w = a - m * &v;
        let Some(enter) = (0..p).filter(|&q| !free[q] && w[q] > tol).max_by(|&x, &y| w[x].total_cmp(&w[y])) else {
            return Ok(v);
        };
        free[enter] = true;
        loop {
            let s = solve_free(&free)?;
            if (0..p).filter(|&q| free[q]).all(|q| s[q] > tol) {
                v = s;
                break;
            }
            let mut alpha = 1.0f64;
            for q in (0..p).filter(|&q| free[q] && s[q] <= tol) {
                alpha = alpha.min(v[q] / (v[q] - s[q]));
            }
            v += (s - &v) * alpha;
            for q in 0..p {
                if free[q] && v[q] <= tol {
                    free[q] = false;
                    v[q] = 0.0;
                }
            }
        }
    }
    Ok(v)
}

/// A fitted kernel ridge regression on a kernel combination.
///
/// Its methods compute on the device it was fitted on ([`OnDevice`](crate::estimator::OnDevice): a loaded model is on the CPU).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct FullKernelRidge {
    kernels: Vec<Kernel>,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    training_inputs: Vec<DMatrix<f64>>,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    weights: DVector<f64>,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    dual: DVector<f64>,
    target_mean: f64,
    /// Not saved: a loaded model is on the CPU.
    #[cfg_attr(feature = "serde", serde(skip, default = "crate::Device::cpu"))]
    device: Device,
}

impl FullKernelRidge {
    /// Kernel weights `mu` (rescaled to `sum |mu_q| = p`).
    pub fn weights(&self) -> &DVector<f64> {
        &self.weights
    }

    /// Dual coefficients `alpha`.
    pub fn dual_coefficients(&self) -> &DVector<f64> {
        &self.dual
    }

    /// Predictions for new rows `x` of the shared input (every kernel on
    /// `x`; [`FullKernelRidge::predict_inputs`] for one input per kernel).
    pub fn predict(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<DVector<f64>, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        self.predict_inputs(&[x])
    }

    /// Predictions `mean(y) + sum_q mu_q K_q(X*, X) alpha`, each product
    /// `K_q(X*, X) alpha` computed on the model's device without storing `K_q(X*, X)`.
    pub fn predict_inputs(&self, inputs: &[&DMatrix<f64>]) -> Result<DVector<f64>, Error> {
        let device = &self.device;
        let xs = inputs_per_kernel(&self.kernels, inputs, None)?;
        let alpha = DMatrix::from_column_slice(self.dual.len(), 1, self.dual.as_slice());
        let mut out = DVector::from_element(xs[0].nrows(), self.target_mean);
        for (q, kernel) in self.kernels.iter().enumerate() {
            let train = if self.training_inputs.len() == 1 { &self.training_inputs[0] } else { &self.training_inputs[q] };
            let kv = device.kernel_matvec(kernel, xs[q], train, &alpha)?;
            out.axpy(self.weights[q], &kv.column(0), 1.0);
        }
        Ok(crate::linalg::finite_vector("kernel ridge predictions", out)?)
    }
}

#[cfg(feature = "serde")]
impl crate::io::SavedModel for FullKernelRidge {
    const KIND: &'static str = "full-kernel-ridge";

    /// A training input (of `n >= 1` rows, the dual's length, and at least
    /// one column) and a weight per kernel; valid kernels; every number
    /// finite and within [`crate::io::MAX_STORED_MAGNITUDE`].
    fn check_loaded(&self) -> Result<(), Error> {
        use crate::io::{ensure, ensure_bounded, ensure_kernel};
        let (p, n) = (self.kernels.len(), self.dual.len());
        ensure(p >= 1 && self.training_inputs.len() == p && self.weights.len() == p, || format!("{p} kernels, {} inputs, {} weights", self.training_inputs.len(), self.weights.len()))?;
        ensure(n >= 1, || "no dual coefficients".into())?;
        for (q, (x, k)) in self.training_inputs.iter().zip(&self.kernels).enumerate() {
            ensure_kernel(&format!("kernel {q}"), k)?;
            ensure(x.nrows() == n && x.ncols() >= 1, || format!("kernel {q}: a training input of {:?} for {n} dual coefficients", x.shape()))?;
            ensure_bounded(&format!("kernel {q}: training input"), x.iter())?;
        }
        ensure_bounded("kernel weights", self.weights.iter())?;
        ensure_bounded("dual coefficients", self.dual.iter())?;
        ensure_bounded("target mean", [self.target_mean].iter())
    }
}

crate::estimator::on_device!(FullKernelRidge);

#[cfg(test)]
mod tests {
    use super::*;

    fn psd(p: usize, seed: u64) -> DMatrix<f64> {
        use rand::{rngs::StdRng, Rng, SeedableRng};
        let mut rng = StdRng::seed_from_u64(seed);
        let b = DMatrix::from_fn(p, p + 2, |_, _| rng.random_range(-1.0..1.0));
        &b * b.transpose()
    }

    #[test]
    fn nonnegative_quadratic_satisfies_kkt() {
        let m = psd(5, 4);
        let a = DVector::from_fn(5, |i, _| (i as f64 * 1.3).cos());
        assert!(m.clone().cholesky().is_some());
        let v = nonnegative_quadratic(&m, &a).unwrap();
        let grad = &m * &v - &a;
        let mut at_bound = 0;
        for q in 0..5 {
            assert!(v[q] >= 0.0);
            if v[q] > 1e-12 {
                assert!(grad[q].abs() < 1e-8, "free coordinate {q}: gradient {}", grad[q]);
            } else {
                assert!(grad[q] > -1e-8, "bound coordinate {q}: gradient {}", grad[q]);
                at_bound += 1;
            }
        }
        assert!(at_bound > 0 && at_bound < 5, "the example should have an active bound ({at_bound})");
    }

    #[test]
    fn alignf_weights_solve_the_alignment_system() {
        let n = 12;
        let x = DMatrix::from_fn(n, 2, |i, j| ((i * 5 + j) as f64 * 0.7).sin());
        let y = DVector::from_fn(n, |i, _| (i as f64 * 0.9).cos());
        let y = y.add_scalar(-y.mean());
        let ks: Vec<DMatrix<f64>> = [0.3, 1.0, 3.0].iter().map(|&g| crate::kernel::kernel_matrix_cpu(&Kernel::rbf(g).unwrap(), &x, &x).unwrap()).collect();
        let centred: Vec<DMatrix<f64>> = ks.iter().map(centre_kernel).collect();
        for c in &centred {
            assert!(c.row_sum().amax() < 1e-12 && c.column_sum().amax() < 1e-12);
        }
        let mu = alignment_weights(KernelCombination::Alignf, &ks, &y).unwrap();
        let m = DMatrix::from_fn(3, 3, |k, l| centred[k].dot(&centred[l]));
        let a = DVector::from_fn(3, |q, _| (&centred[q] * &y).dot(&y));
        let lhs = &m * &mu;
        let ratio = lhs.dot(&a) / a.norm_squared();
        assert!((lhs - &a * ratio).norm() < 1e-8 * a.norm() * ratio.abs(), "M mu must be parallel to a");
        assert!((mu.norm() - 1.0).abs() < 1e-12);
    }
}
