//! Settings shared by every PSD estimator and baseline, gathered in one
//! [`PsdSettings`] that each params type embeds: the Gaussian kernel's
//! width, the regularisation weights ([`Regularisation`]), the solver's
//! stopping rule ([`SolverOptions`]) and the centres of the model (every
//! sample, or a Nystrom subset).
//!
//! Each weight has one name and one meaning in every estimator:
//!
//! | weight | term | PSD models | baselines (App. D) |
//! |---|---|---|---|
//! | `linear` (`lambda_0`) | `lambda_0/2 ||w||^2` of the unconstrained linear part | heteroscedastic `eta`, the middle quantile | the same |
//! | `trace` (`lambda_1`) | `lambda_1 tr(A)` (`= ||A||_*` for `A >= 0`) of each PSD part | all three (Eq. 6) | none (must be 0) |
//! | `quadratic` (`lambda_2`, `lambda`) | squared norm of each non-negative part: `lambda_2/2 ||A||_F^2` (PSD) or `lambda/2 ||w||^2` (baselines) | all three (Eq. 6, 10-11) | all |
//!
//! A weight the estimator has no term for must be 0 (a non-zero value is an
//! [`Error::InvalidParameter`], not silently ignored).

use nalgebra::DMatrix;

use crate::kernel::Kernel;

use super::error::{check_nonnegative, check_positive};
use crate::error::Error;
use crate::precision::WorkingPrecision;
use crate::Device;

/// Regularisation weights of a PSD model or baseline (table in the module
/// docs). Built by name, starting from no penalty:
///
/// ```
/// use gramian::psd::{DensityParams, Regularisation};
/// use gramian::Kernel;
/// let params = DensityParams::new(Kernel::gaussian_with_width(0.5)?)?.regularisation(Regularisation::new().trace(1e-3).quadratic(1e-4));
/// assert_eq!(params.regularisation_weights().trace, 1e-3);
/// # Ok::<(), gramian::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Regularisation {
    /// `lambda_0`: `lambda_0/2 ||w||^2` on the linear part (regressions only).
    pub linear: f64,
    /// `lambda_1`: `lambda_1 tr(A)` on each PSD part (PSD models only).
    pub trace: f64,
    /// `lambda_2`: `lambda_2/2 ||A||_F^2` on each PSD part, or `lambda/2 ||w||^2`
    /// on each non-negative part of a baseline.
    pub quadratic: f64,
}

/// Which weights an estimator has terms for (internal; drives validation).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Terms {
    pub linear: bool,
    pub trace: bool,
}

impl Terms {
    /// PSD density: trace and quadratic.
    pub const DENSITY: Terms = Terms { linear: false, trace: true };
    /// PSD regressions: all three.
    pub const REGRESSION: Terms = Terms { linear: true, trace: true };
    /// Density baselines: quadratic only.
    pub const BASELINE_DENSITY: Terms = Terms { linear: false, trace: false };
    /// Regression baselines: linear and quadratic.
    pub const BASELINE_REGRESSION: Terms = Terms { linear: true, trace: false };
}

impl Regularisation {
    /// All weights zero (no penalty); set the ones the estimator uses.
    pub const fn new() -> Self {
        Regularisation { linear: 0.0, trace: 0.0, quadratic: 0.0 }
    }

    /// Sets `lambda_0` (linear part).
    pub const fn linear(mut self, lambda0: f64) -> Self {
        self.linear = lambda0;
        self
    }

    /// Sets `lambda_1` (trace of each PSD part).
    pub const fn trace(mut self, lambda1: f64) -> Self {
        self.trace = lambda1;
        self
    }

    /// Sets `lambda_2` (squared norm of each non-negative part).
    pub const fn quadratic(mut self, lambda2: f64) -> Self {
        self.quadratic = lambda2;
        self
    }

