//! Cholesky with side information (Bach & Jordan 2005) with look-ahead, on
//! all rows or on rows sharded over ranks.
//!
//! The pivots of an incomplete Cholesky decomposition `K ~ G G^T` (Eq. 1-3)
//! are chosen by a convex combination of the normalised decrease of the
//! approximation error `tr(K - G G^T)` and of the residual sum of squares of
//! `y` regressed on the (centred) factor:
//!
//! `score_i = kappa ||g_i||^2 / tr(D) + (1 - kappa) (r^T P g_i)^2 / (||(I - Q Q^T) P g_i||^2 ||r||^2)`,
//!
//! with `P = I - 1 1^T / n` the centring, `Q` an orthonormal basis of the
//! centred columns so far and `r` the current residual of `y`. As in the
//! paper, the candidate columns `g_i` are not computed: they are
//! approximated from `delta` look-ahead columns `B` (plain ICD steps, Eq.
//! 12-13), `g^_i = B B(i, :)^T / sqrt(d_i)`, so with the small matrices
//!
//! `M = B^T B`, `C = M - s s^T / n - (Q^T B)^T (Q^T B)`, `v = B^T r - s (1^T r) / n`
//! (`s = B^T 1`),
//!
//! `||g^_i||^2 = b_i^T M b_i / d_i`, `r^T P g^_i = b_i^T v / sqrt(d_i)` and
//! `||(I - Q Q^T) P g^_i||^2 = b_i^T C b_i / d_i` (`b_i = B(i, :)^T`), and a
//! score costs O(delta^2). Candidates are the rows with `d_i` above
//! `1e-12 max(diag K)`; the prediction term counts where its denominator is
//! above `1e-10` times the largest one over all rows; the best score wins,
//! ties to the lower row.
//!
//! After the step on the chosen pivot, the new column `g` is centred,
//! orthogonalised against `Q` by classical Gram-Schmidt applied twice, and,
//! where its norm is above `1e-10 sqrt(n max(diag K))`, normalised into `q`,
//! added to `Q`, and taken out of the residual: `r -= (q^T r) q`.
//!
//! One implementation serves both layouts ([`csi_steps`] over [`CsiRows`]):
//! every quantity above that is a sum over rows (`s`, `M`, `Q^T B`,
//! `B^T r`, `1^T r`, `||r||^2`, `tr(D)`, the mean of `g`, `Q^T P g`,
//! `||(I - Q Q^T) P g||^2` and its product with `r`) is computed on the rows
//! at hand and then summed by [`CsiRows::sum`] (the identity on all rows;
//! over the ranks in rank order on sharded rows), the floor and the largest
//! diagonal by [`CsiRows::max`], and the best candidate by
//! [`CsiRows::best`]; the scores themselves are per-row work.

use nalgebra::{DMatrix, DVector};
use rayon::prelude::*;

use super::columns::KernelColumns;
use super::icd::CholeskyState;
use super::tall::{tall_mul, tall_tr_mul};
use crate::error::Error;

/// The rows a CSI decomposition works on: all rows of one process, or one
/// rank's block of rows with the reductions over the ranks.
pub(crate) trait CsiRows {
    /// Rows over all ranks.
    fn total_rows(&self) -> usize;

    /// The residual diagonal on these rows.
    fn diag(&self) -> &[f64];

    /// Up to `delta` look-ahead columns (plain ICD steps, Eq. 12-13) on
    /// these rows, stopping where the largest residual diagonal over all
    /// rows falls to `tolerance`; the state does not change.
    fn lookahead(&mut self, delta: usize, tolerance: f64) -> Result<DMatrix<f64>, Error>;

    /// The exact step (Eq. 2-3) on the pivot (a row over all ranks); returns
    /// these rows of the new column.
    fn step(&mut self, pivot: usize) -> Result<Vec<f64>, Error>;

    /// `values` summed over all rows' parts, in place.
    fn sum(&mut self, values: &mut Vec<f64>) -> Result<(), Error>;

    /// `values` as the largest over all rows' parts, in place.
    fn max(&mut self, values: &mut Vec<f64>) -> Result<(), Error>;

    /// The best `(score, row on these rows)` over all rows' parts as a row
    /// over all ranks (the largest score, ties to the lower row); `None`
    /// where no part has a candidate.
    fn best(&mut self, local: Option<(f64, usize)>) -> Result<Option<usize>, Error>;
}

