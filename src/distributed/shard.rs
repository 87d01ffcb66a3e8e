//! Row-sharded data: each rank holds a block of consecutive rows of the
//! samples, and every rank knows every block's size ([`RowPartition`]).

use std::ops::Range;

use nalgebra::{DMatrix, DVector};

use super::communicator::{agree, segment, Communicator};
use crate::error::{Error, Result};
use crate::input::{AsMatrix, AsVector};
use crate::linalg::check_matrix;

/// How `n` rows are split over the ranks: rank `r` holds global rows
/// `offset(r) .. offset(r) + rows(r)`, in rank order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowPartition {
    offsets: Vec<usize>,
}

impl RowPartition {
    /// `n` rows in `parts` nearly equal blocks (the first `n % parts` one row longer).
    ///
    /// Errors: [`Error::InvalidParameter`] for `parts == 0`.
    pub fn even(n: usize, parts: usize) -> Result<Self> {
        if parts == 0 {
            return Err(Error::InvalidParameter { name: "parts", reason: "at least one part".into() });
        }
        let mut offsets: Vec<usize> = (0..parts).map(|r| segment(n, parts, r).start).collect();
        offsets.push(n);
        Ok(RowPartition { offsets })
    }

    /// The partition with these block sizes, in rank order.
    ///
    /// Errors: [`Error::ShapeOverflow`] when the total overflows `usize`.
    pub fn from_counts(counts: &[usize]) -> Result<Self> {
        let mut offsets = Vec::with_capacity(counts.len() + 1);
        let mut at = 0usize;
        offsets.push(0);
        for &c in counts {
            at = at.checked_add(c).ok_or(Error::ShapeOverflow { what: "rows over the ranks", rows: counts.len(), cols: 1 })?;
            offsets.push(at);
        }
        Ok(RowPartition { offsets })
    }

    /// Every rank's `rows` gathered: the partition of the rows the ranks hold.
    pub fn gather(comm: &dyn Communicator, rows: usize) -> Result<Self> {
        Self::from_counts(&comm.gather_counts(rows)?)
    }

    /// Number of ranks.
    pub fn parts(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Total number of rows.
    pub fn total(&self) -> usize {
        *self.offsets.last().expect("at least the 0 offset")
    }

    /// Global rows of rank `r`.
    pub fn range(&self, r: usize) -> Range<usize> {
        self.offsets[r]..self.offsets[r + 1]
    }

    /// Block sizes in rank order.
    pub fn counts(&self) -> Vec<usize> {
        self.offsets.windows(2).map(|w| w[1] - w[0]).collect()
    }

    /// The rank holding global row `row` and the row's index there.
    pub fn owner(&self, row: usize) -> Option<(usize, usize)> {
        if row >= self.total() {
            return None;
        }
        // The last block starting at or before `row` that is not empty.
        let r = self.offsets.partition_point(|&o| o <= row) - 1;
        Some((r, row - self.offsets[r]))
    }
}

/// A rank's block of rows of an `n x d` sample matrix, with the partition
/// of all rows over the ranks (the same object on every rank).
#[derive(Debug, Clone, PartialEq)]
pub struct RowShard {
    local: DMatrix<f64>,
    partition: RowPartition,
    rank: usize,
}

impl RowShard {
    /// This rank's rows. Collective: the ranks check that every block is
    /// finite (a bad block fails every rank with [`Error::RankFailed`]) and
    /// exchange their shapes (ranks holding rows must agree on the number
    /// of columns, else [`Error::ShardMismatch`] naming the first rank that
    /// differs from the first holding rows). A rank may hold no rows; the
    /// whole must have some ([`Error::Empty`]).
    pub fn new(comm: &dyn Communicator, local: impl AsMatrix) -> Result<Self> {
        let local = agree(comm, local.into_f64_matrix().and_then(|m| {
            if m.nrows() > 0 {
                check_matrix("x", &m)?;
            }
            Ok(m)
        }))?;
        let p = comm.size();
        let shapes = comm.all_gather_varcount(&[local.nrows() as f64, local.ncols() as f64], &vec![2; p])?;
        // Ranks without rows may not know the width.
        let holding: Vec<usize> = (0..p).filter(|&r| shapes[2 * r] > 0.0).collect();
        let Some(&first) = holding.first() else {
            return Err(Error::Empty { what: "sharded x", rows: 0, cols: local.ncols() });
        };
        let width = shapes[2 * first + 1] as usize;
        if let Some(&rank) = holding.iter().find(|&&r| shapes[2 * r + 1] as usize != width) {
            return Err(Error::ShardMismatch { what: "the number of columns", rank });
        }
        if width == 0 {
            return Err(Error::Empty { what: "sharded x", rows: 0, cols: 0 });
        }
        let local = if local.nrows() == 0 { DMatrix::zeros(0, width) } else { local };
        let partition = RowPartition::from_counts(&(0..p).map(|r| shapes[2 * r] as usize).collect::<Vec<_>>())?;
        Ok(RowShard { local, partition, rank: comm.rank() })
    }

