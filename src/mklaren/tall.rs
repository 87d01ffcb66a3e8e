//! Products with tall, thin matrices (n x delta, n up to millions, delta
//! about 10) written as blocked passes over row chunks: each chunk of every
//! column is read once while it is in cache, the chunks run in parallel, and
//! the small partial results are summed. A general matrix product spends its
//! time packing such shapes; a dot product per entry reads every column
//! `delta` times.

use nalgebra::DMatrix;
use rayon::prelude::*;

use super::columns::ROW_CHUNK;

/// Column `j` of a column-major buffer with `n` rows.
fn col(a: &[f64], n: usize, j: usize) -> &[f64] {
    &a[j * n..(j + 1) * n]
}

/// Row ranges `[r0, r0 + len)` of the chunks of `n` rows.
pub(crate) fn row_chunks(n: usize) -> impl IndexedParallelIterator<Item = (usize, usize)> {
    (0..n.div_ceil(ROW_CHUNK)).into_par_iter().map(move |c| (c * ROW_CHUNK, ROW_CHUNK.min(n - c * ROW_CHUNK)))
}

/// `A^T B` for tall `A` and `B` given as lists of columns (each of length
/// at least n; the first n rows are used): one pass over row chunks (in
/// parallel), the partial `a x b` products summed in chunk order.
pub(crate) fn tall_tr_mul_cols(a: &[&[f64]], b: &[&[f64]], n: usize) -> DMatrix<f64> {
    assert!(a.iter().chain(b).all(|c| c.len() >= n), "tall_tr_mul: shapes");
    let partial = |(r0, len): (usize, usize)| {
        let mut out = DMatrix::<f64>::zeros(a.len(), b.len());
        // Blocks of up to 4 x 2 entries: eight independent sums advance
        // together (a single running sum waits on each addition), each
        // still summed row by row from -0.0 like `Iterator::sum`, so every
        // entry has the bits of the plain dot product.
        for s0 in (0..a.len()).step_by(4) {
            for t0 in (0..b.len()).step_by(2) {
                let (ns, nt) = ((a.len() - s0).min(4), (b.len() - t0).min(2));
                let xs: [&[f64]; 4] = std::array::from_fn(|k| &a[s0 + k.min(ns - 1)][r0..r0 + len]);
                let ys: [&[f64]; 2] = std::array::from_fn(|k| &b[t0 + k.min(nt - 1)][r0..r0 + len]);
                let mut acc = [[-0.0f64; 2]; 4];
                for i in 0..len {
                    let yv = [ys[0][i], ys[1][i]];
                    for (row, x) in acc.iter_mut().zip(&xs) {
                        let xv = x[i];
                        row[0] += xv * yv[0];
                        row[1] += xv * yv[1];
                    }
                }
                for (ds, row) in acc.iter().enumerate().take(ns) {
                    for (dt, &v) in row.iter().enumerate().take(nt) {
                        out[(s0 + ds, t0 + dt)] = v;
                    }
                }
            }
        }
        out
    };
    // Partial products summed in chunk order: the same bits on every run,
    // whatever the threads did.
    let parts: Vec<DMatrix<f64>> = row_chunks(n).map(partial).collect();
    parts.into_iter().fold(DMatrix::zeros(a.len(), b.len()), |x, y| x + y)
}

/// The columns of a column-major buffer with `n` rows.
pub(crate) fn columns_of(a: &[f64], n: usize) -> Vec<&[f64]> {
    if n == 0 {
        return Vec::new();
    }
    a.chunks_exact(n).collect()
}

/// `A^T B` for tall `A` (n x a) and `B` (n x b).
pub(crate) fn tall_tr_mul(a: &DMatrix<f64>, b: &DMatrix<f64>) -> DMatrix<f64> {
    assert_eq!(a.nrows(), b.nrows(), "tall_tr_mul: rows");
    let n = a.nrows();
    if n == 0 {
        return DMatrix::zeros(a.ncols(), b.ncols());
    }
    tall_tr_mul_cols(&columns_of(a.as_slice(), n), &columns_of(b.as_slice(), n), n)
}