/// All rows of one process: the decomposition's state with the kernel
/// columns (cached, so the look-ahead's columns are reused by the next steps).
struct AllRows<'c, 'a> {
    cols: &'c KernelColumns<'a>,
    state: CholeskyState,
}

impl CsiRows for AllRows<'_, '_> {
    fn total_rows(&self) -> usize {
        self.cols.n()
    }

    fn diag(&self) -> &[f64] {
        &self.state.diag
    }

    fn lookahead(&mut self, delta: usize, tolerance: f64) -> Result<DMatrix<f64>, Error> {
        Ok(self.state.lookahead(self.cols, delta, tolerance)?.0)
    }

    fn step(&mut self, pivot: usize) -> Result<Vec<f64>, Error> {
        Ok(self.state.step(self.cols, pivot)?.to_vec())
    }

    fn sum(&mut self, _: &mut Vec<f64>) -> Result<(), Error> {
        Ok(())
    }

    fn max(&mut self, _: &mut Vec<f64>) -> Result<(), Error> {
        Ok(())
    }

    fn best(&mut self, local: Option<(f64, usize)>) -> Result<Option<usize>, Error> {
        Ok(local.map(|(_, i)| i))
    }
}

/// CSI of one kernel on all rows: `rank` steps at most (fewer where no
/// candidate is left), look-ahead `delta`, weight `kappa`, target `y`
/// (centred). Returns the decomposition.
pub(crate) fn csi_decomposition(cols: &KernelColumns<'_>, y: &DVector<f64>, rank: usize, delta: usize, kappa: f64) -> Result<CholeskyState, Error> {
    let mut rows = AllRows { cols, state: CholeskyState::new(cols) };
    csi_steps(&mut rows, y, rank, delta, kappa)?;
    Ok(rows.state)
}

/// The scores' small matrices (module docs) from their sums over all rows.
struct Scores {
    /// `M = B^T B`.
    btb: DMatrix<f64>,
    /// `C = M - s s^T / n - (Q^T B)^T (Q^T B)`.
    centred: DMatrix<f64>,
    /// `v = B^T r - s (1^T r) / n`.
    v: DVector<f64>,
    /// `tr(D)`.
    trace: f64,
    /// `||r||^2` (at least the smallest positive number).
    rss: f64,
}

/// The sums over these rows the scores need, in one buffer:
/// `[s (c), M (c x c), Q^T B (k x c), B^T r (c), 1^T r, ||r||^2, tr(D)]`.
fn local_sums(b: &DMatrix<f64>, q: Option<&DMatrix<f64>>, residual: &DVector<f64>, diag: &[f64]) -> Vec<f64> {
    let c = b.ncols();
    let mut out: Vec<f64> = (0..c).map(|t| b.column(t).sum()).collect();
    out.extend_from_slice(tall_tr_mul(b, b).as_slice());
    if let Some(q) = q {
        out.extend_from_slice(tall_tr_mul(q, b).as_slice());
    }
    out.extend_from_slice(b.tr_mul(residual).as_slice());
    out.extend([residual.sum(), residual.norm_squared(), diag.iter().sum()]);
    out
}

impl Scores {
    /// From the buffer of [`local_sums`] summed over all rows (`c`
    /// look-ahead columns, `k` basis columns, `n` rows).
    fn from_sums(sums: &[f64], c: usize, k: usize, n: usize) -> Scores {
        let s = DVector::from_column_slice(&sums[..c]);
        let btb = DMatrix::from_column_slice(c, c, &sums[c..c + c * c]);
        let mut at = c + c * c;
        let mut centred = &btb - &s * s.transpose() / n as f64;
        if k > 0 {
            let qtb = DMatrix::from_column_slice(k, c, &sums[at..at + k * c]);
            centred -= qtb.transpose() * &qtb;
            at += k * c;
        }
        let btr = DVector::from_column_slice(&sums[at..at + c]);
        let (r_sum, rss, trace) = (sums[at + c], sums[at + c + 1], sums[at + c + 2]);
        let v = btr - &s * (r_sum / n as f64);
        Scores { btb, centred, v, trace, rss: rss.max(f64::MIN_POSITIVE) }
    }
}