    /// Checks the weights against the terms an estimator has: `quadratic > 0`
    /// always (it makes the problem strongly convex), `linear > 0` where
    /// there is a linear part, `trace >= 0` where there are PSD parts, and
    /// exactly 0 for a term the estimator does not have.
    pub(crate) fn check(&self, terms: Terms) -> Result<(), Error> {
        let absent = |name: &'static str, v: f64| -> Result<(), Error> {
            if v != 0.0 {
                return Err(Error::InvalidParameter { name, reason: format!("this estimator has no such term; must be 0, got {v}") });
            }
            Ok(())
        };
        if terms.linear {
            check_positive("regularisation.linear (lambda_0)", self.linear)?;
        } else {
            absent("regularisation.linear (lambda_0)", self.linear)?;
        }
        if terms.trace {
            check_nonnegative("regularisation.trace (lambda_1)", self.trace)?;
        } else {
            absent("regularisation.trace (lambda_1)", self.trace)?;
        }
        check_positive("regularisation.quadratic (lambda_2)", self.quadratic)
    }
}

impl Default for Regularisation {
    /// [`Regularisation::new`]: no penalty.
    fn default() -> Self {
        Regularisation::new()
    }
}

/// Budget and tolerance of the dual solver.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SolverOptions {
    /// Stop when the duality gap is at most this (absolute, objective units).
    pub tolerance: f64,
    /// Iteration budget; exceeding it is [`Error::NotConverged`].
    pub max_iterations: usize,
    /// Evaluate the gap every this many iterations (default 10; the density
    /// estimator, whose gap checks are cheap, uses 2).
    pub check_every: usize,
}

impl Default for SolverOptions {
    fn default() -> Self {
        SolverOptions { tolerance: 1e-6, max_iterations: 20_000, check_every: 10 }
    }
}

impl SolverOptions {
    /// Validates the options.
    pub fn validate(&self) -> Result<(), Error> {
        check_positive("tolerance", self.tolerance)?;
        if self.max_iterations == 0 || self.check_every == 0 {
            return Err(Error::InvalidParameter { name: "max_iterations/check_every", reason: "must be >= 1".into() });
        }
        Ok(())
    }
}

/// Where the time of a fit went and how it converged.
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SolverReport {
    /// FISTA iterations.
    pub iterations: usize,
    /// Final duality gap.
    pub gap: f64,
    /// Primal objective at the returned model.
    pub primal: f64,
    /// `(iteration, gap)` at every check (`+inf` before the first feasible
    /// primal point; saved as `null`).
    #[cfg_attr(feature = "serde", serde(with = "crate::io::nonfinite::history"))]
    pub gap_history: Vec<(usize, f64)>,
    /// Seconds in kernel matrices, features and integrals (setup).
    pub seconds_setup: f64,
    /// Seconds in eigendecompositions.
    pub seconds_eigen: f64,
    /// Seconds forming `P diag(alpha) P^T` and the model values.
    pub seconds_products: f64,
    /// Total seconds of the fit.
    pub seconds_total: f64,
}

impl SolverOptions {
    /// Sets the stopping tolerance (duality gap for the PSD models; the
    /// projected-gradient residual for the Newton baselines).
    pub const fn tolerance(mut self, tolerance: f64) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// Sets the iteration budget (exceeding it is
    /// [`Error::NotConverged`]).
    pub const fn max_iterations(mut self, max_iterations: usize) -> Self {
        self.max_iterations = max_iterations;
        self
    }

    /// Sets how often the stopping test runs (PSD models; the Newton
    /// baselines test every iteration).
    pub const fn check_every(mut self, check_every: usize) -> Self {
        self.check_every = check_every;
        self
    }
}

