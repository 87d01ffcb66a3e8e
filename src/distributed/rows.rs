//! Vectors split by rows over the ranks of a [`Communicator`], for the
//! block Lanczos solver ([`crate::linalg::RowSplit`]): each rank holds some
//! rows of every vector (increasing ranges of the global rows), inner
//! products are summed by [`Communicator::sum`] (the same bits on every
//! rank) and small per-rank values gathered by one all-gather.

use std::ops::Range;

use super::Communicator;
use crate::error::{Error, Result};
use crate::linalg::RowSplit;

/// This rank's rows of vectors of `order` rows split over the ranks of a
/// communicator.
pub struct CommRows<'a> {
    comm: &'a dyn Communicator,
    order: usize,
    ranges: Vec<Range<usize>>,
}

impl<'a> CommRows<'a> {
    /// This rank holds the rows `ranges` (increasing, disjoint, within
    /// `0..order`; empty ranges are dropped) of vectors of `order` rows.
    /// Not collective: that the ranks' rows cover `0..order` once is the
    /// caller's to ensure.
    ///
    /// Errors: [`Error::InvalidParameter`] (`ranges`) for ranges that are
    /// not increasing and disjoint or that pass `order`.
    pub fn new(comm: &'a dyn Communicator, order: usize, ranges: Vec<Range<usize>>) -> Result<Self> {
        let ranges: Vec<Range<usize>> = ranges.into_iter().filter(|r| !r.is_empty()).collect();
        let mut end = 0;
        for r in &ranges {
            if r.start < end || r.end > order {
                return Err(Error::InvalidParameter { name: "ranges", reason: format!("{ranges:?} must be increasing, disjoint ranges within 0..{order}") });
            }
            end = r.end;
        }
        Ok(CommRows { comm, order, ranges })
    }
}

