//! The device steps of an incomplete Cholesky decomposition `K ~ G G^T`
//! with `G` and the residual diagonal `d` resident (Eq. 1-3 of the mklaren
//! paper): the greedy pivot `i = argmax_k d_k` ([`GpuContext::argmax`]),
//! found on the device so that only a few numbers come back, and the fused
//! column update ([`GpuContext::icd_column`], `shaders/icd_column.wgsl`).
//!
//! The arg-max is one dispatch of `shaders/row_reduce.wgsl` (mode 2): it
//! cuts the vector into at most [`ARGMAX_BLOCKS`] blocks of consecutive
//! entries (more only when a block would exceed [`LOOP_BUDGET`] entries, or
//! where the vector spans several buffers) and writes, per block, its
//! largest entry, the position of its first occurrence in the block and the
//! block's sum. The host combines the blocks in order, keeping the earlier
//! on equal values, so the result is the first maximum of a sequential scan
//! (the lowest index). A NaN or an infinity makes its block's sum
//! non-finite, which the host reports as [`Error::NonFinite`] (a comparison
//! with NaN is false, so the maximum alone would skip it).

use super::buffers::GpuMatrix;
use bytemuck::Zeroable;

use super::plan::{cuts, Dispatch, PipelineKind};
use super::problem::Problem;
use super::problem::Reduce;
use super::{GpuContext, LOOP_BUDGET};
use crate::error::{Error, Result};

/// Blocks an arg-max aims at: 42 blocks of 3 numbers are 1008 bytes in
/// `f64`, within 1 KiB read back.
pub(crate) const ARGMAX_BLOCKS: usize = 42;

/// The blocks `(first entry, length)` of an arg-max over `rows` entries
/// whose buffer breaks (row indices where a new buffer starts) are `breaks`:
/// each segment between breaks is cut into blocks of at most
/// `ceil(rows / ARGMAX_BLOCKS)` entries, and of at most `LOOP_BUDGET - 1`
/// (one loop pass per entry after the first, one to leave).
fn argmax_blocks(rows: usize, breaks: &[usize]) -> Vec<(usize, usize)> {
    let span = rows.div_ceil(ARGMAX_BLOCKS).clamp(1, LOOP_BUDGET - 1);
    let mut bounds = breaks.to_vec();
    bounds.retain(|&b| b > 0 && b < rows);
    bounds.insert(0, 0);
    bounds.push(rows);
    let mut out = Vec::new();
    for seg in bounds.windows(2) {
        let mut start = seg[0];
        while start < seg[1] {
            let len = span.min(seg[1] - start);
            out.push((start, len));
            start += len;
        }
    }
    out
}

impl GpuContext {
    /// Index and value of the largest entry of the n x 1 matrix `x` (the
    /// lowest index among equal largest values): one submission, one
    /// blocking read of 3 numbers per block ([`argmax_blocks`]); the
    /// partials are allocated on the first call and reused by every later
    /// one with as many blocks (the same n).
    ///
    /// Errors: `x` of more than one column ([`Error::DimensionMismatch`]);
    /// NaN or an infinity in `x` ([`Error::NonFinite`], `row` the first
    /// entry of the block that holds it).
    pub(crate) fn argmax(&self, x: &GpuMatrix) -> Result<(usize, f64)> {
        if x.ncols() != 1 {
            return Err(Error::DimensionMismatch { what: "columns of an arg-max's vector", expected: 1, found: x.ncols() });
        }
        let blocks = argmax_blocks(x.nrows(), &x.block_breaks());
        let mut held = self.argmax_partials.lock().map_err(|_| Error::Gpu("arg-max partials lock poisoned".into()))?;
        if !held.as_ref().is_some_and(|p| p.nrows() == blocks.len() && p.precision() == x.precision()) {
            *held = Some(self.zeros(blocks.len(), 3, x.precision())?);
        }
        let partials = held.as_ref().expect("set above");
        let mut plan: Vec<Dispatch> = Vec::new();
        // Runs of equal-length blocks within one buffer share a dispatch
        // (one invocation per block).
        let mut b = 0;
        while b < blocks.len() {
            let (start, len) = blocks[b];
            let s = x.locate(start);
            let mut count = 1;
            while b + count < blocks.len() && blocks[b + count].1 == len && x.locate(blocks[b + count].0).block == s.block {
                count += 1;
            }
            let job = Reduce { rows: count as u32, cols: len as u32, x_off: s.local_row as u32, x_rs: len as u32, x_cs: 1, out_off: (3 * b) as u32, mode: 2, accumulate: 0 };
            self.push_row_reduce(job, x.precision(), [x.buffer(s.block), partials.buffer(0)], &mut plan);
            b += count;
        }
        self.run_plan(plan)?;
        let values = self.download(partials)?;
        let mut best: Option<(usize, f64)> = None;
        for (&(start, _), p) in blocks.iter().zip(values.chunks_exact(3)) {
            if !p[2].is_finite() {
                return Err(Error::NonFinite { what: "vector of an arg-max", row: start, col: 0 });
            }
            let candidate = (start + p[1] as usize, p[0]);
            if best.is_none_or(|(_, v)| candidate.1 > v) {
                best = Some(candidate);
            }
        }
        best.ok_or(Error::Empty { what: "vector of an arg-max", rows: x.nrows(), cols: 1 })
    }

