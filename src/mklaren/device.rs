//! mklaren's fit with every O(n) part of a step on a GPU in `f64`: one
//! blocking wait per pivot step, O(K) numbers across the link each way.
//!
//! # What lives where
//!
//! Each distinct input X goes up once: a dense one as stored (column-major),
//! laid out as rows on the device ([`upload_rows`]); a sparse one (CSR) as
//! its three arrays ([`GpuContext::upload_csr`], `12 nnz + 4 (n + 1)`
//! bytes, never the n x d dense copy) with its squared row norms `||x_k||^2`
//! (n numbers, computed once on the host as the host fit does). Per kernel q (C = delta + 1 + K columns): `F_q = [B_q | 1 | G_q]` (n x C;
//! the look-ahead block of Eq. 12-13, a column of ones, the exact Cholesky
//! columns), `D_q` (n x 4: the exact residual diagonal `d`, the look-ahead's
//! copy of it, the candidate norms), `F_q^T F_q` and `F_q^T [r u]`. Shared:
//! `[r u]` ((n + K) x 2, the augmented residual and LAR direction), the fit
//! `mu`, `H` ((n + K) x K), and a state vector `st` of a few numbers (the
//! pivots, the chosen kernel, step length, sums) that the dispatches write
//! and read, so that nothing the host would have to wait for sits between
//! them. The shader is `shaders/mklaren_step.wgsl` (its header gives every
//! mode), planned by `crate::gpu::mklaren`.
//!
//! # One step (l = 0 .. K-1), recorded as one plan, then one read
//!
//! 1. Direction (l > 0): `u = H w` with the weights `w` the host wrote at
//!    the last wait (and the active correlation `C` copied into `st`).
//! 2. Look-ahead (Eq. 12-13) of the kernels whose decomposition changed (all
//!    at l = 0, then the one that took the last step): `d` copied, then
//!    delta greedy ICD steps, each: the pivot `i = argmax d` (block arg-max
//!    per workgroup, then one workgroup combines the blocks on the device:
//!    the first maximum, as a sequential scan; NaN or an infinity raises a
//!    flag in `st`), the kernel column `K(:, i)` and `p = F F(i,:)^T` (over
//!    the columns of F already computed), each one narrow dispatch that
//!    reads i from `st` and row i of X or F where it lies (one invocation
//!    per row of X or F, each row read once; on sparse rows each
//!    invocation merges its row's sorted column indices with the pivot's,
//!    at most `nnz_k + nnz_i <= 2 MAX_DEVICE_ROW_NNZ` passes, into
//!    `<x_k, x_i>` and, for RBF and Laplacian, `||x_k||^2 + ||x_i||^2 - 2
//!    <x_k, x_i>` clamped at 0, near duplicates from the merged differences:
//!    the statistic of the CPU's sparse columns, [`crate::sparse`]), and the Cholesky column
//!    (Eq. 2-3) reading i and `d_i` from `st` (a column of zeros where `d_i`
//!    is at the tolerance, as the host's look-ahead stops there). Then `F^T F` (so
//!    `B^T B`, `B^T 1` and n; like every sum over the rows, partial sums
//!    per chunk of rows and one more dispatch that adds the chunks), and
//!    per row the candidate norm
//!    `||P B z_i||^2 = z_i^T (B^T B - B^T 1 1^T B / n) z_i` (Eq. 14) and its
//!    maximum (the norm floor `1e-10 max`).
//! 3. Scores (Eq. 15-16, 11): per kernel `F^T [r u]` (so `B^T r`, `B^T u`,
//!    `1^T r`, `1^T u`), then per row `v = B^T [r u] - B^T 1 (1^T [r u]) /
//!    n`, `(c_i, a_i) = B(i,:) v s / ||P B z_i||` and the LAR step of Eq. 11
//!    (0 at l = 0); the key `(step, -|c_i|, i)` is reduced to its minimum per
//!    workgroup and per kernel, then over the kernels (ties: the lower
//!    kernel), exactly the total order of the host's candidates.
//! 4. Exact column: every kernel's Cholesky step runs predicated on "this
//!    kernel was chosen" (`st`), so the host need not know the kernel yet:
//!    the chosen kernel's step (its kernel column, `p`, `d_i` into `st`, the
//!    Cholesky column) writes `g` and updates its `d`; `g` is copied into
//!    its `G`. Every other kernel's dispatches are recorded and do nothing.
//! 5. LAR (Eq. 4-5, 8, 11): `h = s (g - mean) / ||g - mean|| (1 + lambda)^{-1/2}`
//!    with `sqrt(lambda) (1 + lambda)^{-1/2}` in augmented row n + l, `c =
//!    h^T r`, `a = h^T u`, `t = min(step(C, c, a), 1)`, `mu += t u`, `r -=
//!    t u`, the sign s of `h^T r`, `h` into column l of `H`, and `H^T h`,
//!    `H^T r`.
//!
//! The one read: the first 16 numbers of `st` (flags, kernel, pivot, t,
//! sign, the sums that give the mean and the norm) and `H^T h`, `H^T r`
//! (2K numbers). The host keeps `H^T H`, solves the l x l system for the
//! weights `w = (H_A^T H_A)^{-1} H_A^T r` and the path of `beta` as the host
//! fit does, and writes `w` and `C = max |H_A^T r|` (K + 1 numbers).
//!
//! # The end
//!
//! The last step (t = 1) on the device; Eq. 18 by CholQR2 of the resident
//! `H` ([`least_squares`]: `K (K + 1)` numbers down) and the kernel weights
//! `||H_q beta_q||` (p numbers down); then `mu` (n numbers, the training
//! predictions) and the rows of `G` at the pivots. `H` never crosses. The
//! transforms keep the pivots' rows dense, taken from the host's input (a
//! sparse one's pivot rows densified, K x d numbers); predictions of new
//! sparse rows run on the CPU ([`FactorTransform`]), those of dense rows on
//! the model's device.
//!
//! The path takes the same kernels and pivots as the host fit: the scores
//! are the same sums in another order (about 1e-16 relative), so only
//! candidates within that of a tie could swap.