impl RowSplit for CommRows<'_> {
    fn order(&self) -> usize {
        self.order
    }
    fn local_ranges(&self) -> &[Range<usize>] {
        &self.ranges
    }
    fn processes(&self) -> usize {
        self.comm.size()
    }
    fn sum(&self, values: &mut [f64]) -> Result<()> {
        self.comm.sum(values)
    }
    fn gather(&self, values: &[f64]) -> Result<Vec<f64>> {
        self.comm.all_gather_varcount(values, &vec![values.len(); self.comm.size()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distributed::ThreadGroup;
    use crate::linalg::{symmetric_eigen, symmetric_operator_largest, symmetric_operator_largest_on, TopEigenSettings};
    use faer::{MatMut, MatRef};
    use nalgebra::DMatrix;

    /// `Q diag(values) Q^T` for a fixed orthogonal `Q`.
    fn with_spectrum(values: &[f64]) -> DMatrix<f64> {
        let n = values.len();
        let g = DMatrix::<f64>::from_fn(n, n, |i, j| ((i * 31 + j * 17) as f64 * 0.37).sin());
        let q = g.qr().q();
        let a = &q * DMatrix::from_diagonal(&nalgebra::DVector::from_column_slice(values)) * q.transpose();
        (&a + a.transpose()) * 0.5
    }

    /// The rows of rank `r` of 3: interleaved, uneven blocks.
    fn ranges(n: usize, r: usize) -> Vec<Range<usize>> {
        let cuts = [0, n / 7, n / 3, n / 2, (2 * n) / 3, n];
        (0..5).filter(|b| b % 3 == r).map(|b| cuts[b]..cuts[b + 1]).collect()
    }

    /// The block solver on rows split over 1-3 ranks finds the pairs of
    /// the whole solve: eigenvalues to `1e-10 ||A||` (both converge to
    /// residuals `1e-11 ||A||`; the sums add in another order), the
    /// vectors' rows up to sign to `1e-8` (a gap of 0.1 next to the wanted
    /// ones), every rank the same eigenvalues. Order 40 with k = 12 takes
    /// `A I`, summed from the ranks' rows.
    #[test]
    fn split_rows_find_the_pairs_of_the_whole_solve() {
        for (n, k) in [(300usize, 6usize), (40, 12)] {
            let values: Vec<f64> = (0..n).map(|i| if i < 20 { 2.0 - 0.05 * i as f64 } else { 0.9 * 0.97f64.powi(i as i32) * if i % 2 == 0 { 1.0 } else { -1.0 } }).collect();
            let a = with_spectrum(&values);
            let settings = TopEigenSettings { block: 4, ..TopEigenSettings::default() };
            let whole = symmetric_operator_largest(n, k, |v: MatRef<'_, f64>, out: MatMut<'_, f64>| {
                faer::linalg::matmul::matmul(out, faer::Accum::Replace, crate::linalg::faer_ref(&a), v, 1.0, faer::Par::Seq);
                Ok(())
            }, &settings).unwrap();
            let full = symmetric_eigen(&a).unwrap();
            for p in 1..=3 {
                let out = ThreadGroup::run(p, |comm| {
                    let mine = if p == 1 { vec![0..n] } else { (0..3).filter(|&b| b % p == comm.rank()).flat_map(|b| ranges(n, b)).collect::<Vec<_>>() };
                    let mut mine = mine;
                    mine.sort_by_key(|r| r.start);
                    let rows = CommRows::new(comm, n, mine.clone())?;
                    // This rank's rows of A V: A's rows here times the whole V
                    // (summed from the ranks' rows of V, test only).
                    let product = |v: MatRef<'_, f64>, mut out: MatMut<'_, f64>| -> Result<()> {
                        let mut whole_v = DMatrix::<f64>::zeros(n, v.ncols());
                        let mut l = 0;
                        for r in &mine {
                            for g in r.clone() {
                                for j in 0..v.ncols() {
                                    whole_v[(g, j)] = v[(l, j)];
                                }
                                l += 1;
                            }
                        }
                        comm.sum(whole_v.as_mut_slice())?;
                        let av = &a * whole_v;
                        let mut l = 0;
                        for r in &mine {
                            for g in r.clone() {
                                for j in 0..av.ncols() {
                                    out[(l, j)] = av[(g, j)];
                                }
                                l += 1;
                            }
                        }
                        Ok(())
                    };
                    let top = symmetric_operator_largest_on(&rows, k, product, &settings)?;
                    Ok::<_, Error>((mine, top))
                })
                .unwrap();
                let anorm = 2.0;
                let mut vectors = DMatrix::<f64>::zeros(n, k);
                for r in out {
                    let (mine, top) = r.unwrap();
                    for j in 0..k {
                        let want = full.eigenvalues[n - k + j];
                        assert!((top.eigen.eigenvalues[j] - want).abs() <= 1e-10 * anorm, "n {n}, {p} ranks: eigenvalue {j}: {} vs {want}", top.eigen.eigenvalues[j]);
                    }
                    let mut l = 0;
                    for range in &mine {
                        for g in range.clone() {
                            vectors.row_mut(g).copy_from(&top.eigen.eigenvectors.row(l));
                            l += 1;
                        }
                    }
                }
                // The assembled vectors: orthonormal eigenvectors, those of the whole solve up to sign.
                let residual = &a * &vectors - &vectors * DMatrix::from_diagonal(&whole.eigen.eigenvalues);
                assert!(residual.amax() <= 1e-8, "n {n}, {p} ranks: residual {}", residual.amax());
                for j in 0..k {
                    let (x, y) = (vectors.column(j), whole.eigen.eigenvectors.column(j));
                    let d = (x - y).amax().min((x + y).amax());
                    assert!(d <= 1e-8, "n {n}, {p} ranks: vector {j} differs by {d}");
                }
            }
        }
    }

    #[test]
    fn ranges_must_increase_within_the_order() {
        let out = ThreadGroup::run(1, |comm| {
            assert!(CommRows::new(comm, 10, vec![0..3, 2..5]).is_err());
            assert!(CommRows::new(comm, 10, vec![5..11]).is_err());
            assert_eq!(CommRows::new(comm, 10, vec![0..0, 3..5, 7..10])?.local_len(), 5);
            Ok::<_, Error>(())
        })
        .unwrap();
        assert!(out[0].is_ok());
    }
}