    /// Records the fused Cholesky column on pivot `pivot` (`shaders/
    /// icd_column.wgsl`): from `k = K(:, i)` and `p = G G(i,:)^T` (n x 1),
    /// column `col` of `g` (n x c) and `d` (n x 1) updated in place, with
    /// `inv = 1 / sqrt(d_i)` and `pivot_value = sqrt(d_i)`. The rows are cut
    /// at every operand's buffer breaks and the grid limit.
    ///
    /// Errors: shapes that differ, `col` or `pivot` out of range, `d` or `g`
    /// sharing storage with another operand, mixed precisions.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn plan_icd_column(&self, k: &GpuMatrix, p: &GpuMatrix, d: &GpuMatrix, g: &GpuMatrix, col: usize, pivot: usize, inv: f64, pivot_value: f64, plan: &mut Vec<Dispatch>) -> Result<()> {
        let precision = self.check_same(&[k, p, d, g])?;
        let n = d.nrows();
        for (what, m) in [("k", k), ("p", p), ("d", d)] {
            if m.nrows() != n || m.ncols() != 1 {
                return Err(Error::DimensionMismatch { what: match what { "k" => "shape of a Cholesky column's kernel column (n x 1)", "p" => "shape of a Cholesky column's combination (n x 1)", _ => "shape of a residual diagonal (n x 1)" }, expected: n, found: m.nrows() * m.ncols() });
            }
        }
        if g.nrows() != n {
            return Err(Error::DimensionMismatch { what: "rows of a Cholesky factor vs its residual diagonal", expected: n, found: g.nrows() });
        }
        if col >= g.ncols() {
            return Err(Error::IndexOutOfRange { what: "columns of a Cholesky factor", index: col, len: g.ncols() });
        }
        if pivot >= n {
            return Err(Error::IndexOutOfRange { what: "rows of a residual diagonal", index: pivot, len: n });
        }
        if d.same_storage(k) || d.same_storage(p) || d.same_storage(g) || g.same_storage(k) || g.same_storage(p) {
            return Err(Error::InvalidParameter { name: "out", reason: "the residual diagonal and the factor of a Cholesky column may not share storage with each other or an operand".into() });
        }
        let mut breaks = k.block_breaks();
        for m in [p, d, g] {
            breaks.extend(m.block_breaks());
        }
        let row_cuts = cuts(n, breaks, self.max_workgroups as usize * 256);
        let cols = g.ncols();
        for r in row_cuts.windows(2) {
            let (i0, i1) = (r[0], r[1]);
            let (sk, sp, sd, sg) = (k.locate(i0), p.locate(i0), d.locate(i0), g.locate(i0));
            let local_pivot = if (i0..i1).contains(&pivot) { (pivot - i0) as u32 } else { u32::MAX };
            let words: [u32; 7] = [(i1 - i0) as u32, sk.local_row as u32, sp.local_row as u32, sd.local_row as u32, (sg.local_row * cols + col) as u32, cols as u32, local_pivot];
            let mut problem = Problem::zeroed();
            bytemuck::cast_slice_mut::<Problem, u32>(std::slice::from_mut(&mut problem))[..7].copy_from_slice(&words);
            let groups = (i1 - i0).div_ceil(256);
            plan.push(Dispatch {
                problem,
                precision,
                buffers: vec![k.buffer(sk.block).clone(), p.buffer(sp.block).clone(), d.buffer(sd.block).clone(), g.buffer(sg.block).clone()],
                weights: None,
                grid: [groups.clamp(1, self.max_workgroups as usize) as u32, 1, 1],
                pipeline: PipelineKind::IcdColumn,
                variant: 0,
                params: (inv, pivot_value),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::precision::Precision;

    /// Blocks cover every entry once, in order, within the span and the
    /// buffer breaks.
    #[test]
    fn blocks_cover_the_vector_within_breaks() {
        for (rows, breaks) in [(1usize, vec![]), (41, vec![]), (2000, vec![]), (16000, vec![]), (100, vec![30, 70]), (3_000_000, vec![])] {
            let blocks = argmax_blocks(rows, &breaks);
            let mut next = 0;
            for &(start, len) in &blocks {
                assert_eq!(start, next);
                assert!((1..LOOP_BUDGET).contains(&len));
                assert!(breaks.iter().all(|&b| !(start < b && b < start + len)));
                next = start + len;
            }
            assert_eq!(next, rows);
            if rows <= ARGMAX_BLOCKS * (LOOP_BUDGET - 1) && breaks.is_empty() {
                assert!(blocks.len() <= ARGMAX_BLOCKS);
            }
        }
    }

    /// A tiny deterministic generator (fresh inputs per seed).
    fn uniform(seed: &mut u64) -> f64 {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (*seed >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The CPU reference: the first maximum of a sequential scan.
    fn first_max(v: &[f64]) -> (usize, f64) {
        v.iter().enumerate().fold((0, f64::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b })
    }

    /// The device arg-max equals the sequential scan exactly (index and
    /// value, tolerance 0: no arithmetic touches the maximum) on random
    /// vectors of many lengths, with ties between blocks and inside one
    /// (the lowest index wins), a maximum in the last entry, a constant
    /// vector, row views, in f32 and f64.
    #[test]
    fn device_argmax_equals_the_first_maximum_of_a_scan() {
        let Some(ctx) = super::super::test_context() else { return };
        let mut seed = 0x5eed_u64 ^ std::process::id() as u64;
        for precision in [Precision::F32, Precision::F64] {
            if !ctx.supports(precision) {
                continue;
            }
            for n in [1usize, 2, 7, 41, 42, 43, 100, 2000, 4097, 16000] {
                for case in 0..5 {
                    // Values on a coarse grid (exact in f32) so that ties happen.
                    let mut v: Vec<f64> = (0..n).map(|_| (uniform(&mut seed) * 64.0).floor() / 8.0).collect();
                    match case {
                        1 => v.iter_mut().for_each(|x| *x = 0.5),
                        2 => {
                            let top = v.iter().cloned().fold(f64::MIN, f64::max);
                            v[n - 1] = top + 1.0;
                        }
                        3 if n > 3 => {
                            // The same maximum early and late: the early one wins.
                            let top = v.iter().cloned().fold(f64::MIN, f64::max) + 2.0;
                            let (a, b) = (n / 3, n - 1);
                            v[a] = top;
                            v[b] = top;
                        }
                        4 => v.iter_mut().for_each(|x| *x = -*x - 1.0),
                        _ => {}
                    }
                    let m = ctx.upload(&v, n, 1, precision).unwrap();
                    assert_eq!(ctx.argmax(&m).unwrap(), first_max(&v), "n = {n}, case {case}, {precision:?}");
                    if n > 5 {
                        let view = m.rows_view(2, n - 4).unwrap();
                        let (i, x) = first_max(&v[2..n - 2]);
                        assert_eq!(ctx.argmax(&view).unwrap(), (i, x), "view, n = {n}, case {case}, {precision:?}");
                    }
                }
            }
        }
    }

    /// NaN or an infinity anywhere (first, middle, last entry; also where a
    /// larger finite value precedes it) is a typed error, never a panic or a
    /// silently skipped entry.
    #[test]
    fn device_argmax_reports_nan_and_infinity() {
        let Some(ctx) = super::super::test_context() else { return };
        for precision in [Precision::F32, Precision::F64] {
            if !ctx.supports(precision) {
                continue;
            }
            for n in [1usize, 5, 2000] {
                for at in [0, n / 2, n - 1] {
                    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
                        let mut v: Vec<f64> = (0..n).map(|i| (i % 13) as f64).collect();
                        v[at] = bad;
                        let m = ctx.upload(&v, n, 1, precision).unwrap();
                        match ctx.argmax(&m) {
                            Err(Error::NonFinite { row, .. }) => assert!(row <= at, "n = {n}, at {at}, {bad}, {precision:?}: row {row}"),
                            other => panic!("n = {n}, at {at}, {bad}, {precision:?}: {other:?}"),
                        }
                    }
                }
            }
        }
        let two = ctx.zeros(4, 2, Precision::F32).unwrap();
        assert!(matches!(ctx.argmax(&two), Err(Error::DimensionMismatch { .. })));
    }
}