/// The scores on these rows (module docs): the per-row terms of the
/// block `b`, the largest prediction denominator on these rows (for the
/// floor), and the best candidate once the floor is known.
struct RowTerms {
    /// `b_i^T M b_i`.
    gain: Vec<f64>,
    /// `b_i^T C b_i`.
    denom: Vec<f64>,
    /// `b_i^T v`.
    bv: DVector<f64>,
}

impl RowTerms {
    fn new(b: &DMatrix<f64>, scores: &Scores) -> RowTerms {
        let (n, c) = (b.nrows(), b.ncols());
        let b_btb = tall_mul(b, &scores.btb);
        let b_centred = tall_mul(b, &scores.centred);
        let gain = (0..n).map(|i| (0..c).map(|t| b_btb[(i, t)] * b[(i, t)]).sum::<f64>()).collect();
        let denom = (0..n).map(|i| (0..c).map(|t| b_centred[(i, t)] * b[(i, t)]).sum::<f64>()).collect();
        RowTerms { gain, denom, bv: b * &scores.v }
    }

    /// The largest prediction denominator on these rows (0 for none).
    fn largest_denominator(&self) -> f64 {
        self.denom.iter().copied().fold(0.0, f64::max)
    }

    /// The best `(score, row)` on these rows among the candidates
    /// (`diag > tolerance`), ties to the lower row.
    fn best(&self, scores: &Scores, diag: &[f64], tolerance: f64, floor: f64, kappa: f64) -> Option<(f64, usize)> {
        (0..diag.len())
            .into_par_iter()
            .filter(|&i| diag[i] > tolerance)
            .map(|i| {
                let approx_gain = self.gain[i] / diag[i];
                let predictive_gain = if self.denom[i] > floor { self.bv[i] * self.bv[i] / self.denom[i] } else { 0.0 };
                (kappa * approx_gain / scores.trace + (1.0 - kappa) * predictive_gain / scores.rss, i)
            })
            .reduce_with(|a, b| if b.0 > a.0 || (b.0 == a.0 && b.1 < a.1) { b } else { a })
    }
}

/// CSI (module docs) on `rows`: `rank` steps at most, look-ahead `delta`
/// (at most the number of rows), weight `kappa`, `y` the centred target on
/// these rows. The decomposition is left in `rows`.
pub(crate) fn csi_steps(rows: &mut impl CsiRows, y: &DVector<f64>, rank: usize, delta: usize, kappa: f64) -> Result<(), Error> {
    let n = rows.total_rows();
    let mut top = vec![rows.diag().iter().fold(0.0f64, |a, &b| a.max(b))];
    rows.max(&mut top)?;
    let top = top[0];
    let tolerance = 1e-12 * top;
    let mut basis: Vec<DVector<f64>> = Vec::new();
    let mut residual = y.clone();
    for _ in 0..rank {
        let b = rows.lookahead(delta, tolerance)?;
        if b.ncols() == 0 {
            break;
        }
        let q = (!basis.is_empty()).then(|| DMatrix::from_columns(&basis));
        let mut sums = local_sums(&b, q.as_ref(), &residual, rows.diag());
        rows.sum(&mut sums)?;
        let scores = Scores::from_sums(&sums, b.ncols(), basis.len(), n);
        let terms = RowTerms::new(&b, &scores);
        let mut floor = vec![terms.largest_denominator()];
        rows.max(&mut floor)?;
        let local = terms.best(&scores, rows.diag(), tolerance, 1e-10 * floor[0], kappa);
        let Some(pivot) = rows.best(local)? else { break };
        let g = rows.step(pivot)?;
        let mut mean = vec![g.iter().sum::<f64>()];
        rows.sum(&mut mean)?;
        let mean = mean[0] / n as f64;
        let mut pg = DVector::from_iterator(g.len(), g.iter().map(|v| v - mean));
        if let Some(q) = &q {
            for _ in 0..2 {
                let mut c = q.tr_mul(&pg).as_slice().to_vec();
                rows.sum(&mut c)?;
                pg -= q * DVector::from_vec(c);
            }
        }
        let mut dots = vec![pg.norm_squared(), pg.dot(&residual)];
        rows.sum(&mut dots)?;
        let norm = dots[0].sqrt();
        if norm > 1e-10 * (top * n as f64).sqrt() {
            pg /= norm;
            residual.axpy(-dots[1] / norm, &pg, 1.0);
            basis.push(pg);
        }
    }
    Ok(())
}