    /// This rank's even block of a matrix every rank holds in full (tests,
    /// examples, data small enough to read everywhere). Not collective.
    pub fn from_full(comm: &dyn Communicator, full: impl AsMatrix) -> Result<Self> {
        let full = full.into_f64_matrix()?;
        check_matrix("x", &full)?;
        let partition = RowPartition::even(full.nrows(), comm.size())?;
        let rows = partition.range(comm.rank());
        let local = full.rows(rows.start, rows.len()).into_owned();
        Ok(RowShard { local, partition, rank: comm.rank() })
    }

    /// This rank's rows.
    pub fn local(&self) -> &DMatrix<f64> {
        &self.local
    }

    /// How the rows are split over the ranks.
    pub fn partition(&self) -> &RowPartition {
        &self.partition
    }

    /// The global index of this rank's first row.
    pub fn offset(&self) -> usize {
        self.partition.range(self.rank).start
    }

    /// Rows over all ranks.
    pub fn total_rows(&self) -> usize {
        self.partition.total()
    }

    /// Number of columns.
    pub fn ncols(&self) -> usize {
        self.local.ncols()
    }

    /// Global row `row` (held by one rank) on every rank. Collective.
    pub fn row(&self, comm: &dyn Communicator, row: usize) -> Result<DVector<f64>> {
        let (owner, local) = self.partition.owner(row).ok_or(Error::IndexOutOfRange { what: "sharded rows", index: row, len: self.total_rows() })?;
        let mut v: Vec<f64> = if owner == self.rank { self.local.row(local).iter().copied().collect() } else { vec![0.0; self.ncols()] };
        comm.broadcast(owner, &mut v)?;
        Ok(DVector::from_vec(v))
    }

    /// The global rows `rows` (any order, each held by one rank), on every
    /// rank, as a `rows.len() x d` matrix. Collective.
    pub fn rows(&self, comm: &dyn Communicator, rows: &[usize]) -> Result<DMatrix<f64>> {
        let d = self.ncols();
        let mut out = DMatrix::zeros(rows.len(), d);
        let mut mine = vec![0.0; rows.len() * d];
        for (k, &row) in rows.iter().enumerate() {
            let (owner, local) = self.partition.owner(row).ok_or(Error::IndexOutOfRange { what: "sharded rows", index: row, len: self.total_rows() })?;
            if owner == self.rank {
                for j in 0..d {
                    mine[k * d + j] = self.local[(local, j)];
                }
            }
        }
        // Each row is non-zero on its owner only: the sum is exact.
        comm.sum(&mut mine)?;
        for k in 0..rows.len() {
            for j in 0..d {
                out[(k, j)] = mine[k * d + j];
            }
        }
        Ok(out)
    }

    /// All rows on every rank (`n x d`). Collective.
    pub fn gather(&self, comm: &dyn Communicator) -> Result<DMatrix<f64>> {
        gather_rows(comm, &self.partition, &self.local)
    }

