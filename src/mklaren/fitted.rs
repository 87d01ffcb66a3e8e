//! The fitted mklaren model: the selected columns of `H`, the factor
//! transforms of Eq. 21 and the LAR coefficients, and prediction
//! `mean(y) + H* beta` on new samples.

use faer::prelude::SolveLstsq;
use nalgebra::{DMatrix, DVector};

use super::icd::FactorTransform;
use super::columns::Rows;
use super::rows_per_kernel;
use crate::error::Error;
use crate::linalg::{faer_mut, faer_ref};
use crate::input::AsMatrix;
use crate::{Device, Kernel};

/// One column of the combined feature matrix `H`, in the order LAR chose it.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SelectedColumn {
    /// Index of the kernel.
    pub kernel: usize,
    /// Training sample used as pivot.
    pub pivot: usize,
    /// Index of the column within its kernel's Cholesky factor.
    pub position: usize,
    /// Training mean of the Cholesky column `g` (the centring `P`).
    pub mean: f64,
    /// `||P g||` on the training set.
    pub norm: f64,
    /// The sign `s` that makes `h^T r >= 0` when the column entered.
    pub sign: f64,
}

/// A fitted mklaren model.
///
/// Its methods compute on the device it was fitted on ([`OnDevice`](crate::estimator::OnDevice): a loaded model is on the CPU).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Mklaren {
    pub(super) kernels: Vec<Kernel>,
    pub(super) transforms: Vec<FactorTransform>,
    pub(super) selected: Vec<SelectedColumn>,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    pub(super) coefficients: DVector<f64>,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    pub(super) path: Vec<DVector<f64>>,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    pub(super) kernel_weights: DVector<f64>,
    pub(super) target_mean: f64,
    pub(super) scale: f64,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    pub(super) training_fit: DVector<f64>,
    /// Not saved: a loaded model is on the CPU.
    #[cfg_attr(feature = "serde", serde(skip, default = "crate::Device::cpu"))]
    pub(super) device: Device,
}

impl Mklaren {
    /// Total rank K (columns of `H`).
    pub fn rank(&self) -> usize {
        self.selected.len()
    }

    /// The kernels.
    pub fn kernels(&self) -> &[Kernel] {
        &self.kernels
    }

    /// The columns of `H` in the order they entered (kernel, pivot, centring).
    pub fn order(&self) -> &[SelectedColumn] {
        &self.selected
    }

    /// Regression coefficients `beta` on the columns of `H` (Eq. 18).
    pub fn coefficients(&self) -> &DVector<f64> {
        &self.coefficients
    }

    /// The LAR solution path: `beta` after each of the K steps (entries of
    /// columns not yet active are 0); the last equals [`Self::coefficients`].
    pub fn coefficient_path(&self) -> &[DVector<f64>] {
        &self.path
    }

    /// Kernel weights: the norm `||H_q beta_q||` of each kernel's
    /// contribution to the training fit.
    pub fn kernel_weights(&self) -> &DVector<f64> {
        &self.kernel_weights
    }

    /// The in-sample fit `mean(y) + mu` on the training samples.
    pub fn training_fit(&self) -> &DVector<f64> {
        &self.training_fit
    }

    /// The per-kernel out-of-sample transforms (Eq. 21).
    pub fn transforms(&self) -> &[FactorTransform] {
        &self.transforms
    }