/// The settings every PSD params type shares (module docs), validated
/// together by the params' own `validate`.
///
/// ```
/// use gramian::psd::{QuantileParams, Regularisation};
/// use gramian::Kernel;
/// let params = QuantileParams::new(Kernel::gaussian_with_width(0.5)?, &[0.1, 0.5, 0.9])?.nystrom(200, 7);
/// let settings = params.settings();
/// assert_eq!((settings.kernel_width(), settings.nystrom()), (0.5, Some((200, 7))));
/// assert_eq!(settings.regularisation(), Regularisation::new().linear(1e-3).trace(1e-3).quadratic(1e-4));
/// # Ok::<(), gramian::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PsdSettings {
    pub(crate) sigma: f64,
    pub(crate) regularisation: Regularisation,
    pub(crate) solver: SolverOptions,
    pub(crate) nystrom: Option<(usize, u64)>,
    pub(crate) precision: WorkingPrecision,
}

impl PsdSettings {
    /// Settings for the Gaussian `kernel`, with every sample a centre.
    ///
    /// Errors ([`Error::InvalidParameter`]): an invalid kernel (as
    /// [`Kernel::validate`]), any kernel but the Gaussian (`kernel`; the
    /// closed-form integrals and products of Prop. 4 and App. E need it), or
    /// a width that is not a finite positive number (`sigma`).
    pub(crate) fn new(kernel: &Kernel, regularisation: Regularisation, solver: SolverOptions) -> Result<Self, Error> {
        kernel.validate()?;
        let sigma = match kernel.gaussian_width() {
            Some(sigma) if sigma.is_finite() && sigma > 0.0 => sigma,
            Some(sigma) => return Err(Error::InvalidParameter { name: "sigma", reason: format!("the Gaussian kernel's width {sigma:e} is not a finite positive number") }),
            None => {
                return Err(Error::InvalidParameter {
                    name: "kernel",
                    reason: format!("PSD models and their baselines need the Gaussian kernel (closed-form integrals and products, Prop. 4); got {kernel:?}"),
                })
            }
        };
        Ok(PsdSettings { sigma, regularisation, solver, nystrom: None, precision: WorkingPrecision::Auto })
    }

    /// The width `sigma` of the Gaussian kernel ([`Kernel::gaussian_width`]).
    pub fn kernel_width(&self) -> f64 {
        self.sigma
    }

    /// The regularisation weights.
    pub fn regularisation(&self) -> Regularisation {
        self.regularisation
    }

    /// The solver's tolerance and budget.
    pub fn solver(&self) -> SolverOptions {
        self.solver
    }

    /// `Some((m, seed))` when the model lives on `m` Nystrom centres drawn
    /// with `seed` ([`crate::nystrom::landmark_indices`]); `None` when every
    /// sample is a centre.
    pub fn nystrom(&self) -> Option<(usize, u64)> {
        self.nystrom
    }

    /// The working precision set (see the `precision` builder of the
    /// params types).
    pub fn precision(&self) -> WorkingPrecision {
        self.precision
    }

    /// Checks the width, the weights against the terms the estimator has,
    /// the solver options, and the working precision: `F32` is
    /// [`Error::InvalidParameter`] (these models compute in `f64`).
    pub(crate) fn validate(&self, terms: Terms) -> Result<(), Error> {
        check_positive("sigma", self.sigma)?;
        self.regularisation.check(terms)?;
        self.solver.validate()?;
        if self.precision == WorkingPrecision::F32 {
            return Err(Error::InvalidParameter {
                name: "precision",
                reason: "PSD models and their baselines compute in f64 (the duality-gap certificate of the dual solvers, the Newton steps of the baselines and the closed-form integrals of Prop. 4 need the digits); float32 is not supported, use auto or float64".into(),
            });
        }
        Ok(())
    }

    /// The working precision against the fit's device: `F64` on a GPU
    /// without `SHADER_F64` is [`Error::Unsupported`]
    /// ([`Device::working_precision`]).
    pub(crate) fn check_device(&self, device: &Device) -> Result<(), Error> {
        device.working_precision(self.precision).map(|_| ())
    }