    /// A fitted model's per-row outputs on these (test) rows: each rank
    /// calls `predict` on its own rows only (`predict` is the model's
    /// prediction, e.g. `|x| model.predict(x)`: every rank holds the same
    /// model after a sharded fit); a rank without rows does not call it.
    /// [`ShardedOutput::gather`] or [`ShardedOutput::gather_vector`] brings
    /// all rows to every rank on request.
    ///
    /// Collective: when `predict` fails on one rank, every rank returns
    /// [`Error::RankFailed`] ([`agree`]); ranks whose outputs differ in
    /// width are [`Error::ShardMismatch`].
    pub fn predict<T: RowOutputs>(&self, comm: &dyn Communicator, predict: impl FnOnce(&DMatrix<f64>) -> Result<T>) -> Result<ShardedOutput> {
        let rows = self.local.nrows();
        let local = if rows == 0 {
            Ok(None)
        } else {
            predict(&self.local).map(|t| t.into_rows()).and_then(|m| {
                if m.nrows() != rows {
                    return Err(Error::DimensionMismatch { what: "rows of a prediction vs this rank's rows", expected: rows, found: m.nrows() });
                }
                Ok(Some(m))
            })
        };
        let local = agree(comm, local)?;
        // The width of the ranks that predicted; a rank without rows takes it.
        let width = local.as_ref().map_or(0, |m| m.ncols());
        let p = comm.size();
        let widths = comm.all_gather_varcount(&[if local.is_some() { width as f64 } else { -1.0 }], &vec![1; p])?;
        let first = widths.iter().copied().find(|&w| w >= 0.0).unwrap_or(0.0);
        if let Some(rank) = widths.iter().position(|&w| w >= 0.0 && w != first) {
            return Err(Error::ShardMismatch { what: "the width of a prediction", rank });
        }
        let local = local.unwrap_or_else(|| DMatrix::zeros(0, first as usize));
        Ok(ShardedOutput { local, partition: self.partition.clone() })
    }
}

/// A rank's block of a vector sharded like the rows of a [`RowShard`]
/// (targets, weights): checked against the shard's partition.
pub fn local_vector(comm: &dyn Communicator, shard: &RowShard, local: impl AsVector) -> Result<DVector<f64>> {
    let v = local.into_f64_vector().and_then(|v| {
        if v.len() != shard.local().nrows() {
            return Err(Error::DimensionMismatch { what: "this rank's targets", expected: shard.local().nrows(), found: v.len() });
        }
        if let Some(i) = v.iter().position(|x| !x.is_finite()) {
            return Err(Error::NonFinite { what: "y", row: shard.offset() + i, col: 0 });
        }
        Ok(v)
    });
    agree(comm, v)
}

/// Every rank's local vector concatenated in rank order, on every rank.
pub fn gather_vector(comm: &dyn Communicator, partition: &RowPartition, local: &[f64]) -> Result<DVector<f64>> {
    Ok(DVector::from_vec(comm.all_gather_varcount(local, &partition.counts())?))
}

/// Every rank's local rows (`rows(r) x width`, the same width on every
/// rank) stacked in rank order, on every rank: `partition.total() x width`.
/// Collective.
pub fn gather_rows(comm: &dyn Communicator, partition: &RowPartition, local: &DMatrix<f64>) -> Result<DMatrix<f64>> {
    let width = local.ncols();
    let counts: Vec<usize> = partition.counts().iter().map(|c| c * width).collect();
    let mut row_major = Vec::with_capacity(local.len());
    for i in 0..local.nrows() {
        row_major.extend(local.row(i).iter());
    }
    let all = comm.all_gather_varcount(&row_major, &counts)?;
    Ok(DMatrix::from_row_slice(partition.total(), width, &all))
}

/// The `k`-th smallest (0-based) of the values of all ranks (this rank's
/// `local`, finite), exactly: the element a sort of all values in one
/// process puts at `k` (ordered by [`f64::total_cmp`]), on every rank.
/// A bisection on the order-preserving bits of `f64` with one sum of a
/// count per step: at most 64 collectives of one number, `O(len)` local
/// work each, nothing gathered. Collective.
///
/// Errors: [`Error::IndexOutOfRange`] when `k` is not below the number of
/// all values; [`Error::NonFinite`] (agreed on, [`Error::RankFailed`])
/// for a value that is not finite.
pub fn order_statistic(comm: &dyn Communicator, local: &[f64], k: usize) -> Result<f64> {
    // Order-preserving keys: the sign bit flipped for positives, all bits
    // for negatives (what `f64::total_cmp` compares).
    let key = |v: f64| {
        let b = v.to_bits();
        if b >> 63 == 1 { !b } else { b | (1 << 63) }
    };
    let finite = match local.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(Error::NonFinite { what: "values of an order statistic", row: i, col: 0 }),
        None => Ok(()),
    };
    agree(comm, finite)?;
    let total = comm.sum_scalar(local.len() as f64)?;
    if (k as f64) >= total {
        return Err(Error::IndexOutOfRange { what: "order statistic of sharded values", index: k, len: total as usize });
    }
    let keys: Vec<u64> = local.iter().map(|&v| key(v)).collect();
    // The smallest key t with at least k + 1 keys <= t (the key of a value).
    let (mut lo, mut hi) = (0u64, u64::MAX);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let below = comm.sum_scalar(keys.iter().filter(|&&c| c <= mid).count() as f64)?;
        if below >= (k + 1) as f64 {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let bits = if lo >> 63 == 1 { lo & !(1 << 63) } else { !lo };
    Ok(f64::from_bits(bits))
}

/// A supervised data set sharded by rows: this rank's rows of the samples
/// and its block of the targets (the data of the sharded mklaren, low-rank
/// ridge and PSD regression fits).
#[derive(Debug, Clone)]
pub struct ShardedSupervised {
    x: RowShard,
    y: DVector<f64>,
}

impl ShardedSupervised {
    /// This rank's rows `x` with its targets `y` (one per local row, finite).
    /// Collective: a bad block on any rank fails every rank with
    /// [`Error::RankFailed`] ([`local_vector`]).
    pub fn new(comm: &dyn Communicator, x: RowShard, y: impl AsVector) -> Result<Self> {
        let y = local_vector(comm, &x, y)?;
        Ok(ShardedSupervised { x, y })
    }

