//! Products with tall, thin matrices (n x delta, n up to millions, delta
//! about 10) written as parallel column loops: a general matrix product
//! spends its time packing such shapes, these stream each column once.

use nalgebra::DMatrix;
use rayon::prelude::*;

use super::columns::ROW_CHUNK;

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.par_chunks(ROW_CHUNK).zip(b.par_chunks(ROW_CHUNK)).map(|(x, y)| x.iter().zip(y).map(|(u, v)| u * v).sum::<f64>()).sum()
}

/// `A^T B` for tall `A` (n x a) and `B` (n x b): a x b dot products of length n.
pub(crate) fn tall_tr_mul(a: &DMatrix<f64>, b: &DMatrix<f64>) -> DMatrix<f64> {
    assert_eq!(a.nrows(), b.nrows(), "tall_tr_mul: rows");
    let n = a.nrows();
    let (sa, sb) = (a.as_slice(), b.as_slice());
    DMatrix::from_fn(a.ncols(), b.ncols(), |s, t| dot(&sa[s * n..(s + 1) * n], &sb[t * n..(t + 1) * n]))
}

/// `A M` for tall `A` (n x a) and small `M` (a x m), in parallel over row blocks.
pub(crate) fn tall_mul(a: &DMatrix<f64>, m: &DMatrix<f64>) -> DMatrix<f64> {
    assert_eq!(a.ncols(), m.nrows(), "tall_mul: inner dimension");
    let n = a.nrows();
    let mut out = DMatrix::<f64>::zeros(n, m.ncols());
    if n == 0 {
        return out;
    }
    let sa = a.as_slice();
    let cols = m.ncols();
    // Row blocks of the column-major output, one task each.
    let mut blocks: Vec<(usize, Vec<f64>)> = (0..n).step_by(ROW_CHUNK).map(|r0| (r0, Vec::new())).collect();
    blocks.par_iter_mut().for_each(|(r0, buf)| {
        let len = ROW_CHUNK.min(n - *r0);
        buf.resize(len * cols, 0.0);
        for j in 0..cols {
            let o = &mut buf[j * len..(j + 1) * len];
            for t in 0..a.ncols() {
                let f = m[(t, j)];
                if f != 0.0 {
                    for (v, &x) in o.iter_mut().zip(&sa[t * n + *r0..t * n + *r0 + len]) {
                        *v += f * x;
                    }
                }
            }
        }
    });
    for (r0, buf) in blocks {
        let len = buf.len() / cols.max(1);
        for j in 0..cols {
            out.column_mut(j).rows_mut(r0, len).copy_from_slice(&buf[j * len..(j + 1) * len]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tall_products_match_nalgebra() {
        let a = DMatrix::<f64>::from_fn(20_000, 4, |i, j| ((i * 4 + j) as f64 * 0.013).sin());
        let b = DMatrix::<f64>::from_fn(20_000, 3, |i, j| ((i + 7 * j) as f64 * 0.007).cos());
        let m = DMatrix::<f64>::from_fn(4, 2, |i, j| i as f64 - 0.5 * j as f64);
        assert!((tall_tr_mul(&a, &b) - a.transpose() * &b).amax() < 1e-8);
        assert!((tall_mul(&a, &m) - &a * &m).amax() < 1e-12);
    }
}
