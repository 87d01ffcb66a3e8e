//! Cholesky with side information (Bach & Jordan 2005) with look-ahead.

use nalgebra::{DMatrix, DVector};
use rayon::prelude::*;

use super::columns::KernelColumns;
use crate::error::Error;
use super::icd::CholeskyState;
use super::tall::{tall_mul, tall_tr_mul};

/// Incomplete Cholesky decomposition of one kernel with pivots chosen by the
/// CSI criterion of Bach & Jordan (2005): a convex combination of the
/// normalised decrease of the approximation error `tr(K - G G^T)` and of the
/// residual sum of squares of `y` regressed on the (centred) factor,
///
/// `score_i = kappa ||g_i||^2 / tr(D) + (1 - kappa) (r^T P g_i)^2 / (||(I - Q Q^T) P g_i||^2 ||r||^2)`,
///
/// with `Q` an orthonormal basis of the centred columns so far and `r` the
/// current residual of `y`. As in the paper, the candidate columns `g_i` are
/// not computed: they are approximated from `delta` look-ahead columns,
/// `g^_i = B B(i, :)^T / sqrt(d_i)` (Eq. 13), so a score costs O(delta^2).
pub(crate) fn csi_decomposition(cols: &KernelColumns<'_>, y: &DVector<f64>, rank: usize, delta: usize, kappa: f64) -> Result<CholeskyState, Error> {
    let n = cols.n();
    let top = cols.diagonal().iter().fold(0.0f64, |a, &b| a.max(b));
    let tolerance = 1e-12 * top;
    let mut state = CholeskyState::new(cols);
    let mut basis: Vec<DVector<f64>> = Vec::new();
    let mut residual = y.clone();
    for _ in 0..rank {
        let (b, _) = state.lookahead(cols, delta, tolerance)?;
        if b.ncols() == 0 {
            break;
        }
        let sum = DVector::from_fn(b.ncols(), |t, _| b.column(t).sum());
        let btb = tall_tr_mul(&b, &b);
        let mut centred = &btb - &sum * sum.transpose() / n as f64;
        if !basis.is_empty() {
            let q = DMatrix::from_columns(&basis);
            let qtb = tall_tr_mul(&q, &b);
            centred -= qtb.transpose() * &qtb;
        }
        let v = b.tr_mul(&residual) - &sum * (residual.sum() / n as f64);
        let b_btb = tall_mul(&b, &btb);
        let b_centred = tall_mul(&b, &centred);
        let bv = &b * &v;
        let trace: f64 = state.diag.iter().sum();
        let rss = residual.norm_squared().max(f64::MIN_POSITIVE);
        let floor = 1e-10 * (0..n).map(|i| (0..b.ncols()).map(|t| b_centred[(i, t)] * b[(i, t)]).sum::<f64>()).fold(0.0, f64::max);
        let best = (0..n)
            .into_par_iter()
            .filter(|&i| state.diag[i] > tolerance)
            .map(|i| {
                let approx_gain = (0..b.ncols()).map(|t| b_btb[(i, t)] * b[(i, t)]).sum::<f64>() / state.diag[i];
                let denom: f64 = (0..b.ncols()).map(|t| b_centred[(i, t)] * b[(i, t)]).sum();
                let predictive_gain = if denom > floor { bv[i] * bv[i] / denom } else { 0.0 };
                (kappa * approx_gain / trace + (1.0 - kappa) * predictive_gain / rss, i)
            })
            .reduce_with(|a, b| if b.0 > a.0 || (b.0 == a.0 && b.1 < a.1) { b } else { a });
        let Some((_, pivot)) = best else { break };
        let g = state.step(cols, pivot)?;
        let mean = g.iter().sum::<f64>() / n as f64;
        let mut pg = DVector::from_iterator(n, g.iter().map(|v| v - mean));
        for _ in 0..2 {
            for q in &basis {
                let c = q.dot(&pg);
                pg.axpy(-c, q, 1.0);
            }
        }
        let norm = pg.norm();
        if norm > 1e-10 * (top * n as f64).sqrt() {
            pg /= norm;
            let c = pg.dot(&residual);
            residual.axpy(-c, &pg, 1.0);
            basis.push(pg);
        }
    }
    Ok(state)
}