    /// This rank's rows of the samples.
    pub fn x(&self) -> &RowShard {
        &self.x
    }

    /// This rank's targets.
    pub fn y(&self) -> &DVector<f64> {
        &self.y
    }
}

/// A model's per-row outputs on sharded inputs ([`RowShard::predict`]):
/// this rank's rows of the outputs, `rows x width` (one column for a
/// vector of predictions), and the partition of the inputs' rows.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardedOutput {
    local: DMatrix<f64>,
    partition: RowPartition,
}

impl ShardedOutput {
    /// This rank's rows of the outputs (`rows x width`).
    pub fn local(&self) -> &DMatrix<f64> {
        &self.local
    }

    /// This rank's outputs as a vector (the first column: a model whose
    /// prediction is one number per row).
    pub fn local_column(&self) -> DVector<f64> {
        self.local.column(0).into_owned()
    }

    /// How the rows are split over the ranks (that of the inputs).
    pub fn partition(&self) -> &RowPartition {
        &self.partition
    }

    /// All ranks' outputs stacked in rank order, on every rank
    /// (`n x width`, [`gather_rows`]). Collective.
    pub fn gather(&self, comm: &dyn Communicator) -> Result<DMatrix<f64>> {
        gather_rows(comm, &self.partition, &self.local)
    }

    /// All ranks' outputs of the first column in rank order, on every rank
    /// ([`gather_vector`]). Collective.
    pub fn gather_vector(&self, comm: &dyn Communicator) -> Result<DVector<f64>> {
        gather_vector(comm, &self.partition, self.local.column(0).as_slice())
    }
}

/// What a model's prediction returns per row: a vector (one number per
/// row) or a matrix (a row per input row), as rows of a matrix.
pub trait RowOutputs {
    /// The outputs as a `rows x width` matrix.
    fn into_rows(self) -> DMatrix<f64>;
}

impl RowOutputs for DVector<f64> {
    fn into_rows(self) -> DMatrix<f64> {
        let n = self.len();
        DMatrix::from_column_slice(n, 1, self.as_slice())
    }
}

impl RowOutputs for DMatrix<f64> {
    fn into_rows(self) -> DMatrix<f64> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every order statistic of values with ties, both zeros, negatives and
    /// a rank without values equals the sorted values' entry, on every rank.
    #[test]
    fn order_statistics_are_the_sorted_values() {
        let values = [3.5, -1.0, 0.0, -0.0, 3.5, 1e-300, -7.25, 2.0, -1.0, 1e300, 0.5];
        let mut sorted: Vec<f64> = values.to_vec();
        sorted.sort_by(|a, b| a.total_cmp(b));
        let counts = [4, 0, 7];
        let out = crate::distributed::ThreadGroup::run(3, |comm| {
            let rows = RowPartition::from_counts(&counts)?.range(comm.rank());
            let local = &values[rows];
            (0..values.len()).map(|k| order_statistic(comm, local, k)).collect::<Result<Vec<f64>>>()
        })
        .unwrap();
        for r in out {
            let r = r.unwrap();
            assert!(r.iter().zip(&sorted).all(|(a, b)| a.to_bits() == b.to_bits()), "{r:?} vs {sorted:?}");
        }
        let out = crate::distributed::ThreadGroup::run(2, |comm| order_statistic(comm, &[1.0], 2)).unwrap();
        assert!(out.iter().all(|r| matches!(r, Err(Error::IndexOutOfRange { .. }))));
    }

    #[test]
    fn owners_skip_empty_blocks() {
        let p = RowPartition::from_counts(&[2, 0, 3, 0]).unwrap();
        assert_eq!(p.owner(0), Some((0, 0)));
        assert_eq!(p.owner(1), Some((0, 1)));
        assert_eq!(p.owner(2), Some((2, 0)));
        assert_eq!(p.owner(4), Some((2, 2)));
        assert_eq!(p.owner(5), None);
        assert_eq!(p.total(), 5);
        assert_eq!(RowPartition::even(7, 3).unwrap().counts(), vec![3, 2, 2]);
    }
}