use nalgebra::{DMatrix, DVector};

use super::columns::Rows;
use super::fitted::{Assembled, Mklaren, SelectedColumn};
use super::icd::FactorTransform;
use crate::error::Error;
use crate::gpu::mklaren::{MklarenJob, MklarenMode as Mode, NO_SLOT};
use crate::gpu::{GpuContext, GpuCsr, GpuMatrix, KernelCode, Operand, ProductFlags};
use crate::linalg::MatrixProduct;
use crate::precision::Precision;
use crate::{Device, Kernel};

/// The largest look-ahead the device path takes (a row's candidate norm
/// loops over delta^2 entries of M within the shader loop budget); larger
/// ones fit on the host.
pub(crate) const MAX_DEVICE_LOOKAHEAD: usize = 128;

/// The most columns `F_q = [B_q | 1 | G_q]` the device path takes (delta +
/// 1 + K): the look-ahead's Gram matrix is formed as `F^T F` (C^2 outputs
/// over n rows); larger fits take the host path.
pub(crate) const MAX_DEVICE_COLUMNS: usize = 256;

/// Numbers of `st` read back before `H^T h` and `H^T r`.
const HEAD: usize = 16;
/// Numbers of `st` per kernel, from [`kernel_base`].
const PER_KERNEL: usize = 10;

// Slots of `st` (see the shader's header).
const FLAG: usize = 0;
const NONE_LEFT: usize = 1;
const KERNEL: usize = 2;
const PIVOT: usize = 3;
const STEP: usize = 4;
const SIGN: usize = 7;
const D_PIVOT: usize = 8;
const DOTS: usize = 9;
const SUM: usize = 11;
const NORM2: usize = 12;
const DOTS_AFTER: usize = 13;
const ACTIVE: usize = 15;

fn slot(s: usize) -> u32 {
    s as u32
}

/// An input on the device, as the kernel columns read it.
#[derive(Clone)]
enum DeviceRows {
    /// Dense rows (n x d, row-major: [`upload_rows`]).
    Dense(GpuMatrix),
    /// CSR rows with their squared norms (n x 1).
    Sparse(GpuCsr, GpuMatrix),
}

/// One kernel's device state.
struct KernelBuffers<'x> {
    kernel: Kernel,
    x: Rows<'x>,
    xd: DeviceRows,
    f: GpuMatrix,
    dq: GpuMatrix,
    ftf: GpuMatrix,
    ftru: GpuMatrix,
    tolerance: f64,
    /// Look-ahead columns delta (the columns of `B`).
    delta: usize,
    pivots: Vec<usize>,
}

/// The buffers shared by the kernels.
struct Shared {
    st: GpuMatrix,
    ones: GpuMatrix,
    kcol: GpuMatrix,
    pcol: GpuMatrix,
    gsel: GpuMatrix,
    partials: GpuMatrix,
    ru: GpuMatrix,
    fit: GpuMatrix,
    hvec: GpuMatrix,
    h: GpuMatrix,
    w: GpuMatrix,
    /// The partial sums of the column products over n rows ([`plan_dots`]).
    split: GpuMatrix,
    /// Eq. 18 at the end: `R1^{-1}` (K x K), `Q1 = H R1^{-1}`, the
    /// coefficients per kernel (K x p), `H_n` times them (n x p), and the
    /// sums read back (`Q1^T Q1`, `Q1^T mu`, the p squared weights).
    rinv: GpuMatrix,
    q1: GpuMatrix,
    coef: GpuMatrix,
    contrib: GpuMatrix,
    sums: GpuMatrix,
}

fn kernel_base(rank: usize, q: usize) -> usize {
    HEAD + 2 * rank + PER_KERNEL * q
}

fn linear() -> KernelCode {
    KernelCode::of(&Kernel::Linear)
}

/// Records `out = A' B'^T` of the product form `form` (linear; the
/// products of the end with K output columns: `H R1^{-1}`, `H_n C`).
fn product(ctx: &GpuContext, a: &GpuMatrix, b: &GpuMatrix, form: MatrixProduct, out: &GpuMatrix, plan: &mut Vec<crate::gpu::Dispatch>) -> Result<(), Error> {
    let (oa, ob) = Operand::of_product(a, b, form);
    ctx.plan_product(linear(), oa, ob, out, ProductFlags::default(), plan)
}

/// Rows per chunk of the sums over `rows` rows ([`plan_dots`]): at most 64
/// chunks up to 2 million rows, at most 32000 rows a chunk.
fn dot_chunk(rows: usize) -> usize {
    rows.div_ceil(64).clamp(256, 32000)
}

/// Records `out(i, j) = sum_r A(r, i) B(r, j)` over `rows` rows for the `ca`
/// columns of A from `a.1` (row stride `a.2`) and the `cb` of B, written at
/// `o.1 + i o.2 + j` of `o.0`: partial sums per chunk of rows, one
/// invocation per entry and chunk, then one per entry adds the chunks (two
/// dispatches, the partials in `split`).
#[allow(clippy::too_many_arguments)]
fn plan_dots(ctx: &GpuContext, sh: &Shared, a: (&GpuMatrix, usize, usize, usize), b: (&GpuMatrix, usize, usize, usize), rows: usize, o: (&GpuMatrix, usize, usize), plan: &mut Vec<crate::gpu::Dispatch>) -> Result<(), Error> {
    let chunk = dot_chunk(rows);
    let chunks = rows.div_ceil(chunk);
    let entries = a.3 * b.3;
    if entries * chunks > sh.split.nrows() {
        return Err(Error::InvalidParameter { name: "rows", reason: format!("{entries} sums over {chunks} chunks exceed the scratch of {}", sh.split.nrows()) });
    }
    let mut dots = MklarenJob::new(Mode::Dots, rows);
    dots.a = Some((a.0, a.1, a.2));
    dots.b = Some((b.0, b.1, b.2));
    dots.o = Some((&sh.split, 0, 1));
    dots.words = (a.3 as u32, b.3 as u32);
    dots.more_words = (chunk as u32, 0);
    dots.work = (2.0 * (rows * entries) as f64, (rows * (a.3 + b.3) + entries * chunks) as u64);
    ctx.plan_mklaren(&dots, &sh.st, plan)?;
    let mut sum = MklarenJob::new(Mode::DotSum, entries);
    sum.a = Some((&sh.split, 0, 1));
    sum.o = Some(o);
    sum.words = (a.3 as u32, b.3 as u32);
    sum.more_words = (chunks as u32, 0);
    sum.work = ((entries * chunks) as f64, (entries * (chunks + 1)) as u64);
    ctx.plan_mklaren(&sum, &sh.st, plan)
}

