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
        let d = self.ncols();
        let counts: Vec<usize> = self.partition.counts().iter().map(|c| c * d).collect();
        let mut local = Vec::with_capacity(self.local.len());
        for i in 0..self.local.nrows() {
            local.extend(self.local.row(i).iter());
        }
        let all = comm.all_gather_varcount(&local, &counts)?;
        Ok(DMatrix::from_row_slice(self.total_rows(), d, &all))
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

#[cfg(test)]
mod tests {
    use super::*;

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
