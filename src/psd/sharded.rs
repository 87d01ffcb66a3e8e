//! PSD models fitted on samples sharded over ranks ([`crate::distributed`]):
//! the density (Eq. 12), heteroscedastic regression and non-crossing
//! quantile regression (Section 6), all through the dual engine of
//! [`super::engine`].
//!
//! The dual of Theorem 2 (Eq. 10) has one variable per sample and block,
//! and its large-`n` work is per sample: the features `p_i = Phi(x_i)`, the
//! dual variables `z_i` and the model values (`f(x_i) = p_i^T A p_i`, the
//! regressions' `theta`, `eta` and quantile curves) live on the rank
//! holding sample `i`. Everything else is a sum over samples and is summed
//! over the ranks ([`crate::distributed::Communicator::sum`]), per
//! evaluation of the dual at a point:
//! - `P diag(d_q) P^T` (`r x r`, the `M_q` of Eq. 10, one per PSD part) and
//!   for the regressions' linear part `P s` (`r`), one sum where the
//!   engine's caches do not already hold them;
//! - `L*(z)`, `L(u)` (the duality gap's terms, Eq. 10-11) and FISTA's
//!   inner products of dual vectors;
//! - a few flags that keep the caches' decisions the same on every rank.
//!
//! The losses are means over all `n` samples: a rank's terms carry the
//! weight `1/n` of all samples ([`super::engine::SampleTerms`]). The
//! `r x r` work (the positive parts `[M_q]_+`, the step sizes, the secant
//! on the multiplier `mu` of the density's integral constraint, Eq. 12)
//! runs on every rank on the same sums, so every rank takes the same
//! branches and ends with the same model. The Nystrom centres are the rows
//! the single-process fit draws ([`super::density::nystrom_indices`] over
//! the global `n`), fetched from their ranks; without Nystrom every sample
//! is a centre and every rank gathers all rows (the model is `n x n` then).
//!
//! What the regressions need of the targets before the solve is reduced
//! too: heteroscedastic regression standardises by the mean and standard
//! deviation of all targets (sums and a maximum over the ranks), quantile
//! regression centres by their median, the exact middle order statistic of
//! all targets ([`crate::distributed::order_statistic`]: a bisection on
//! the bits of `f64`, at most 64 sums of one count).
//!
//! Sums over the ranks add in one fixed order, so the fit is the single-process
//! fit up to the rounding of the partial sums (which changes with the
//! number of ranks, not from run to run). Every rank must hold rows: a rank
//! without rows fails every rank with [`Error::RankFailed`].

use std::time::Instant;

use nalgebra::DMatrix;

use crate::device::Device;
use crate::distributed::{agree, order_statistic, Communicator, FitSharded, RowShard, ShardedSupervised};
use crate::error::{Error, Result};

use super::density::{nystrom_indices, DensityParams, PsdDensity};
use super::heteroscedastic::{target_moments_over, HeteroscedasticParams, HeteroscedasticRegression};
use super::options::PsdSettings;
use super::regression::{QuantileParams, QuantileRegression};

/// The checks every sharded PSD fit starts with: the parameters are the
/// same on every rank (`what`, their `Debug` text; else
/// [`Error::ShardMismatch`]); then their own check `validation`, which
/// therefore fails alike on every rank and is returned as it is (e.g.
/// [`Error::InvalidParameter`]); then the checks of this rank's device and
/// shard `local` and its holding rows, agreed on (a failure on one rank,
/// [`Error::RankFailed`] on every rank). Collective.
fn check_start(comm: &dyn Communicator, what: &'static str, params: &dyn std::fmt::Debug, validation: Result<()>, local: Result<()>, x: &RowShard) -> Result<()> {
    comm.check_same(what, &format!("{params:?}"))?;
    validation?;
    let rows = x.local().nrows();
    agree(
        comm,
        local.and_then(|_| {
            if rows == 0 {
                return Err(Error::Empty { what: "this rank's rows of a sharded PSD fit", rows: 0, cols: x.ncols() });
            }
            Ok(())
        }),
    )
}

/// The centres of the model on every rank: the Nystrom rows one process
/// draws from all `n` rows, fetched from their ranks, or without Nystrom
/// all rows gathered. Collective.
fn centres(comm: &dyn Communicator, settings: &PsdSettings, x: &RowShard) -> Result<DMatrix<f64>> {
    match settings.nystrom() {
        Some((m, seed)) => x.rows(comm, &nystrom_indices(x.total_rows(), m, seed)?),
        None => x.gather(comm),
    }
}

impl FitSharded<RowShard> for DensityParams {
    type Fitted = PsdDensity;

