//! Planning of mklaren's device steps (`shaders/mklaren_step.wgsl`, whose
//! header states what every mode computes): copies, block arg-max and
//! arg-min reductions with their device-side combine, the Cholesky column
//! whose pivot is read from a small device state vector, the look-ahead candidate norms and scores (Eq. 14-16), the LAR step of
//! Eq. 11 and the element-wise parts of the LAR update (Eq. 4-5, 8), and the
//! narrow products a pivot step needs: the kernel column `k(X, x_i)` of the
//! pivot `i` read from the state ([`MklarenJob::kernel_column`]; of a CSR
//! `X`, [`MklarenJob::sparse_kernel_column`], one merge of each row's
//! non-zeros with the pivot's) and a tall
//! matrix times a short vector ([`MklarenJob::row_dot`], `F F(i,:)^T` and
//! `H w`), one invocation per output row, each row of the tall operand read
//! once. The fit that strings them together is `crate::mklaren::device`.
//!
//! Every operand is an `f64` device matrix held in one buffer (the fit
//! checks that before it takes this path), or a CSR matrix of `f64` values
//! ([`GpuCsr`], each array one buffer); offsets are element offsets from
//! the operand's first row. Nothing here reads back or allocates: the
//! dispatches are recorded into a plan that the caller runs.

use bytemuck::Zeroable;

use super::buffers::GpuMatrix;
use super::plan::{Dispatch, PipelineKind};
use super::problem::{KernelCode, Problem};
use super::sparse::GpuCsr;
use super::{GpuContext, LOOP_BUDGET};
use crate::error::{Error, Result};
use crate::precision::Precision;

/// Rows one workgroup of the shader handles (its workgroup size).
pub(crate) const MKLAREN_WORKGROUP: usize = 256;

/// "No state slot" in a job.
pub(crate) const NO_SLOT: u32 = u32::MAX;

/// The modes of `mklaren_step.wgsl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum MklarenMode {
    Copy = 0,
    ArgBlock = 1,
    Score = 2,
    Combine = 3,
    Icd = 5,
    CandidateNorm = 6,
    Kernels = 7,
    Elementwise = 8,
    Small = 9,
    Dots = 10,
    DotSum = 11,
    KernelColumn = 12,
    RowDot = 13,
    SparseKernelColumn = 14,
}