/// `A M` for column-major `A` (n x `a_cols`) and small `M` (a_cols x m), in
/// parallel over row chunks.
pub(crate) fn tall_mul_slices(a: &[f64], a_cols: usize, n: usize, m: &DMatrix<f64>) -> DMatrix<f64> {
    assert!(a.len() >= n * a_cols && m.nrows() == a_cols, "tall_mul: inner dimension");
    let cols = m.ncols();
    let mut out = DMatrix::<f64>::zeros(n, cols);
    if n == 0 {
        return out;
    }
    // Row blocks of the column-major output, one task each.
    let blocks: Vec<(usize, Vec<f64>)> = row_chunks(n)
        .map(|(r0, len)| {
            let mut buf = vec![0.0; len * cols];
            for j in 0..cols {
                let o = &mut buf[j * len..(j + 1) * len];
                for t in 0..a_cols {
                    let f = m[(t, j)];
                    if f != 0.0 {
                        for (v, &x) in o.iter_mut().zip(&col(a, n, t)[r0..r0 + len]) {
                            *v += f * x;
                        }
                    }
                }
            }
            (r0, buf)
        })
        .collect();
    for (r0, buf) in blocks {
        let len = buf.len() / cols.max(1);
        for j in 0..cols {
            out.column_mut(j).rows_mut(r0, len).copy_from_slice(&buf[j * len..(j + 1) * len]);
        }
    }
    out
}

/// `A M` for tall `A` (n x a) and small `M` (a x m).
pub(crate) fn tall_mul(a: &DMatrix<f64>, m: &DMatrix<f64>) -> DMatrix<f64> {
    assert_eq!(a.ncols(), m.nrows(), "tall_mul: inner dimension");
    tall_mul_slices(a.as_slice(), a.ncols(), a.nrows(), m)
}

/// `z_i^T M z_i` for every row `z_i = A(i, :)^T` of column-major `A`
/// (n x a, M a x a), without forming `A M`.
pub(crate) fn row_quadratic_forms(a: &[f64], a_cols: usize, n: usize, m: &DMatrix<f64>) -> Vec<f64> {
    assert!(a.len() >= n * a_cols && m.nrows() == a_cols && m.ncols() == a_cols, "row_quadratic_forms: shapes");
    let mut out = vec![0.0; n];
    out.par_chunks_mut(ROW_CHUNK).enumerate().for_each(|(c, o)| {
        let r0 = c * ROW_CHUNK;
        let len = o.len();
        let mut am = vec![0.0; len];
        for t in 0..a_cols {
            am.iter_mut().for_each(|v| *v = 0.0);
            for s in 0..a_cols {
                let f = m[(s, t)];
                for (v, &x) in am.iter_mut().zip(&col(a, n, s)[r0..r0 + len]) {
                    *v += f * x;
                }
            }
            for ((q, &v), &x) in o.iter_mut().zip(&am).zip(&col(a, n, t)[r0..r0 + len]) {
                *q += v * x;
            }
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tall_products_match_nalgebra() {
        for n in [1, 7, ROW_CHUNK, 20_000] {
            let a = DMatrix::<f64>::from_fn(n, 4, |i, j| ((i * 4 + j) as f64 * 0.013).sin());
            let b = DMatrix::<f64>::from_fn(n, 3, |i, j| ((i + 7 * j) as f64 * 0.007).cos());
            let m = DMatrix::<f64>::from_fn(4, 2, |i, j| i as f64 - 0.5 * j as f64);
            let s = DMatrix::<f64>::from_fn(4, 4, |i, j| 1.0 / (1.0 + i as f64 + j as f64));
            let scale = n as f64;
            assert!((tall_tr_mul(&a, &b) - a.transpose() * &b).amax() < 1e-12 * scale);
            // Bit for bit the chunk-wise plain dot products summed in chunk order.
            for (x, y) in [(&a, &b), (&a, &a), (&b, &a)] {
                let got = tall_tr_mul(x, y);
                for s in 0..x.ncols() {
                    for t in 0..y.ncols() {
                        let (xs, ys) = (x.column(s), y.column(t));
                        let plain = (0..n.div_ceil(ROW_CHUNK)).fold(0.0, |acc, c| {
                            let rows = c * ROW_CHUNK..n.min((c + 1) * ROW_CHUNK);
                            acc + rows.map(|i| xs[i] * ys[i]).sum::<f64>()
                        });
                        assert_eq!(got[(s, t)].to_bits(), plain.to_bits());
                    }
                }
            }
            assert!((tall_mul(&a, &m) - &a * &m).amax() < 1e-12);
            let am = &a * &s;
            let q = row_quadratic_forms(a.as_slice(), 4, n, &s);
            assert!((0..n).all(|i| (q[i] - am.row(i).dot(&a.row(i))).abs() < 1e-12));
        }
    }
}