    /// Predictions for new rows `x` of the shared input (every kernel on
    /// `x`; [`Mklaren::predict_inputs`] for one input per kernel). Sparse
    /// rows ([`AsMatrix::as_csr`]) are not densified: `K_q(*, A_q)` comes
    /// from sparse inner products on the CPU ([`FactorTransform::apply`]).
    pub fn predict(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<DVector<f64>, Error> {
        self.predict_inputs(&[x])
    }

    /// Predictions for new samples (same input layout as in `fit`): `G*_q =
    /// K_q(*, A_q) T_q` (Eq. 21), `H*` centred, normalised and signed as in
    /// training, `mean(y) + H* beta`. Kernel values are computed on the model's device.
    pub fn predict_inputs<X: AsMatrix<Elem = f64> + ?Sized>(&self, inputs: &[&X]) -> Result<DVector<f64>, Error> {
        self.predict_with(inputs, &self.coefficients)
    }

    /// Predictions with the coefficients after step `step` (0-based) of the path.
    pub fn predict_at_step<X: AsMatrix<Elem = f64> + ?Sized>(&self, inputs: &[&X], step: usize) -> Result<DVector<f64>, Error> {
        let beta = self.path.get(step).ok_or(crate::Error::IndexOutOfRange { what: "solution path", index: step, len: self.path.len() })?;
        self.predict_with(inputs, beta)
    }

    fn predict_with<X: AsMatrix<Elem = f64> + ?Sized>(&self, inputs: &[&X], beta: &DVector<f64>) -> Result<DVector<f64>, Error> {
        let device = &self.device;
        let converted = super::convert_inputs(inputs)?;
        let inputs: Vec<Rows<'_>> = converted.iter().map(|x| x.rows()).collect();
        let xs = rows_per_kernel(&self.kernels, &inputs, None)?;
        let t = xs[0].nrows();
        let mut out = DVector::from_element(t, self.target_mean);
        for (q, tr) in self.transforms.iter().enumerate() {
            if tr.pivot_rows().nrows() == 0 {
                continue;
            }
            let g = tr.apply_rows(device, xs[q])?;
            for (l, s) in self.selected.iter().enumerate().filter(|(_, s)| s.kernel == q) {
                let f = beta[l] * s.sign * self.scale / s.norm;
                for (o, v) in out.iter_mut().zip(g.column(s.position).iter()) {
                    *o += f * (v - s.mean);
                }
            }
        }
        Ok(crate::linalg::finite_vector("mklaren predictions", out)?)
    }
}

#[cfg(feature = "serde")]
impl crate::io::SavedModel for Mklaren {
    const KIND: &'static str = "mklaren";