/// The most features (columns of X) the device path takes for a dense
/// input: a kernel column's invocation loops over them within the shader
/// loop budget; wider inputs take the host path.
pub(crate) const MAX_DEVICE_FEATURES: usize = crate::gpu::LOOP_BUDGET - 2;

/// The most non-zeros a row of a sparse input may hold on the device path:
/// a kernel column's invocation merges its row with the pivot's, at most
/// `2 MAX_DEVICE_ROW_NNZ` passes and one to leave the loop, within the
/// shader loop budget; inputs with a longer row take the host path.
pub(crate) const MAX_DEVICE_ROW_NNZ: usize = (crate::gpu::LOOP_BUDGET - 2) / 2;

/// What the device fit takes of [`super::MklarenParams`] (checked there).
pub(super) struct Settings<'a> {
    /// The kernels.
    pub(super) kernels: &'a [Kernel],
    /// Total rank K.
    pub(super) rank: usize,
    /// Look-ahead delta.
    pub(super) lookahead: usize,
    /// Ridge lambda.
    pub(super) lambda: f64,
    /// The working precision asked for.
    pub(super) precision: crate::precision::WorkingPrecision,
}

/// Fits on the GPU of `device` where it takes this path (a GPU with `f64`
/// working precision, every buffer within one binding, at most
/// [`MAX_DEVICE_LOOKAHEAD`] look-ahead columns, [`MAX_DEVICE_COLUMNS`]
/// columns of `F`, dense inputs of at most [`MAX_DEVICE_FEATURES`] features
/// and sparse ones of at most [`MAX_DEVICE_ROW_NNZ`] non-zeros a row, each
/// within the sizes [`GpuContext::upload_csr`] takes); `None` elsewhere
/// (the host path fits). The inputs `xs` are finite, checked by the caller.
///
/// Errors: [`Error::RankDeficient`] when no candidate is left or a chosen
/// column is constant; [`Error::NonFinite`] when a device step meets NaN or
/// an infinity; those of the device.
pub(super) fn fit(params: &Settings<'_>, device: &Device, xs: &[Rows<'_>], yc: &DVector<f64>, target_mean: f64) -> Result<Option<Mklaren>, Error> {
    let Device::Gpu(ctx) = device else { return Ok(None) };
    if device.working_precision(params.precision)? != Precision::F64 {
        return Ok(None);
    }
    let n = xs[0].nrows();
    let rank = params.rank;
    let delta = params.lookahead.min(n);
    if delta > MAX_DEVICE_LOOKAHEAD || delta + 1 + rank > MAX_DEVICE_COLUMNS || xs.iter().any(too_wide) || n.div_ceil(crate::gpu::mklaren::MKLAREN_WORKGROUP) > ctx.max_workgroups as usize || n >= (1 << 31) / 8 {
        return Ok(None);
    }
    let Some(mut kernels) = prepare(ctx, params, xs, delta)? else { return Ok(None) };
    let Some(sh) = shared(ctx, &kernels, n, rank, yc)? else { return Ok(None) };
    run(ctx, device, params, &mut kernels, &sh, n, delta, target_mean).map(Some)
}

/// Whether the kernel columns of `x` would loop beyond the shader loop
/// budget (more than [`MAX_DEVICE_FEATURES`] features dense, more than
/// [`MAX_DEVICE_ROW_NNZ`] non-zeros in a sparse row).
fn too_wide(x: &Rows<'_>) -> bool {
    match x {
        Rows::Dense(x) => x.ncols() > MAX_DEVICE_FEATURES,
        Rows::Sparse(x) => x.row_offsets().windows(2).any(|w| w[1] - w[0] > MAX_DEVICE_ROW_NNZ),
    }
}

