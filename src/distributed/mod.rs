//! Fits sharded over ranks: each rank holds a block of the samples' rows
//! and a device of its own, and the ranks together fit the model a single
//! process would fit on all rows.
//!
//! **Why this works.** The large-n work of every method is a sum over
//! samples or a per-sample map, with small results:
//! - PSD models: `P diag(z) P^T` (r x r) and the model values `p_i^T A p_i`
//!   are per-row work, reduced by one all-reduce of `r x r` numbers and the
//!   dual's scalars per evaluation;
//! - mklaren and incomplete Cholesky: the pivot is an arg-max over rows, the
//!   pivot's kernel column is built on every rank from one broadcast row,
//!   `G` is sharded by rows, and the inner products of the scoring and of
//!   least-angle regression are sums over rows;
//! - eKSVD: the Gram matrices of the Covariance solver are sums over rows;
//!   a product of the Dual solver's operator through the features is a sum
//!   over rows (`Phi_q^T V_q`) followed by a row-wise map, so each rank
//!   computes its rows of every product.
//!
//! A rank's share of an iteration is the single-device work on its rows
//! (on its own [`Device`]), followed by one reduction.
//!
//! **Communicators** ([`Communicator`]): MPI ([`Mpi`], feature `mpi`), the
//! threads of one process ([`ThreadGroup`], no MPI needed: tests, several
//! GPUs of one machine), or one process ([`SingleProcess`]). Sums add in
//! one fixed tree ([`Communicator::sum`]): the same bits on every rank and on
//! every run; a different number of ranks changes only the rounding of the
//! partial sums.
//!
//! **Failures.** Inputs that must agree (widths, kernels, parameters) are
//! compared before any work ([`Error::ShardMismatch`](crate::Error::ShardMismatch)); a rank whose
//! shard or device fails makes every rank return the same
//! [`Error::RankFailed`](crate::Error::RankFailed) ([`agree`]), never a hang.
//!
//! ```
//! use gramian::distributed::{Communicator, RowShard, ThreadGroup};
//! use nalgebra::DMatrix;
//!
//! let x = DMatrix::<f64>::from_fn(10, 2, |i, j| (i + j) as f64);
//! let sums = ThreadGroup::run(3, |comm| {
//!     let shard = RowShard::from_full(comm, &x)?; // rows 0..4, 4..7, 7..10
//!     let mut column_sums = [shard.local().column(0).sum(), shard.local().column(1).sum()];
//!     comm.sum(&mut column_sums)?;
//!     Ok::<_, gramian::Error>(column_sums)
//! })?;
//! assert!(sums.iter().all(|s| s.as_ref().unwrap() == &[45.0, 55.0]));
//! # Ok::<(), gramian::Error>(())
//! ```

mod communicator;
mod csv;
#[cfg(feature = "mpi")]
mod mpi;
mod rows;
mod shard;
mod threads;

pub use communicator::{agree, CommStats, Communicator, SingleProcess};
pub(crate) use communicator::{agreed, same_route};
#[cfg(feature = "mpi")]
pub use self::mpi::Mpi;
pub use rows::CommRows;
pub use shard::{gather_rows, gather_vector, local_vector, order_statistic, RowOutputs, RowPartition, RowShard, ShardedOutput, ShardedSupervised};
pub use threads::{ThreadGroup, ThreadRank};

use crate::device::Device;
use crate::error::Result;

/// Fitting on sharded data: the same parameters as [`Fit`](crate::estimator::Fit),
/// a [`Communicator`], and this rank's share of the data; every rank gets
/// the fitted model (the same object a single-process fit returns).
///
/// Collective: every rank calls it with the same parameters.
pub trait FitSharded<D: ?Sized> {
    /// The fitted model.
    type Fitted;
    /// Fits on the ranks' shards together, this rank's work on `device`.
    fn fit_sharded(&self, device: &Device, comm: &dyn Communicator, data: &D) -> Result<Self::Fitted>;
}