    /// A consistent transform per kernel, with that kernel, and a weight per
    /// kernel; every selected column within its kernel's factor, with a
    /// finite mean, a sign of `+-1` and a norm that is a stored scale
    /// ([`crate::io::MIN_STORED_SCALE`]); a coefficient per column, in the
    /// model and at every step of the path; a positive scale; every number
    /// finite and within [`crate::io::MAX_STORED_MAGNITUDE`], and each
    /// column's weight `beta sign scale / norm` too.
    fn check_loaded(&self) -> Result<(), Error> {
        use crate::io::{ensure, ensure_bounded, ensure_scale};
        let p = self.kernels.len();
        ensure(p >= 1 && self.transforms.len() == p && self.kernel_weights.len() == p, || format!("{p} kernels, {} transforms, {} weights", self.transforms.len(), self.kernel_weights.len()))?;
        for (q, (t, k)) in self.transforms.iter().zip(&self.kernels).enumerate() {
            t.check_loaded(q)?;
            ensure(t.kernel() == *k, || format!("kernel {q}: the transform's kernel {:?} is not the model's {k:?}", t.kernel()))?;
        }
        let r = self.selected.len();
        ensure(self.coefficients.len() == r && self.path.iter().all(|b| b.len() == r), || format!("{r} selected columns, {} coefficients, path steps of {:?} coefficients", self.coefficients.len(), self.path.iter().map(|b| b.len()).collect::<Vec<_>>()))?;
        ensure_scale("scale", self.scale)?;
        for (l, c) in self.selected.iter().enumerate() {
            ensure(c.kernel < p && c.position < self.transforms[c.kernel].matrix().ncols(), || format!("selected column {l} (kernel {}, position {}) outside its kernel's factor", c.kernel, c.position))?;
            ensure(c.sign == 1.0 || c.sign == -1.0, || format!("selected column {l}: sign {} (must be 1 or -1)", c.sign))?;
            ensure_bounded(&format!("selected column {l}: mean"), [c.mean].iter())?;
            ensure_scale(&format!("selected column {l}: norm"), c.norm)?;
        }
        ensure_bounded("coefficients", self.coefficients.iter())?;
        for (s, b) in self.path.iter().enumerate() {
            ensure_bounded(&format!("path step {s}"), b.iter())?;
        }
        for b in std::iter::once(&self.coefficients).chain(&self.path) {
            ensure_bounded("column weights (beta sign scale / norm)", b.iter().zip(&self.selected).map(|(v, c)| v * c.sign * self.scale / c.norm).collect::<Vec<_>>().iter())?;
        }
        ensure_bounded("kernel weights", self.kernel_weights.iter())?;
        ensure_bounded("training fit", self.training_fit.iter())?;
        ensure_bounded("target mean", [self.target_mean].iter())
    }
}

crate::estimator::on_device!(Mklaren);

impl Mklaren {
    /// The fitted model from the end of the LAR path with `H` and `mu` on
    /// the host: the coefficients of Eq. 18 (`beta = R^{-1} Q^T mu` from the
    /// thin Householder QR of the augmented `H`, n + K rows, and the final
    /// fit `mu`), each kernel's weight `||H_q beta_q||` over the n training
    /// rows, and the training predictions.
    ///
    /// Errors: [`Error::Singular`] where the least-squares system has no finite
    /// solution.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn assemble(
        device: &Device,
        kernels: &[Kernel],
        transforms: Vec<super::icd::FactorTransform>,
        selected: Vec<SelectedColumn>,
        h: &DMatrix<f64>,
        fit: &DVector<f64>,
        path: Vec<DVector<f64>>,
        target_mean: f64,
        scale: f64,
    ) -> Result<Mklaren, Error> {
        let (aug, rank) = h.shape();
        let n = aug - rank;
        let mut rhs = DMatrix::from_column_slice(aug, 1, fit.as_slice());
        faer_ref(h).qr().solve_lstsq_in_place(faer_mut(&mut rhs));
        crate::linalg::clear_upper_simd_state(true);
        let coefficients = DVector::from_fn(rank, |i, _| rhs[(i, 0)]);
        let mut kernel_weights = DVector::<f64>::zeros(kernels.len());
        if coefficients.iter().all(|v| v.is_finite()) {
            for q in 0..kernels.len() {
                let mut contribution = DVector::<f64>::zeros(n);
                for (l, _) in selected.iter().enumerate().filter(|(_, s)| s.kernel == q) {
                    contribution.axpy(coefficients[l], &h.column(l).rows(0, n), 1.0);
                }
                kernel_weights[q] = contribution.norm();
            }
        }
        let parts = Assembled { transforms, selected, coefficients, kernel_weights, fit: fit.rows(0, n).into_owned(), path };
        Mklaren::from_parts(device, kernels, parts, target_mean, scale)
    }

    /// The fitted model from the coefficients of Eq. 18 and the kernel
    /// weights, however computed.
    ///
    /// Errors: [`Error::Singular`] where a coefficient or a fitted value is
    /// not finite.
    pub(super) fn from_parts(device: &Device, kernels: &[Kernel], parts: Assembled, target_mean: f64, scale: f64) -> Result<Mklaren, Error> {
        let Assembled { transforms, selected, coefficients, kernel_weights, fit, path } = parts;
        if coefficients.iter().chain(fit.iter()).any(|v| !v.is_finite()) {
            return Err(Error::Singular("least-squares system of the selected columns (Eq. 18) has no finite solution (degenerate LAR path)"));
        }
        let training_fit = fit.map(|v| v + target_mean);
        Ok(Mklaren { device: device.clone(),
            kernels: kernels.to_vec(),
            transforms,
            selected,
            coefficients,
            path,
            kernel_weights,
            target_mean,
            scale,
            training_fit,
        })
    }
}

/// What a fit hands to [`Mklaren::from_parts`].
pub(super) struct Assembled {
    /// Each kernel's map from inputs to its Cholesky columns.
    pub(super) transforms: Vec<super::icd::FactorTransform>,
    /// The selected columns, in the order taken.
    pub(super) selected: Vec<SelectedColumn>,
    /// `beta` of Eq. 18.
    pub(super) coefficients: DVector<f64>,
    /// `||H_q beta_q||` over the n training rows, per kernel.
    pub(super) kernel_weights: DVector<f64>,
    /// The final fit `mu` on the n training rows (centred).
    pub(super) fit: DVector<f64>,
    /// `beta` after each LAR step.
    pub(super) path: Vec<DVector<f64>>,
}