/// Each kernel's buffers (each distinct input uploaded once, its squared
/// row norms computed once), or `None` where a buffer would span several
/// bindings.
fn prepare<'x>(ctx: &GpuContext, params: &Settings<'_>, xs: &[Rows<'x>], delta: usize) -> Result<Option<Vec<KernelBuffers<'x>>>, Error> {
    let n = xs[0].nrows();
    let cc = delta + 1 + params.rank;
    let f64p = Precision::F64;
    let mut uploaded: Vec<(Rows<'x>, DeviceRows)> = Vec::new();
    let mut norms: Vec<(Rows<'x>, Vec<f64>)> = Vec::new();
    let mut out = Vec::with_capacity(xs.len());
    for (q, x) in xs.iter().enumerate() {
        let kernel = params.kernels[q];
        // ||x_k||^2 once per distinct input where it is needed: for the
        // diagonal of the kernels that are not distance-based, and on the
        // device for the kernel columns of sparse rows.
        let sparse = matches!(x, Rows::Sparse(_));
        let sq = if sparse || !kernel.is_distance_based() {
            match norms.iter().find(|(k, _)| k.same(x)) {
                Some((_, v)) => v.clone(),
                None => {
                    let v = x.squared_norms();
                    norms.push((*x, v.clone()));
                    v
                }
            }
        } else {
            Vec::new()
        };
        let xd = match uploaded.iter().find(|(k, _)| k.same(x)) {
            Some((_, m)) => m.clone(),
            None => match upload_input(ctx, x, &sq)? {
                Some(m) => {
                    uploaded.push((*x, m.clone()));
                    m
                }
                None => return Ok(None),
            },
        };
        // diag(K): 1 for a distance-based kernel (filled on the device),
        // else from the rows' squared norms.
        let diagonal = if kernel.is_distance_based() { None } else { Some(kernel.diagonal_from_sq_norms(&sq)?) };
        let top = diagonal.as_ref().map_or(1.0, |d| d.iter().fold(0.0f64, |a, &b| a.max(b)));
        let kb = KernelBuffers {
            kernel,
            x: *x,
            f: ctx.zeros(n, cc, f64p)?,
            dq: ctx.zeros(n, 4, f64p)?,
            ftf: ctx.zeros(cc, cc, f64p)?,
            ftru: ctx.zeros(cc, 2, f64p)?,
            tolerance: 1e-12 * top,
            delta,
            pivots: Vec::new(),
            xd,
        };
        let rows = match &kb.xd {
            DeviceRows::Dense(m) | DeviceRows::Sparse(_, m) => m,
        };
        if ![rows, &kb.f, &kb.dq, &kb.ftf, &kb.ftru].iter().all(|m| ctx.mklaren_operand(m)) {
            return Ok(None);
        }
        // d = diag(K) into column 0 of D, ones into column delta of F.
        let mut plan = Vec::new();
        let st = ctx.zeros(1, 1, f64p)?;
        let mut copy = MklarenJob::new(Mode::Copy, n);
        let d = match &diagonal {
            Some(diagonal) => Some(ctx.upload(diagonal.as_slice(), n, 1, f64p)?),
            None => None,
        };
        match &d {
            Some(d) => copy.a = Some((d, 0, 1)),
            None => {
                copy.words = (1, 0);
                copy.scalars = (1.0, 0.0);
            }
        }
        copy.o = Some((&kb.dq, 0, 4));
        ctx.plan_mklaren(&copy, &st, &mut plan)?;
        let mut fill = MklarenJob::new(Mode::Copy, n);
        fill.o = Some((&kb.f, delta, cc));
        fill.words = (1, 0);
        fill.scalars = (1.0, 0.0);
        ctx.plan_mklaren(&fill, &st, &mut plan)?;
        ctx.run_plan(plan)?;
        out.push(kb);
    }
    Ok(Some(out))
}

/// An input on the device as the kernel columns read it: dense rows by
/// [`upload_rows`]; sparse rows as their CSR arrays
/// ([`GpuContext::upload_csr`], never the n x d dense copy) and their
/// squared norms `sq` (n numbers, unread for dense rows); `None` where a buffer would span several
/// bindings or the CSR arrays exceed the sizes the device takes.
fn upload_input(ctx: &GpuContext, x: &Rows<'_>, sq: &[f64]) -> Result<Option<DeviceRows>, Error> {
    match x {
        Rows::Dense(x) => Ok(upload_rows(ctx, x)?.map(DeviceRows::Dense)),
        Rows::Sparse(x) => {
            let csr = match ctx.upload_csr(x, Precision::F64) {
                Ok(csr) => csr,
                Err(Error::TooLargeForGpu { .. }) => return Ok(None),
                Err(e) => return Err(e),
            };
            let norms = ctx.upload(sq, sq.len(), 1, Precision::F64)?;
            Ok(Some(DeviceRows::Sparse(csr, norms)))
        }
    }
}

/// X (n x d) on the device as the rows the kernel columns read: sent as
/// it is stored (column-major, so the rows of `X^T`: a copy, no transpose
/// on the host), then laid out by d strided copies on the device; `None`
/// where either layout would span several bindings. `x` is finite (the
/// fit's inputs are checked once, where they enter: `rows_per_kernel`).
fn upload_rows(ctx: &GpuContext, x: &DMatrix<f64>) -> Result<Option<GpuMatrix>, Error> {
    let (n, d) = x.shape();
    let f64p = Precision::F64;
    let xt = ctx.zeros(d, n, f64p)?;
    let rows = ctx.zeros(n, d, f64p)?;
    if !ctx.mklaren_operand(&xt) || !ctx.mklaren_operand(&rows) {
        return Ok(None);
    }
    ctx.write_rows(&xt, x.as_slice())?;
    let st = ctx.zeros(1, 1, f64p)?;
    let mut plan = Vec::with_capacity(d);
    for k in 0..d {
        let mut copy = MklarenJob::new(Mode::Copy, n);
        copy.a = Some((&xt, k * n, 1));
        copy.o = Some((&rows, k, d));
        ctx.plan_mklaren(&copy, &st, &mut plan)?;
    }
    ctx.run_plan(plan)?;
    Ok(Some(rows))
}

/// The shared buffers: the residual starts at the centred target, all else
/// at zero; `None` where one would span several bindings.
fn shared(ctx: &GpuContext, kernels: &[KernelBuffers<'_>], n: usize, rank: usize, yc: &DVector<f64>) -> Result<Option<Shared>, Error> {
    let f64p = Precision::F64;
    let aug = n + rank;
    let cc = kernels[0].f.ncols();
    let mut ru = vec![0.0; 2 * aug];
    for (i, v) in yc.iter().enumerate() {
        ru[2 * i] = *v;
    }
    let sh = Shared {
        st: ctx.zeros(kernel_base(rank, kernels.len()), 1, f64p)?,
        ones: ctx.zeros(n, 1, f64p)?,
        kcol: ctx.zeros(n, 1, f64p)?,
        pcol: ctx.zeros(n, 1, f64p)?,
        gsel: ctx.zeros(n, 1, f64p)?,
        partials: ctx.zeros(GpuContext::mklaren_partials(n), 1, f64p)?,
        ru: ctx.upload(&ru, aug, 2, f64p)?,
        fit: ctx.zeros(aug, 1, f64p)?,
        hvec: ctx.zeros(aug, 1, f64p)?,
        h: ctx.zeros(aug, rank, f64p)?,
        w: ctx.zeros(rank + 1, 1, f64p)?,
        // The most sums over rows: F^T F (C x C), F^T [r u] (C x 2), H^T h (K).
        split: ctx.zeros((cc * cc).max(2 * cc).max(rank) * aug.div_ceil(dot_chunk(aug)), 1, f64p)?,
        rinv: ctx.zeros(rank, rank, f64p)?,
        q1: ctx.zeros(aug, rank, f64p)?,
        coef: ctx.zeros(rank, kernels.len(), f64p)?,
        contrib: ctx.zeros(n, kernels.len(), f64p)?,
        sums: ctx.zeros(rank * (rank + 1) + kernels.len(), 1, f64p)?,
    };
    let all = [&sh.st, &sh.ones, &sh.kcol, &sh.pcol, &sh.gsel, &sh.partials, &sh.ru, &sh.fit, &sh.hvec, &sh.h, &sh.w, &sh.split, &sh.rinv, &sh.q1, &sh.coef, &sh.contrib, &sh.sums];
    if !all.iter().all(|m| ctx.mklaren_operand(m)) {
        return Ok(None);
    }
    let mut fill = MklarenJob::new(Mode::Copy, n);
    fill.o = Some((&sh.ones, 0, 1));
    fill.words = (1, 0);
    fill.scalars = (1.0, 0.0);
    let mut plan = Vec::new();
    ctx.plan_mklaren(&fill, &sh.st, &mut plan)?;
    ctx.run_plan(plan)?;
    Ok(Some(sh))
}

/// The arg-max of column `col` of `m` (n x `stride`) into `st[slot]`
/// (index) and `st[slot + 1]` (value), also at `also` unless `NO_SLOT`.
fn plan_argmax(ctx: &GpuContext, sh: &Shared, m: &GpuMatrix, col: usize, stride: usize, slot: u32, also: u32, plan: &mut Vec<crate::gpu::Dispatch>) -> Result<(), Error> {
    let n = m.nrows();
    let mut block = MklarenJob::new(Mode::ArgBlock, n);
    block.a = Some((m, col, stride));
    block.o = Some((&sh.partials, 0, 1));
    block.work = (2.0 * n as f64, n as u64);
    ctx.plan_mklaren(&block, &sh.st, plan)?;
    let parts = n.div_ceil(crate::gpu::mklaren::MKLAREN_WORKGROUP);
    let mut combine = MklarenJob::new(Mode::Combine, parts);
    combine.a = Some((&sh.partials, 0, 0));
    combine.slots = (slot, also);
    combine.work = (4.0 * parts as f64, 4 * parts as u64);
    ctx.plan_mklaren(&combine, &sh.st, plan)
}

/// Records the look-ahead of kernel `kb` (`base`: its slots in `st`):
/// delta greedy ICD steps from its exact decomposition, then `F^T F`, the
/// candidate norms and their maximum.
#[allow(clippy::too_many_arguments)]
fn plan_refresh(ctx: &GpuContext, sh: &Shared, kb: &KernelBuffers<'_>, base: usize, delta: usize, plan: &mut Vec<crate::gpu::Dispatch>) -> Result<(), Error> {
    let (n, cc) = (kb.f.nrows(), kb.f.ncols());
    let j = kb.pivots.len();
    let mut copy = MklarenJob::new(Mode::Copy, n);
    copy.a = Some((&kb.dq, 0, 4));
    copy.o = Some((&kb.dq, 1, 4));
    ctx.plan_mklaren(&copy, &sh.st, plan)?;
    for t in 0..delta {
        plan_argmax(ctx, sh, &kb.dq, 1, 4, slot(base), if t == 0 { slot(base + 2) } else { NO_SLOT }, plan)?;
        plan_pivot_column(ctx, sh, kb, slot(base), None, (t, j), plan)?;
        let mut icd = MklarenJob::new(Mode::Icd, n);
        icd.a = Some((&sh.kcol, 0, 1));
        icd.b = Some((&sh.pcol, 0, 1));
        icd.c = Some(&kb.dq);
        icd.words = (1, 4);
        icd.o = Some((&kb.f, t, cc));
        icd.slots = (slot(base), slot(base + 1));
        icd.scalars = (kb.tolerance, 0.0);
        icd.work = (6.0 * n as f64, 5 * n as u64);
        ctx.plan_mklaren(&icd, &sh.st, plan)?;
    }
    plan_dots(ctx, sh, (&kb.f, 0, cc, cc), (&kb.f, 0, cc, cc), n, (&kb.ftf, 0, cc), plan)?;
    let mut norms = MklarenJob::new(Mode::CandidateNorm, n);
    norms.a = Some((&kb.f, 0, cc));
    norms.e = Some(&kb.ftf);
    norms.o = Some((&kb.dq, 2, 4));
    norms.words = (delta as u32, 0);
    norms.work = ((2 * delta * delta + 2 * delta) as f64 * n as f64, ((delta + 1) * n) as u64);
    ctx.plan_mklaren(&norms, &sh.st, plan)?;
    plan_argmax(ctx, sh, &kb.dq, 2, 4, slot(base + 4), NO_SLOT, plan)
}

/// Records the kernel column and the combination `p = F F(i,:)^T` of the
/// pivot `i = st[pivot]` into `kcol` and `pcol`, two narrow dispatches that
/// read row i of X and of F where they lie: F masked to the look-ahead
/// columns before `t` and the exact columns before `j`. With a `predicate`
/// (the exact step: this kernel was chosen) both run only where it holds,
/// and `d_i` goes to its slot of `st`.
fn plan_pivot_column(ctx: &GpuContext, sh: &Shared, kb: &KernelBuffers<'_>, pivot: u32, predicate: Option<(u32, u32)>, (t, j): (usize, usize), plan: &mut Vec<crate::gpu::Dispatch>) -> Result<(), Error> {
    let (n, cc) = (kb.f.nrows(), kb.f.ncols());
    let code = KernelCode::of(&kb.kernel);
    let mut column = match &kb.xd {
        DeviceRows::Dense(xd) => {
            let dim = xd.ncols();
            MklarenJob::kernel_column(code, (xd, 0, dim), dim, pivot, (&sh.kcol, 0, 1), n)
        }
        DeviceRows::Sparse(csr, norms) => MklarenJob::sparse_kernel_column(code, csr, norms, pivot, (&sh.kcol, 0, 1)),
    };
    column.predicate = predicate;
    if predicate.is_some() {
        column.b = Some((&kb.dq, 0, 4));
        column.slots.1 = slot(D_PIVOT);
        column.work.1 += 1;
    }
    ctx.plan_mklaren(&column, &sh.st, plan)?;
    let mut combination = MklarenJob::row_dot((&kb.f, 0, cc), (&kb.f, 0, cc), t, (kb.delta + 1, j), pivot, (&sh.pcol, 0, 1), n);
    combination.predicate = predicate;
    ctx.plan_mklaren(&combination, &sh.st, plan)
}

/// Records the scores of kernel `q` (Eq. 14-16, 11) and its best candidate
/// into its slots 6-8.
#[allow(clippy::too_many_arguments)]
fn plan_scores(ctx: &GpuContext, sh: &Shared, kb: &KernelBuffers<'_>, base: usize, n: usize, scale: f64, first: bool, plan: &mut Vec<crate::gpu::Dispatch>) -> Result<(), Error> {
    let cc = kb.f.ncols();
    plan_dots(ctx, sh, (&kb.f, 0, cc, cc), (&sh.ru, 0, 2, 2), n, (&kb.ftru, 0, 2), plan)?;
    let mut score = MklarenJob::new(Mode::Score, n);
    score.a = Some((&kb.f, 0, cc));
    score.b = Some((&kb.dq, 0, 4));
    score.c = Some(&kb.ftru);
    score.e = Some(&kb.ftf);
    score.o = Some((&sh.partials, 0, 1));
    score.slots = (slot(base), NO_SLOT);
    score.words = (kb.delta as u32, first as u32);
    score.scalars = (kb.tolerance, scale);
    score.work = ((4 * kb.delta + 20) as f64 * n as f64, ((kb.delta + 3) * n) as u64);
    ctx.plan_mklaren(&score, &sh.st, plan)?;
    let parts = n.div_ceil(crate::gpu::mklaren::MKLAREN_WORKGROUP);
    let mut combine = MklarenJob::new(Mode::Combine, parts);
    combine.a = Some((&sh.partials, 0, 0));
    combine.slots = (slot(base + 6), NO_SLOT);
    combine.words = (1, 0);
    combine.work = (4.0 * parts as f64, 4 * parts as u64);
    ctx.plan_mklaren(&combine, &sh.st, plan)
}

/// The fit's K steps and the model (see the module docs).
#[allow(clippy::too_many_arguments)]
fn run(ctx: &GpuContext, device: &Device, params: &Settings<'_>, kernels: &mut [KernelBuffers<'_>], sh: &Shared, n: usize, delta: usize, target_mean: f64) -> Result<Mklaren, Error> {
    let rank = params.rank;
    let aug = n + rank;
    let p = kernels.len();
    let scale = 1.0 / (1.0 + params.lambda).sqrt();
    let mut hth = DMatrix::<f64>::zeros(rank, rank);
    let mut beta = DVector::<f64>::zeros(rank);
    let mut weights = DVector::<f64>::zeros(0);
    let mut path = Vec::with_capacity(rank);
    let mut selected: Vec<SelectedColumn> = Vec::with_capacity(rank);
    let mut stale: Vec<usize> = (0..p).collect();
    let head = sh.st.rows_view(0, HEAD + 2 * rank)?;
    let mut wv = vec![0.0; rank + 1];
    for l in 0..rank {
        let mut plan = Vec::new();
        // (1) The direction u = H w and the active correlation.
        if l > 0 {
            let mut active = MklarenJob::new(Mode::Copy, 1);
            active.a = Some((&sh.w, rank, 1));
            active.o = Some((&sh.st, ACTIVE, 1));
            ctx.plan_mklaren(&active, &sh.st, &mut plan)?;
            plan_direction(ctx, sh, rank, aug, &mut plan)?;
        }
        // (2) Look-ahead blocks of the kernels whose decomposition changed.
        for &q in &stale {
            plan_refresh(ctx, sh, &kernels[q], kernel_base(rank, q), delta, &mut plan)?;
        }
        // (3) Scores, the best candidate of each kernel, then of all.
        for (q, kb) in kernels.iter().enumerate() {
            plan_scores(ctx, sh, kb, kernel_base(rank, q), n, scale, l == 0, &mut plan)?;
        }
        let mut choose = MklarenJob::new(Mode::Kernels, p);
        choose.slots = (slot(kernel_base(rank, 0)), PER_KERNEL as u32);
        ctx.plan_mklaren(&choose, &sh.st, &mut plan)?;
        // (4) The exact column, predicated on the chosen kernel.
        for (q, kb) in kernels.iter().enumerate() {
            let chosen = Some((slot(KERNEL), q as u32));
            let j = kb.pivots.len();
            plan_pivot_column(ctx, sh, kb, slot(PIVOT), chosen, (0, j), &mut plan)?;
            let mut icd = MklarenJob::new(Mode::Icd, n);
            icd.a = Some((&sh.kcol, 0, 1));
            icd.b = Some((&sh.pcol, 0, 1));
            icd.c = Some(&kb.dq);
            icd.words = (0, 4);
            icd.o = Some((&sh.gsel, 0, 1));
            icd.slots = (slot(PIVOT), slot(D_PIVOT));
            icd.predicate = chosen;
            icd.work = (6.0 * n as f64, 5 * n as u64);
            ctx.plan_mklaren(&icd, &sh.st, &mut plan)?;
            if j < rank {
                let mut keep = MklarenJob::new(Mode::Copy, n);
                keep.a = Some((&sh.gsel, 0, 1));
                keep.o = Some((&kb.f, kb.delta + 1 + j, kb.f.ncols()));
                keep.predicate = chosen;
                ctx.plan_mklaren(&keep, &sh.st, &mut plan)?;
            }
        }
        // (5) h (Eq. 4-5, augmented), the LAR step (Eq. 8, 11), H^T h, H^T r.
        plan_dots(ctx, sh, (&sh.gsel, 0, 1, 1), (&sh.ones, 0, 1, 1), n, (&sh.st, SUM, 1), &mut plan)?;
        let mut centre = MklarenJob::new(Mode::Elementwise, aug);
        centre.a = Some((&sh.gsel, 0, 1));
        centre.o = Some((&sh.hvec, 0, 1));
        centre.slots = (slot(SUM), NO_SLOT);
        centre.words = (0, n as u32);
        ctx.plan_mklaren(&centre, &sh.st, &mut plan)?;
        plan_dots(ctx, sh, (&sh.hvec, 0, 1, 1), (&sh.hvec, 0, 1, 1), n, (&sh.st, NORM2, 1), &mut plan)?;
        let mut scaled = MklarenJob::new(Mode::Elementwise, aug);
        scaled.o = Some((&sh.hvec, 0, 1));
        scaled.slots = (slot(NORM2), l as u32);
        scaled.words = (1, n as u32);
        scaled.scalars = (scale, params.lambda.sqrt() * scale);
        ctx.plan_mklaren(&scaled, &sh.st, &mut plan)?;
        plan_dots(ctx, sh, (&sh.ru, 0, 2, 2), (&sh.hvec, 0, 1, 1), aug, (&sh.st, DOTS, 1), &mut plan)?;
        let mut step = MklarenJob::new(Mode::Small, 1);
        step.words = (0, (l == 0) as u32);
        ctx.plan_mklaren(&step, &sh.st, &mut plan)?;
        plan_lar_update(ctx, sh, n, aug, &mut plan)?;
        plan_dots(ctx, sh, (&sh.ru, 0, 2, 2), (&sh.hvec, 0, 1, 1), aug, (&sh.st, DOTS_AFTER, 1), &mut plan)?;
        let mut sign = MklarenJob::new(Mode::Small, 1);
        sign.words = (1, 0);
        ctx.plan_mklaren(&sign, &sh.st, &mut plan)?;
        let mut column = MklarenJob::new(Mode::Elementwise, aug);
        column.a = Some((&sh.hvec, 0, 1));
        column.o = Some((&sh.h, l, rank));
        column.slots = (slot(SIGN), NO_SLOT);
        column.words = (3, n as u32);
        ctx.plan_mklaren(&column, &sh.st, &mut plan)?;
        plan_dots(ctx, sh, (&sh.h, 0, rank, rank), (&sh.hvec, 0, 1, 1), aug, (&sh.st, HEAD, 1), &mut plan)?;
        plan_dots(ctx, sh, (&sh.h, 0, rank, rank), (&sh.ru, 0, 2, 1), aug, (&sh.st, HEAD + rank, 1), &mut plan)?;
        ctx.run_plan(plan)?;

        // The step's one wait.
        let v = ctx.download(&head)?;
        if v[FLAG] != 0.0 {
            return Err(Error::NonFinite { what: "a device step of mklaren (NaN or an infinity in a residual diagonal or a score)", row: 0, col: 0 });
        }
        if v[NONE_LEFT] != 0.0 {
            return Err(Error::RankDeficient { requested: rank, reached: l });
        }
        let (q, pivot, t, sign) = (v[KERNEL] as usize, v[PIVOT] as usize, v[STEP], v[SIGN]);
        if q >= p || pivot >= n {
            return Err(Error::Gpu(format!("mklaren's device step chose kernel {} pivot {} of {p} kernels, {n} rows", v[KERNEL], v[PIVOT])));
        }
        let mean = v[SUM] / n as f64;
        let norm = v[NORM2].sqrt();
        if l > 0 {
            for (b, w) in beta.iter_mut().zip(weights.iter()) {
                *b += t * w;
            }
            path.push(beta.clone());
        }
        let kb = &mut kernels[q];
        selected.push(SelectedColumn { kernel: q, pivot, position: kb.pivots.len(), mean, norm, sign });
        kb.pivots.push(pivot);
        stale = vec![q];
        for k in 0..=l {
            hth[(k, l)] = v[HEAD + k];
            hth[(l, k)] = v[HEAD + k];
        }
        let correlations = DVector::from_fn(l + 1, |k, _| v[HEAD + rank + k]);
        let active = correlations.amax();
        let chol = hth.view((0, 0), (l + 1, l + 1)).into_owned().cholesky().ok_or(Error::RankDeficient { requested: rank, reached: l })?;
        weights = chol.solve(&correlations);
        if l + 1 < rank {
            wv.iter_mut().for_each(|x| *x = 0.0);
            wv[..=l].copy_from_slice(weights.as_slice());
            wv[rank] = active;
            ctx.mklaren_write(&sh.w, &wv)?;
        }
    }
    // Last step: gamma = C / A, the least-squares fit (t = 1): u = H w,
    // mu += u, on the device.
    wv.iter_mut().for_each(|x| *x = 0.0);
    wv[..rank].copy_from_slice(weights.as_slice());
    ctx.mklaren_write(&sh.w, &wv)?;
    ctx.mklaren_write(&sh.st.rows_view(STEP, 1)?, &[1.0])?;
    let mut plan = Vec::new();
    plan_direction(ctx, sh, rank, aug, &mut plan)?;
    plan_lar_update(ctx, sh, n, aug, &mut plan)?;
    for (b, w) in beta.iter_mut().zip(weights.iter()) {
        *b += w;
    }
    path.push(beta.clone());
    // Once at the end: Eq. 18 and the kernel weights on the device, then
    // the fit and G at the pivots.
    let coefficients = least_squares(ctx, sh, &hth, aug, plan)?;
    let kernel_weights = kernel_weights(ctx, sh, &coefficients, &selected, n)?;
    let fit = DVector::from_vec(ctx.download(&sh.fit.rows_view(0, n)?)?);
    let mut transforms = Vec::with_capacity(p);
    for kb in kernels.iter() {
        let j = kb.pivots.len();
        let g_at_pivots = if j == 0 {
            DMatrix::zeros(0, 0)
        } else {
            let rows = DMatrix::from_row_slice(j, kb.f.ncols(), &ctx.download(&ctx.gather_rows(&kb.f, &kb.pivots)?)?);
            rows.columns(kb.delta + 1, j).into_owned()
        };
        transforms.push(FactorTransform::from_pivots(kb.kernel, kb.x.select_dense(&kb.pivots)?, &g_at_pivots));
    }
    let parts = Assembled { transforms, selected, coefficients, kernel_weights, fit, path };
    Mklaren::from_parts(device, params.kernels, parts, target_mean, scale)
}

/// The LAR direction `u = H w` from the weights in `w`, written into the
/// second column of `[r u]` (one narrow dispatch, each row of H read once).
fn plan_direction(ctx: &GpuContext, sh: &Shared, rank: usize, aug: usize, plan: &mut Vec<crate::gpu::Dispatch>) -> Result<(), Error> {
    let direction = MklarenJob::row_dot((&sh.h, 0, rank), (&sh.w, 0, 0), rank, (0, 0), NO_SLOT, (&sh.ru, 1, 2), aug);
    ctx.plan_mklaren(&direction, &sh.st, plan)
}

/// The LAR update (Eq. 8) with the step length `t` in `st`: `mu += t u`,
/// `r -= t u`.
fn plan_lar_update(ctx: &GpuContext, sh: &Shared, n: usize, aug: usize, plan: &mut Vec<crate::gpu::Dispatch>) -> Result<(), Error> {
    let mut lar = MklarenJob::new(Mode::Elementwise, aug);
    lar.a = Some((&sh.ru, 0, 2));
    lar.o = Some((&sh.fit, 0, 1));
    lar.slots = (slot(STEP), NO_SLOT);
    lar.words = (2, n as u32);
    lar.work = (4.0 * aug as f64, 5 * aug as u64);
    ctx.plan_mklaren(&lar, &sh.st, plan)
}

/// Eq. 18, `beta = R^{-1} Q^T mu` from the thin QR `H = Q R` of the
/// augmented `H` ((n + K) x K, resident), by CholQR2: `R1` is the Cholesky
/// factor of `H^T H` (the host has it from the steps' reads), `Q1 = H
/// R1^{-1}` on the device, then `Q1^T Q1 = R2^T R2` and `Q1^T mu` come down
/// (K (K + 1) numbers, one wait), and `R = R2 R1`, `Q^T mu = R2^{-T} Q1^T
/// mu`. The second pass restores the orthogonality the first loses to
/// `cond(H)^2` (as Householder's QR, to `cond(H) eps` while `cond(H)^2 eps
/// < 1`). `plan` holds work recorded before (the fit's last step).
///
/// Errors: [`Error::Singular`] where a Cholesky factor does not exist.
fn least_squares(ctx: &GpuContext, sh: &Shared, hth: &DMatrix<f64>, aug: usize, mut plan: Vec<crate::gpu::Dispatch>) -> Result<DVector<f64>, Error> {
    let rank = hth.nrows();
    let singular = Error::Singular("least-squares system of the selected columns (Eq. 18) has no finite solution (degenerate LAR path)");
    let l1 = hth.clone().cholesky().ok_or(singular.clone())?.unpack();
    // R1^{-1} = (L1^{-1})^T, row-major: row i holds column i of L1^{-1}.
    let l1_inv = l1.solve_lower_triangular(&DMatrix::identity(rank, rank)).ok_or(singular.clone())?;
    ctx.write_rows(&sh.rinv, l1_inv.as_slice())?;
    product(ctx, &sh.h, &sh.rinv, MatrixProduct::AB, &sh.q1, &mut plan)?;
    plan_dots(ctx, sh, (&sh.q1, 0, rank, rank), (&sh.q1, 0, rank, rank), aug, (&sh.sums, 0, rank), &mut plan)?;
    plan_dots(ctx, sh, (&sh.q1, 0, rank, rank), (&sh.fit, 0, 1, 1), aug, (&sh.sums, rank * rank, 1), &mut plan)?;
    ctx.run_plan(plan)?;
    let v = ctx.download(&sh.sums.rows_view(0, rank * (rank + 1))?)?;
    let g2 = DMatrix::from_row_slice(rank, rank, &v[..rank * rank]);
    let l2 = g2.cholesky().ok_or(singular.clone())?.unpack();
    let qtmu = DVector::from_column_slice(&v[rank * rank..]);
    // beta = R1^{-1} R2^{-1} R2^{-T} Q1^T mu, R_i = L_i^T.
    let y = l2.solve_lower_triangular(&qtmu).ok_or(singular.clone())?;
    let z = l2.tr_solve_lower_triangular(&y).ok_or(singular.clone())?;
    l1.tr_solve_lower_triangular(&z).ok_or(singular)
}

/// Each kernel's weight `||H_q beta_q||` over the n training rows: `H_n C`
/// on the device, with column q of C the coefficients of kernel q's
/// columns (zero elsewhere), and the squared column norms read back (p
/// numbers, one wait).
fn kernel_weights(ctx: &GpuContext, sh: &Shared, coefficients: &DVector<f64>, selected: &[SelectedColumn], n: usize) -> Result<DVector<f64>, Error> {
    let (rank, p) = (coefficients.len(), sh.coef.ncols());
    let mut c = vec![0.0; rank * p];
    for (l, s) in selected.iter().enumerate() {
        c[l * p + s.kernel] = coefficients[l];
    }
    ctx.write_rows(&sh.coef, &c)?;
    let mut plan = Vec::new();
    product(ctx, &sh.h.rows_view(0, n)?, &sh.coef, MatrixProduct::AB, &sh.contrib, &mut plan)?;
    let base = rank * (rank + 1);
    for q in 0..p {
        plan_dots(ctx, sh, (&sh.contrib, q, p, 1), (&sh.contrib, q, p, 1), n, (&sh.sums, base + q, 1), &mut plan)?;
    }
    ctx.run_plan(plan)?;
    let squares = ctx.download(&sh.sums.rows_view(base, p)?)?;
    Ok(DVector::from_iterator(p, squares.into_iter().map(|v| v.max(0.0).sqrt())))
}