    /// The centres of the model: every row of `x`, or the `m` Nystrom rows
    /// drawn by [`crate::nystrom::landmark_indices`].
    pub(crate) fn centres(&self, x: &DMatrix<f64>) -> Result<DMatrix<f64>, Error> {
        Ok(match self.nystrom {
            None => x.clone(),
            Some((m, seed)) => x.select_rows(&crate::nystrom::landmark_indices(x.nrows(), m, seed)?),
        })
    }
}

/// The builders every PSD params type shares (field `settings:
/// PsdSettings`): `settings()`, `.regularisation(Regularisation)` with the
/// type's own doc (which weights it uses), `regularisation_weights()`, and
/// the kernel's width `kernel_width()`.
macro_rules! shared_builders {
    ($regularisation_doc:literal) => {
        /// The settings shared by every PSD params type: kernel width,
        /// regularisation, solver options, centres.
        pub fn settings(&self) -> &crate::psd::PsdSettings {
            &self.settings
        }

        /// The width `sigma` of the Gaussian kernel given to `new`
        /// ([`crate::Kernel::gaussian_width`]).
        pub fn kernel_width(&self) -> f64 {
            self.settings.sigma
        }

        #[doc = $regularisation_doc]
        pub fn regularisation(mut self, weights: crate::psd::Regularisation) -> Self {
            self.settings.regularisation = weights;
            self
        }

        /// The regularisation weights (see [`crate::psd::Regularisation`]).
        pub fn regularisation_weights(&self) -> crate::psd::Regularisation {
            self.settings.regularisation
        }

        /// The working precision ([`crate::WorkingPrecision`]). These models
        /// compute in `f64`: `Auto` (the default) uses `f64` on a GPU where
        /// the adapter has `SHADER_F64` and the host otherwise; `F64`
        /// requires it (a GPU without it is [`crate::Error::Unsupported`] at
        /// fit); `F32` is [`crate::Error::InvalidParameter`] from
        /// `validate` (the duality-gap certificate needs the digits). On
        /// the CPU the fit is `f64`.
        pub fn precision(mut self, precision: crate::WorkingPrecision) -> Self {
            self.settings.precision = precision;
            self
        }
    };
}
pub(crate) use shared_builders;

/// The builders of the PSD params types that fit on Nystrom centres:
/// `.solver(SolverOptions)` and `.nystrom(m, seed)` (the `m` centres drawn by
/// [`crate::nystrom::landmark_indices`]), each with the type's own doc.
macro_rules! solver_builders {
    ($solver_doc:literal, $nystrom_doc:literal) => {
        #[doc = $solver_doc]
        pub fn solver(mut self, options: crate::psd::SolverOptions) -> Self {
            self.settings.solver = options;
            self
        }

        #[doc = $nystrom_doc]
        pub fn nystrom(mut self, m: usize, seed: u64) -> Self {
            self.settings.nystrom = Some((m, seed));
            self
        }
    };
}
pub(crate) use solver_builders;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_an_estimator_lacks_must_be_zero() {
        let r = Regularisation::new().trace(1e-3).quadratic(1e-4);
        assert!(r.check(Terms::DENSITY).is_ok());
        assert!(r.check(Terms::REGRESSION).is_err(), "regressions need lambda_0 > 0");
        assert!(r.check(Terms::BASELINE_DENSITY).is_err(), "baselines have no trace term");
        assert!(r.linear(1e-3).check(Terms::REGRESSION).is_ok());
        assert!(Regularisation::new().quadratic(1e-3).check(Terms::BASELINE_DENSITY).is_ok());
        assert!(Regularisation::new().linear(1e-3).quadratic(1e-3).check(Terms::BASELINE_REGRESSION).is_ok());
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(Regularisation::new().trace(1e-3).quadratic(bad).check(Terms::DENSITY).is_err(), "{bad}");
        }
        assert!(Regularisation::new().trace(-1e-3).quadratic(1e-3).check(Terms::DENSITY).is_err());
    }
}
