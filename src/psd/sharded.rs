//! PSD models fitted on samples sharded over ranks ([`crate::distributed`]).
//!
//! The dual of Theorem 2 (Eq. 10) has one variable per sample and block,
//! and its large-`n` work is per sample: the features `p_i = Phi(x_i)`, the
//! dual variables `z_i` and the model values `f(x_i) = p_i^T A p_i` live on
//! the rank holding sample `i`. Everything else is a sum over samples and
//! is summed over the ranks ([`crate::distributed::Communicator::sum`]),
//! per evaluation of the dual at a point:
//! - `P diag(d) P^T` (`r x r`, the `M` of Eq. 10), one sum of `r^2` numbers
//!   where the engine's caches do not already hold it;
//! - `L*(z)`, `L(f)` (the duality gap's terms, Eq. 10-11, one sum of three
//!   numbers at each gap check) and FISTA's inner products of dual vectors;
//! - a few flags that keep the caches' decisions the same on every rank.
//!
//! The `r x r` work (the positive part `[M]_+`, the step sizes, the secant
//! on the multiplier `mu` of the integral constraint, Eq. 12) runs on every
//! rank on the same sums, so every rank takes the same branches and ends
//! with the same model. The Nystrom centres are the rows the single-process
//! fit draws ([`super::density::nystrom_indices`] over the global `n`),
//! fetched from their ranks; without Nystrom every sample is a centre and
//! every rank gathers all rows (the model is `n x n` then).
//!
//! Sums over the ranks add in rank order, so the fit is the single-process
//! fit up to the rounding of the partial sums (which changes with the
//! number of ranks, not from run to run).

use crate::device::Device;
use crate::distributed::{agree, Communicator, FitSharded, RowShard};
use crate::error::{Error, Result};

use super::density::{nystrom_indices, DensityParams, PsdDensity};

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
    /// ranks; [`Error::RankFailed`] on every rank when one rank's shard or
    /// local work fails (its rows' features on its device, a rank without
    /// rows); otherwise the errors of [`DensityParams::fit`], the same on
    /// every rank.
    fn fit_sharded(&self, device: &Device, comm: &dyn Communicator, data: &RowShard) -> Result<PsdDensity> {
        comm.check_same("PSD density parameters", &format!("{self:?}"))?;
        let start = std::time::Instant::now();
        let x = data.local();
        agree(
            comm,
            self.validate().and_then(|_| self.settings().check_device(device)).and_then(|_| self.base_measure_ref().check_dimension(data.ncols())).and_then(|_| {
                if x.nrows() == 0 {
                    return Err(Error::Empty { what: "this rank's rows of a sharded PSD fit", rows: 0, cols: x.ncols() });
                }
                Ok(())
            }),
        )?;
        let n = data.total_rows();
        let centres = match self.settings().nystrom() {
            Some((m, seed)) => data.rows(comm, &nystrom_indices(n, m, seed)?)?,
            None => data.gather(comm)?,
        };
        self.fit_rows(device, x, &centres, Some((comm, data.offset(), n)), start)
    }
}