/// One job of `mklaren_step.wgsl`: the words its header names, the two
/// scalars, and the operands (`a`, `b`, `c`, `e`, `o`; `None` binds the
/// state in their place) with the element offsets of `a`, `b` and `o`
/// from the operands' first rows.
#[derive(Clone)]
pub(crate) struct MklarenJob<'a> {
    pub(crate) mode: MklarenMode,
    /// Invocations (one per row), or partials / kernels for the one-group modes.
    pub(crate) rows: usize,
    pub(crate) a: Option<(&'a GpuMatrix, usize, usize)>,
    pub(crate) b: Option<(&'a GpuMatrix, usize, usize)>,
    pub(crate) c: Option<&'a GpuMatrix>,
    pub(crate) e: Option<&'a GpuMatrix>,
    pub(crate) o: Option<(&'a GpuMatrix, usize, usize)>,
    /// A CSR operand (mode 14): its values bound as `a`, its row pointers
    /// and column indices beside the operands.
    pub(crate) csr: Option<&'a GpuCsr>,
    pub(crate) slots: (u32, u32),
    pub(crate) predicate: Option<(u32, u32)>,
    pub(crate) words: (u32, u32),
    /// Words 14 and 15.
    pub(crate) more_words: (u32, u32),
    pub(crate) scalars: (f64, f64),
    /// Flops and numbers moved, for the counters.
    pub(crate) work: (f64, u64),
    /// Kernel-function evaluations, for the counters.
    pub(crate) evaluations: u64,
}

impl<'a> MklarenJob<'a> {
    /// A job of `mode` over `rows` with no operands, no predicate and zero words.
    pub(crate) fn new(mode: MklarenMode, rows: usize) -> Self {
        MklarenJob { mode, rows, a: None, b: None, c: None, e: None, o: None, csr: None, slots: (NO_SLOT, NO_SLOT), predicate: None, words: (0, 0), more_words: (0, 0), scalars: (0.0, 0.0), work: (rows as f64, 2 * rows as u64), evaluations: 0 }
    }

    /// Mode 12 over `rows` rows: `o(r) = k(x_r, x_p)` with `x_r` the `dim`
    /// numbers at `x.1 + r x.2` of `x.0` and the pivot `p = st[pivot]`; the
    /// counted work is the true one (the statistic's `2 dim` or `3 dim`
    /// flops a row, `rows dim + dim + rows` numbers, `rows` evaluations).
    pub(crate) fn kernel_column(code: KernelCode, x: (&'a GpuMatrix, usize, usize), dim: usize, pivot: u32, o: (&'a GpuMatrix, usize, usize), rows: usize) -> Self {
        let mut job = MklarenJob::new(MklarenMode::KernelColumn, rows);
        job.a = Some(x);
        job.o = Some(o);
        job.slots = (pivot, NO_SLOT);
        job.words = (dim as u32, code.kind);
        job.more_words = (code.degree, 0);
        job.scalars = (code.gamma, code.coef0);
        let statistic = if code.is_distance() { 3 } else { 2 };
        job.work = ((statistic * rows * dim) as f64, (rows * dim + dim + rows) as u64);
        job.evaluations = rows as u64;
        job
    }

    /// Mode 14 over the rows of the CSR `x`: `o(r) = k(x_r, x_p)` with the
    /// pivot `p = st[pivot]`, the statistic from one merge of the two rows'
    /// sorted column indices (`<x_r, x_p>`, and for RBF and Laplacian
    /// `||x_r||^2 + ||x_p||^2 - 2 <x_r, x_p>` from the squared row norms
    /// `norms` (n x 1), clamped at 0, near duplicates from the merged
    /// differences). The merge makes at most `nnz(x_r) + nnz(x_p) <= 2
    /// longest` passes (`longest`: the non-zeros of `x`'s longest row). The
    /// counted work: `rows` evaluations; the numbers moved are the three
    /// arrays of `x` once (index words counted as half a number), the pivot's
    /// row, the norms (distance kernels) and the output; the flops count the
    /// pivot's row at the mean row length (the host does not know the
    /// pivot): `2 nnz(x)` merged entries at 1 flop each (the inner product
    /// over the shared columns) or 3 (the merged differences as well), and 6
    /// a row for the statistic.
    pub(crate) fn sparse_kernel_column(code: KernelCode, x: &'a GpuCsr, norms: &'a GpuMatrix, pivot: u32, o: (&'a GpuMatrix, usize, usize)) -> Self {
        let rows = x.nrows();
        let longest = x.longest_row();
        let mut job = MklarenJob::new(MklarenMode::SparseKernelColumn, rows);
        job.csr = Some(x);
        job.c = Some(norms);
        job.o = Some(o);
        job.slots = (pivot, NO_SLOT);
        job.words = (0, code.kind);
        job.more_words = (code.degree, (2 * longest).min(u32::MAX as usize) as u32);
        job.scalars = (code.gamma, code.coef0);
        let (nnz, mean) = (x.nnz(), x.nnz().div_ceil(rows.max(1)));
        let per_entry = if code.is_distance() { 3 } else { 1 };
        job.work = ((per_entry * 2 * nnz + 6 * rows) as f64, (nnz + nnz.div_ceil(2) + (rows + 1).div_ceil(2) + mean + mean.div_ceil(2) + rows + if code.is_distance() { rows } else { 0 }) as u64);
        job.evaluations = rows as u64;
        job
    }

    /// Mode 13 over `rows` rows: `o(r) = sum_j a(r, j) b(p, j)` over the
    /// columns `j < front` and `back.0 <= j < back.0 + back.1` (rows of `a`
    /// and `b` at their offsets and strides), `p = st[pivot]` or 0 where
    /// `pivot` is [`NO_SLOT`]; the counted work is the true one.
    pub(crate) fn row_dot(a: (&'a GpuMatrix, usize, usize), b: (&'a GpuMatrix, usize, usize), front: usize, back: (usize, usize), pivot: u32, o: (&'a GpuMatrix, usize, usize), rows: usize) -> Self {
        let mut job = MklarenJob::new(MklarenMode::RowDot, rows);
        job.a = Some(a);
        job.b = Some(b);
        job.o = Some(o);
        job.slots = (pivot, NO_SLOT);
        job.words = (front as u32, back.0 as u32);
        job.more_words = (back.1 as u32, 0);
        let m = front + back.1;
        job.work = ((2 * rows * m) as f64, (rows * m + m + rows) as u64);
        job
    }
}

/// The element offset of the first row of `m` in its buffer, with `m` in
/// one buffer.
fn base(m: &GpuMatrix) -> Result<(usize, &wgpu::Buffer)> {
    if !m.block_breaks().is_empty() {
        return Err(Error::InvalidParameter { name: "operand", reason: "a mklaren step's operand must lie in one device buffer".into() });
    }
    let s = m.locate(0);
    Ok((s.local_row * m.ncols(), m.buffer(s.block)))
}

fn word(v: usize, what: &'static str) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::InvalidParameter { name: what, reason: format!("{v} does not fit a shader word") })
}

impl GpuContext {
    /// Records one job of `mklaren_step.wgsl` with the state vector `st`.
    ///
    /// Errors: an operand in more than one buffer, or not `f64`; an offset
    /// or count beyond a shader word; more workgroups than the grid allows.
    pub(crate) fn plan_mklaren(&self, job: &MklarenJob<'_>, st: &GpuMatrix, plan: &mut Vec<Dispatch>) -> Result<()> {
        let mut operands: Vec<&GpuMatrix> = vec![st];
        operands.extend(job.a.map(|t| t.0));
        operands.extend(job.b.map(|t| t.0));
        operands.extend(job.c);
        operands.extend(job.e);
        operands.extend(job.o.map(|t| t.0));
        if self.check_same(&operands)? != Precision::F64 {
            return Err(Error::Unsupported("mklaren's device steps in f32".into()));
        }
        let (_, st_buffer) = base(st)?;
        let st_base = base(st)?.0;
        if st_base != 0 {
            return Err(Error::InvalidParameter { name: "state", reason: "the state of mklaren's device steps must start its buffer".into() });
        }
        let strided = |t: Option<(&GpuMatrix, usize, usize)>| -> Result<(u32, u32, wgpu::Buffer)> {
            match t {
                None => Ok((0, 0, st_buffer.clone())),
                Some((m, off, rs)) => {
                    let (b0, buf) = base(m)?;
                    Ok((word(b0 + off, "offset")?, word(rs, "stride")?, buf.clone()))
                }
            }
        };
        let plain = |m: Option<&GpuMatrix>| -> Result<wgpu::Buffer> {
            match m {
                None => Ok(st_buffer.clone()),
                Some(m) => {
                    let (b0, buf) = base(m)?;
                    if b0 != 0 {
                        return Err(Error::InvalidParameter { name: "operand", reason: "operands c and e of a mklaren step must start their buffer".into() });
                    }
                    Ok(buf.clone())
                }
            }
        };
        let (a_off, a_rs, ab) = match job.csr {
            None => strided(job.a)?,
            Some(x) => {
                if x.context_id() != self.id {
                    return Err(Error::DeviceMismatch);
                }
                if x.precision() != Precision::F64 {
                    return Err(Error::Unsupported("mklaren's device steps on an f32 sparse matrix".into()));
                }
                (0, 0, x.arrays()[2].clone())
            }
        };
        // The CSR arrays (row pointers, column indices), or the state in their place.
        let [rp, ci] = match job.csr {
            Some(x) => [x.arrays()[0].clone(), x.arrays()[1].clone()],
            None => [st_buffer.clone(), st_buffer.clone()],
        };
        let (b_off, b_rs, bb) = strided(job.b)?;
        let (o_off, o_rs, ob) = strided(job.o)?;
        let (cb, eb) = (plain(job.c)?, plain(job.e)?);
        // The one loop of modes 12 and 13 takes a pass per column (and a
        // pass to leave each loop), mode 14's merge at most w15 passes:
        // within the budget of LOOP_BUDGET.
        let columns = match job.mode {
            MklarenMode::KernelColumn => job.words.0 as usize,
            MklarenMode::RowDot => job.words.0 as usize + job.more_words.0 as usize,
            MklarenMode::SparseKernelColumn => job.more_words.1 as usize,
            _ => 0,
        };
        if columns + 2 > LOOP_BUDGET {
            return Err(Error::InvalidParameter { name: "columns", reason: format!("{columns} columns exceed a mklaren step's loop budget of {LOOP_BUDGET}") });
        }
        let (pred_slot, pred_value) = job.predicate.unwrap_or((NO_SLOT, 0));
        let words: [u32; 16] = [job.mode as u32, word(job.rows, "rows")?, a_off, a_rs, b_off, b_rs, o_off, o_rs, job.slots.0, job.slots.1, pred_slot, pred_value, job.words.0, job.words.1, job.more_words.0, job.more_words.1];
        let mut problem = Problem::zeroed();
        bytemuck::cast_slice_mut::<Problem, u32>(std::slice::from_mut(&mut problem))[..16].copy_from_slice(&words);
        // Not read by the shader: the work, for the counters.
        problem.u_off = job.work.1.min(u32::MAX as u64) as u32;
        problem.gamma = job.work.0 as f32;
        problem.coef0 = job.evaluations as f32;
        let entries = job.words.0 as usize * job.words.1 as usize;
        let invocations = match job.mode {
            MklarenMode::Combine | MklarenMode::Kernels | MklarenMode::Small => 1,
            MklarenMode::Dots => entries * job.rows.div_ceil((job.more_words.0 as usize).max(1)),
            MklarenMode::DotSum => entries,
            _ => job.rows,
        };
        let groups = invocations.div_ceil(MKLAREN_WORKGROUP).max(1);
        let max = self.max_workgroups as usize;
        let grid = match job.mode {
            MklarenMode::Dots | MklarenMode::DotSum if groups > max => [max, groups.div_ceil(max)],
            _ => [groups, 1],
        };
        if grid[0] > max || grid[1] > max {
            return Err(Error::InvalidParameter { name: "rows", reason: format!("{invocations} invocations need more workgroups than the adapter's {max}") });
        }
        plan.push(Dispatch {
            problem,
            precision: Precision::F64,
            buffers: vec![ab, bb, cb, eb, ob, st_buffer.clone(), rp, ci],
            weights: None,
            grid: [grid[0] as u32, grid[1] as u32, 1],
            pipeline: PipelineKind::Mklaren,
            variant: 0,
            params: job.scalars,
        });
        Ok(())
    }

    /// Whether `m` is an `f64` matrix in one buffer of this context (an
    /// operand mklaren's device steps accept).
    pub(crate) fn mklaren_operand(&self, m: &GpuMatrix) -> bool {
        self.check_owned(m).is_ok() && m.precision() == Precision::F64 && m.block_breaks().is_empty()
    }

    /// Writes `values` (finite) into the first rows of the `f64` column `m`
    /// (one counted upload of `8 values.len()` bytes; nothing allocated).
    ///
    /// Errors: more values than rows, a matrix of more than one column or
    /// not in one buffer, a non-finite value.
    pub(crate) fn mklaren_write(&self, m: &GpuMatrix, values: &[f64]) -> Result<()> {
        if !self.mklaren_operand(m) || m.ncols() != 1 || values.len() > m.nrows() {
            return Err(Error::InvalidParameter { name: "values", reason: format!("{} values for a {} x {} device column", values.len(), m.nrows(), m.ncols()) });
        }
        if let Some(row) = values.iter().position(|v| !v.is_finite()) {
            return Err(Error::NonFinite { what: "values written to the device", row, col: 0 });
        }
        let (b0, buffer) = base(m)?;
        self.write_counted(buffer, (b0 * 8) as u64, bytemuck::cast_slice(values));
        Ok(())
    }

    /// Partials (4 numbers per workgroup) a block reduction of `rows` rows writes.
    pub(crate) fn mklaren_partials(rows: usize) -> usize {
        4 * rows.div_ceil(MKLAREN_WORKGROUP).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::counters::ShapeKind;
    use crate::Kernel;
    use nalgebra::DMatrix;

    use crate::test_support::seed;

    /// The test context where it computes in `f64`.
    fn f64_context() -> Option<GpuContext> {
        super::super::test_context().filter(|ctx| ctx.supports(Precision::F64))
    }

    /// A tiny deterministic generator: uniform in [-1, 1).
    fn uniform(seed: &mut u64) -> f64 {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        2.0 * ((*seed >> 11) as f64 / (1u64 << 53) as f64) - 1.0
    }

    fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
        assert_eq!(got.len(), want.len(), "{what}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= tol * w.abs().max(1.0), "{what}: row {i}: {g:e} vs {w:e}");
        }
    }

    /// Modes 12 and 13 against a CPU `f64` reference on fresh random inputs
    /// (n not a multiple of the workgroup's 256, d not a multiple of 4): the
    /// kernel column of the pivot read from the state for every kernel
    /// mklaren takes (RBF, Laplacian, linear, polynomial), with `d_p` copied
    /// to its slot and the counted work the true one (n evaluations, `n d + d
    /// + n + 1` numbers); the masked product `F F(p,:)^T` at the pivot and a
    /// plain `H w` into a strided column; a predicate that does not hold
    /// leaves the output as it was. Tolerance `1e-12 max(1, |ref|)`: the
    /// statistic (at most 13 terms) differs from the reference by a few
    /// roundings at most (an FMA, the order of the sum), amplified at most
    /// by the polynomial's degree 3 and `exp`'s relative error; a wrong
    /// row, column, mask or pivot moves entries by O(1).
    #[test]
    fn narrow_kernel_column_and_row_products_match_the_cpu() {
        let Some(ctx) = f64_context() else { return };
        let mut s = seed();
        let f64p = Precision::F64;
        let kernels = [Kernel::Rbf { gamma: 0.9 }, Kernel::Laplacian { gamma: 0.7 }, Kernel::Linear, Kernel::Polynomial { gamma: 0.5, coef0: 1.0, degree: 3 }];
        for &(n, d) in &[(1usize, 1usize), (300, 3), (1000, 7), (2049, 13)] {
            let x = DMatrix::from_fn(n, d, |_, _| uniform(&mut s));
            let pivot = ((uniform(&mut s) + 1.0) * 0.5 * n as f64) as usize % n;
            let xrows: Vec<f64> = (0..n).flat_map(|i| x.row(i).iter().copied().collect::<Vec<_>>()).collect();
            let xd = ctx.upload(&xrows, n, d, f64p).unwrap();
            // st: slot 3 the pivot, slot 5 a predicate's value, slot 6 d_p.
            let st = ctx.upload(&[0.0, 0.0, 0.0, pivot as f64, 0.0, 1.0, 0.0, 0.0], 8, 1, f64p).unwrap();
            let dq: Vec<f64> = (0..4 * n).map(|_| uniform(&mut s)).collect();
            let dqd = ctx.upload(&dq, n, 4, f64p).unwrap();
            let z: Vec<f64> = x.row(pivot).iter().copied().collect();
            for kernel in kernels {
                let out = ctx.upload(&vec![7.0; n], n, 1, f64p).unwrap();
                // Not holding (st[5] = 1): nothing written.
                let mut idle = MklarenJob::kernel_column(KernelCode::of(&kernel), (&xd, 0, d), d, 3, (&out, 0, 1), n);
                idle.predicate = Some((5, 0));
                let mut plan = Vec::new();
                ctx.plan_mklaren(&idle, &st, &mut plan).unwrap();
                ctx.run_plan(plan).unwrap();
                assert!(ctx.download(&out).unwrap().iter().all(|&v| v == 7.0), "{kernel:?}: a predicated column ran");
                let mut job = MklarenJob::kernel_column(KernelCode::of(&kernel), (&xd, 0, d), d, 3, (&out, 0, 1), n);
                job.b = Some((&dqd, 0, 4));
                job.slots.1 = 6;
                job.work.1 += 1;
                job.predicate = Some((5, 1));
                let mut plan = Vec::new();
                ctx.plan_mklaren(&job, &st, &mut plan).unwrap();
                ctx.reset_device_counters();
                ctx.run_plan(plan).unwrap();
                let c = ctx.device_counters().class(ShapeKind::KernelMatrix, f64p);
                assert_eq!((c.dispatches, c.kernel_evaluations, c.bytes), (1, n as u64, 8 * (n * d + d + n + 1) as u64), "{kernel:?}: counters {c:?}");
                let want = crate::kernel::kernel_column_cpu(&kernel, &x, &z).unwrap();
                close(&ctx.download(&out).unwrap(), want.as_slice(), 1e-12, &format!("{kernel:?}, n = {n}, d = {d}, pivot {pivot}"));
                assert_eq!(ctx.download(&st).unwrap()[6], dq[4 * pivot], "d_p");
            }
            // p = F F(p,:)^T over the columns [0, 3) and [5, 7) of F (n x 9).
            let cc = 9;
            let f: Vec<f64> = (0..n * cc).map(|_| uniform(&mut s)).collect();
            let fd = ctx.upload(&f, n, cc, f64p).unwrap();
            let out = ctx.zeros(n, 1, f64p).unwrap();
            let job = MklarenJob::row_dot((&fd, 0, cc), (&fd, 0, cc), 3, (5, 2), 3, (&out, 0, 1), n);
            let mut plan = Vec::new();
            ctx.plan_mklaren(&job, &st, &mut plan).unwrap();
            ctx.reset_device_counters();
            ctx.run_plan(plan).unwrap();
            let c = ctx.device_counters().class(ShapeKind::Elementwise, f64p);
            assert_eq!((c.dispatches, c.flops, c.bytes), (1, (2 * 5 * n) as u64, 8 * (5 * n + 5 + n) as u64), "row product counters {c:?}");
            let want: Vec<f64> = (0..n).map(|r| [0, 1, 2, 5, 6].iter().map(|&j| f[r * cc + j] * f[pivot * cc + j]).sum()).collect();
            close(&ctx.download(&out).unwrap(), &want, 1e-12, &format!("F F(p,:)^T, n = {n}"));
            // u = H w (no pivot: the vector's row 0) into column 1 of an n x 2 matrix.
            let w: Vec<f64> = (0..cc).map(|_| uniform(&mut s)).collect();
            let wd = ctx.upload(&w, cc, 1, f64p).unwrap();
            let ru = ctx.upload(&vec![5.0; 2 * n], n, 2, f64p).unwrap();
            let job = MklarenJob::row_dot((&fd, 0, cc), (&wd, 0, 0), cc, (0, 0), NO_SLOT, (&ru, 1, 2), n);
            let mut plan = Vec::new();
            ctx.plan_mklaren(&job, &st, &mut plan).unwrap();
            ctx.run_plan(plan).unwrap();
            let got = ctx.download(&ru).unwrap();
            assert!(got.iter().step_by(2).all(|&v| v == 5.0), "H w wrote outside its column");
            let want: Vec<f64> = (0..n).map(|r| (0..cc).map(|j| f[r * cc + j] * w[j]).sum()).collect();
            close(&got.iter().skip(1).step_by(2).copied().collect::<Vec<_>>(), &want, 1e-12, &format!("H w, n = {n}"));
        }
    }

    /// Mode 14 (the kernel column of a CSR X) against the CPU's sparse
    /// statistic column with `k` applied (`crate::sparse`) on fresh random
    /// rows of 5 % non-zeros with continuous values, for every kernel
    /// (RBF, Laplacian, linear, polynomial, sigmoid), with an empty row, a
    /// copy of the pivot's row (the near-duplicate branch: 0 exactly) and
    /// an empty pivot; `d_p` copied to its slot, a predicate that does not
    /// hold leaves the output as it was, one kernel-matrix dispatch of n
    /// evaluations. Tolerance `1e-12 max(1, |ref|)`: the same inner products
    /// in the same column order (an FMA may round once less), amplified at
    /// most by the polynomial's degree 3 and `exp`'s relative error; a wrong
    /// row, column, pivot or branch moves entries by O(1).
    #[test]
    fn sparse_kernel_column_matches_the_cpu() {
        let Some(ctx) = f64_context() else { return };
        let mut s = seed();
        let f64p = Precision::F64;
        let kernels = [Kernel::Rbf { gamma: 0.3 }, Kernel::Laplacian { gamma: 0.4 }, Kernel::Linear, Kernel::Polynomial { gamma: 0.5, coef0: 1.0, degree: 3 }, Kernel::Sigmoid { gamma: 0.2, coef0: 0.1 }];
        for &(n, d) in &[(1usize, 1usize), (300, 40), (1000, 200)] {
            let mut x = DMatrix::from_fn(n, d, |_, _| if uniform(&mut s).abs() < 0.05 { uniform(&mut s) } else { 0.0 });
            let pivot = ((uniform(&mut s) + 1.0) * 0.5 * n as f64) as usize % n;
            if n > 2 {
                // Row 0 empty, row 1 a copy of the pivot's row.
                x.row_mut(0).fill(0.0);
                let p = x.row(pivot).into_owned();
                x.row_mut(1).copy_from(&p);
            }
            for empty_pivot in [false, true] {
                let mut x = x.clone();
                if empty_pivot {
                    x.row_mut(pivot).fill(0.0);
                }
                let csr = crate::sparse::CsrMatrix::from(&x);
                let norms = crate::sparse::sparse_row_squared_norms(&csr);
                let xd = ctx.upload_csr(&csr, f64p).unwrap();
                let nd = ctx.upload(&norms, n, 1, f64p).unwrap();
                let st = ctx.upload(&[0.0, 0.0, 0.0, pivot as f64, 0.0, 1.0, 0.0, 0.0], 8, 1, f64p).unwrap();
                let dq: Vec<f64> = (0..4 * n).map(|_| uniform(&mut s)).collect();
                let dqd = ctx.upload(&dq, n, 4, f64p).unwrap();
                for kernel in kernels {
                    let what = format!("{kernel:?}, n = {n}, d = {d}, pivot {pivot}, empty pivot {empty_pivot}");
                    let out = ctx.upload(&vec![7.0; n], n, 1, f64p).unwrap();
                    let mut idle = MklarenJob::sparse_kernel_column(KernelCode::of(&kernel), &xd, &nd, 3, (&out, 0, 1));
                    idle.predicate = Some((5, 0));
                    let mut plan = Vec::new();
                    ctx.plan_mklaren(&idle, &st, &mut plan).unwrap();
                    ctx.run_plan(plan).unwrap();
                    assert!(ctx.download(&out).unwrap().iter().all(|&v| v == 7.0), "{what}: a predicated column ran");
                    let mut job = MklarenJob::sparse_kernel_column(KernelCode::of(&kernel), &xd, &nd, 3, (&out, 0, 1));
                    job.b = Some((&dqd, 0, 4));
                    job.slots.1 = 6;
                    job.predicate = Some((5, 1));
                    let mut plan = Vec::new();
                    ctx.plan_mklaren(&job, &st, &mut plan).unwrap();
                    ctx.reset_device_counters();
                    ctx.run_plan(plan).unwrap();
                    let c = ctx.device_counters().class(ShapeKind::KernelMatrix, f64p);
                    assert_eq!((c.dispatches, c.kernel_evaluations), (1, n as u64), "{what}: counters {c:?}");
                    let mut want = vec![0.0; n];
                    crate::sparse::statistic_column_sparse(&kernel, &csr, &norms, pivot, &mut want).unwrap();
                    crate::kernel::apply_to_statistics(&kernel, &mut want);
                    let got = ctx.download(&out).unwrap();
                    close(&got, &want, 1e-12, &what);
                    if n > 2 && !empty_pivot && kernel.is_distance_based() {
                        assert_eq!(got[1], 1.0, "{what}: the pivot's copy");
                    }
                    assert_eq!(ctx.download(&st).unwrap()[6], dq[4 * pivot], "{what}: d_p");
                }
            }
        }
    }

    /// A kernel column whose loop would exceed the loop budget is refused
    /// when planned (a typed error), never run short.
    #[test]
    fn a_kernel_column_beyond_the_loop_budget_is_refused() {
        let Some(ctx) = f64_context() else { return };
        let f64p = Precision::F64;
        let (x, out, st) = (ctx.zeros(1, LOOP_BUDGET, f64p).unwrap(), ctx.zeros(1, 1, f64p).unwrap(), ctx.zeros(4, 1, f64p).unwrap());
        let job = MklarenJob::kernel_column(KernelCode::of(&Kernel::Linear), (&x, 0, LOOP_BUDGET), LOOP_BUDGET, 0, (&out, 0, 1), 1);
        assert!(matches!(ctx.plan_mklaren(&job, &st, &mut Vec::new()), Err(Error::InvalidParameter { .. })));
        let job = MklarenJob::kernel_column(KernelCode::of(&Kernel::Linear), (&x, 0, LOOP_BUDGET), LOOP_BUDGET - 2, 0, (&out, 0, 1), 1);
        assert!(ctx.plan_mklaren(&job, &st, &mut Vec::new()).is_ok());
    }

    /// The shader through naga as wgpu's Vulkan backend takes it (WGSL front
    /// end, validation with `f64`, SPIR-V 1.6 with and without bounds
    /// checks): its modes' workgroup barriers in uniform control flow and
    /// its types are checked without a GPU.
    #[test]
    fn the_mklaren_shader_validates_and_compiles_to_spirv() {
        use naga::back::spv::{self, Capability};
        use naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy};
        use naga::valid::{Capabilities, ValidationFlags, Validator};
        let src = super::super::pipelines::mklaren_source();
        let module = naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{}", e.emit_to_string(&src)));
        let info = Validator::new(ValidationFlags::all(), Capabilities::FLOAT64).validate(&module).unwrap_or_else(|e| panic!("{}", e.emit_to_string(&src)));
        let caps: naga::FastHashSet<Capability> = [Capability::Shader, Capability::Float64].into_iter().collect();
        for policy in [BoundsCheckPolicy::Restrict, BoundsCheckPolicy::Unchecked] {
            let options = spv::Options { lang_version: (1, 6), capabilities: Some(caps.clone()), bounds_check_policies: BoundsCheckPolicies { index: policy, buffer: policy, ..Default::default() }, ..Default::default() };
            spv::write_vec(&module, &info, &options, None).unwrap_or_else(|e| panic!("{policy:?}: {e}"));
        }
        // Without f64 the module is refused: the validation is not vacuous.
        assert!(Validator::new(ValidationFlags::all(), Capabilities::empty()).validate(&module).is_err());
    }
}