    /// Fits the density (Eq. 12) to the rows of all ranks' shards; every
    /// rank returns the same model (its report's timings are its own).
    /// Collective.
    ///
    /// Per FISTA evaluation the ranks sum `P diag(alpha) P^T` (`r x r`) and
    /// a few scalars (module docs); the features of this rank's rows are
    /// computed and kept on `device` as in [`DensityParams::fit`] (`M` and
    /// `[M]_+` stay on the host).
    ///
    /// Errors: [`Error::ShardMismatch`] when the parameters differ between
    /// ranks; invalid parameters as in the single-process fit
    /// ([`Error::InvalidParameter`]), on every rank;
    /// [`Error::RankFailed`] on every rank when one rank's shard or
    /// local work fails (its rows' features on its device, a rank without
    /// rows); otherwise the errors of [`DensityParams::fit`], the same on
    /// every rank.
    fn fit_sharded(&self, device: &Device, comm: &dyn Communicator, data: &RowShard) -> Result<PsdDensity> {
        let start = Instant::now();
        check_start(comm, "PSD density parameters", self, self.validate(), self.settings().check_device(device).and_then(|_| self.base_measure_ref().check_dimension(data.ncols())), data)?;
        let centres = centres(comm, self.settings(), data)?;
        self.fit_rows(device, data.local(), &centres, Some((comm, data.offset(), data.total_rows())), start)
    }
}

impl FitSharded<ShardedSupervised> for HeteroscedasticParams {
    type Fitted = HeteroscedasticRegression;

    /// Fits `eta` and `theta` to the rows and targets of all ranks' shards;
    /// every rank returns the same model (its report's timings are its
    /// own). Collective.
    ///
    /// The targets are standardised by the mean and standard deviation of
    /// all targets (summed over the ranks); per FISTA evaluation the ranks
    /// sum `P diag(alpha) P^T` (`(r + 1) x (r + 1)`), `P beta` and a few
    /// scalars (module docs). The features of this rank's rows are computed
    /// on `device` and the iterations run on the host, as in
    /// [`HeteroscedasticParams::fit_xy`].
    ///
    /// Errors: [`Error::ShardMismatch`] when the parameters differ between
    /// ranks; invalid parameters as in the single-process fit
    /// ([`Error::InvalidParameter`]), on every rank;
    /// [`Error::RankFailed`] on every rank when one rank's shard or
    /// local work fails (its rows' features on its device, a rank without
    /// rows); otherwise the errors of [`HeteroscedasticParams::fit_xy`]
    /// (fewer than 2 samples, constant targets, not converged), the same on
    /// every rank.
    fn fit_sharded(&self, device: &Device, comm: &dyn Communicator, data: &ShardedSupervised) -> Result<HeteroscedasticRegression> {
        let x = data.x();
        check_start(comm, "PSD heteroscedastic parameters", self, self.validate(), self.settings().check_device(device), x)?;
        let n = x.total_rows();
        let moments = target_moments_over(comm, data.y(), n)?;
        let start = Instant::now();
        let centres = centres(comm, self.settings(), x)?;
        self.fit_rows(device, x.local(), data.y(), moments, centres, Some((comm, n)), start)
    }
}

impl FitSharded<ShardedSupervised> for QuantileParams {
    type Fitted = QuantileRegression;

    /// Fits the non-crossing quantile curves to the rows and targets of all
    /// ranks' shards; every rank returns the same model (its report's
    /// timings are its own). Collective.
    ///
    /// The targets are centred by the median of all targets (the exact
    /// order statistic the single process takes); per FISTA evaluation the
    /// ranks sum `P diag(d_q) P^T` for every gap's PSD part, `P s` and a
    /// few scalars (module docs). The features of this rank's rows are
    /// computed and kept on `device` as in [`QuantileParams::fit_xy`] (the
    /// `M_q` and `[M_q]_+` stay on the host).
    ///
    /// Errors: [`Error::ShardMismatch`] when the parameters differ between
    /// ranks; invalid parameters as in the single-process fit
    /// ([`Error::InvalidParameter`]), on every rank;
    /// [`Error::RankFailed`] on every rank when one rank's shard or
    /// local work fails (its rows' features on its device, a rank without
    /// rows); otherwise the errors of [`QuantileParams::fit_xy`], the same
    /// on every rank.
    fn fit_sharded(&self, device: &Device, comm: &dyn Communicator, data: &ShardedSupervised) -> Result<QuantileRegression> {
        let start = Instant::now();
        let x = data.x();
        check_start(comm, "PSD quantile parameters", self, self.validate(), self.settings().check_device(device), x)?;
        let n = x.total_rows();
        let offset = order_statistic(comm, data.y().as_slice(), n / 2)?;
        let centres = centres(comm, self.settings(), x)?;
        self.fit_rows(device, x.local(), data.y(), offset, centres, Some((comm, n)), start)
    }
}
