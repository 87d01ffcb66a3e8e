//! The block solver's vectors resident on a GPU ([`DeviceKrylov`]), for
//! operators whose products run there ([`ResidentSymmetricOperator`]): the
//! iteration is the host solver's ([`crate::linalg::block_lanczos_in`]), only where
//! its `n`-vectors live and how their products run differ.
//!
//! **Layout.** The basis is held transposed, `V^T` (`(m + b) x n`
//! row-major, so that a basis vector is a row and the first `c` columns of
//! `V` are a row view), cut by rows of `V` into pieces of at most
//! [`DEPTH_CHUNK`] (one `(m + b) x n_j` matrix each), in two copies: the
//! basis and the target of the thick restart. Every product over the `n`
//! rows (`V^T W`, `W^T W`) is one product per piece added into its output,
//! each of a depth the product engine runs without partial sums of its own
//! (it splits depths of 4096 and more into chunks reduced through a scratch
//! matrix allocated per product). The current block `Q` (the basis block stored last, the
//! one the next product multiplies) is also held as an `n x b` matrix, the
//! operator's input; its product `W = A Q` is another. Everything is
//! allocated once per solve: a block product allocates nothing.
//!
//! **A block product** (`n` the order, `c` the basis columns so far, `b`
//! the block; every product of length `n` on the device, in `f64`):
//!
//! 1. `W = A Q` (the operator);
//! 2. two passes of block Gram-Schmidt, each `H_i = V_c^T W` and
//!    `W <- W - V_c H_i` (the coefficients negated on the device), then
//!    `G = W^T W`; `H_1`, `H_2` and `G` come back in one read
//!    (`(2 c + b) b` numbers), the first of two waits;
//! 3. CholQR2 on the column-equilibrated `W` (`D = diag(G)^{1/2}`): the
//!    host factors `D^{-1} G D^{-1} = L_1 L_1^T` and sends `M_1 = D^{-1}
//!    L_1^{-T}` up; `Q_1 = W M_1` and `G_2 = Q_1^T Q_1` are formed and `G_2`
//!    read back (`b^2` numbers, the second wait); the host factors
//!    `G_2 = L_2 L_2^T` and sends `M_2 = L_2^{-T}` and its transpose up;
//!    `Q = Q_1 M_2` and the basis rows `Q^T = M_2^T Q_1^T` are formed,
//!    and `R = L_2^T L_1^T D`.
//!
//! So a product moves `(2 c + b) b + b^2` numbers down and `3 b^2` up, with
//! two waits, whatever `n`. The decisions are the host solver's: the same
//! breakdown threshold on the column norms and the same factor test
//! ([`crate::linalg::gram_factor`]); where CholQR2 declines, `W` and the basis are
//! read back and the host's column-by-column Gram-Schmidt
//! ([`crate::linalg::gram_schmidt_block`]) answers, its `Q` written back (rare: an
//! invariant subspace or a nearly dependent block).
//!
//! **Convergence and restart.** The Ritz vectors `V_c Y` are formed on the
//! device, multiplied by `A`, and only the `k x k` Gram matrix of their
//! residuals `A U - U diag(theta)` comes back (its diagonal holds the
//! squared residual norms); the `n x k` vectors are read once, when they
//! are the answer. The restart's `V_c Y` and the copy of the residual
//! block are one product of `V^T` with `blockdiag(Y, I_b)` into the other
//! copy of the basis (the copy exact: a product with ones and zeros).
//!
//! The start block is drawn on the host as the host solver draws it (the
//! same numbers for the same seed) and sent up once.

use nalgebra::{DMatrix, DVector};
use rand::rngs::StdRng;

use crate::linalg::{block_lanczos_in, check_arguments, dense_from_operator, gram_factor, gram_schmidt_block, random_rows, widening, AllRows, BlockOutcome, BlockShape, KrylovBasis, LargestSymmetricEigen, SymmetricOperator, TopEigenSettings};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::gpu::{ElementwiseMap, GpuContext, GpuMatrix, KernelCode, Operand, ProductFlags};
use crate::kernel::Kernel;
use crate::linalg::faer_ref;
use crate::precision::Precision;
use crate::resident::{row_major, DeviceMatrix};

/// Longest piece of the rows of `V` in one product (module docs): below the
/// depth from which the product engine cuts a product's depth into
/// chunks with partial sums of their own (two chunks of 2048).
const DEPTH_CHUNK: usize = 4095;

/// `A V` for resident blocks: a symmetric operator whose products run on a
/// GPU, on `f64` device matrices of that GPU.
pub(crate) trait ResidentSymmetricOperator {
    /// Writes `A V` into `out` (`n x c` like `v`; fully overwritten).
    fn apply_resident(&mut self, v: &DeviceMatrix, out: &DeviceMatrix) -> Result<()>;
}

/// The `k x k`-sized buffers of the convergence check, allocated at the
/// first check of a solve.
struct RitzBuffers {
    /// `Y` (the first `c` rows used), `(m + b) x k`.
    y: GpuMatrix,
    /// `U = V_c Y`, `n x k`.
    vectors: GpuMatrix,
    /// `A U`, then `A U - U diag(theta)`, `n x k`.
    product: GpuMatrix,
    /// `-diag(theta)`, `k x k`.
    shift: GpuMatrix,
    /// The residuals' Gram matrix, `k x k`.
    gram: GpuMatrix,
}

/// [`KrylovBasis`] resident on a GPU (module docs), all rows on this
/// process ([`AllRows`]).
pub(crate) struct DeviceKrylov<'a, O: ResidentSymmetricOperator> {
    ctx: &'a GpuContext,
    a: &'a mut O,
    n: usize,
    b: usize,
    /// `V^T` by pieces of rows of `V` (`pieces`), the basis
    /// (`vt[current]`) and the restart's target.
    vt: [Vec<GpuMatrix>; 2],
    /// First row and length of each piece.
    pieces: Vec<(usize, usize)>,
    /// Columns of the basis, `m + b`.
    columns: usize,
    current: usize,
    /// The block stored last (`n x b`), the operator's input.
    q: GpuMatrix,
    /// The operator's output `W`, orthogonalised in place.
    w: GpuMatrix,
    /// `Q_1` of CholQR2.
    q1: GpuMatrix,
    /// What comes back: `H_1`, `H_2`, `G` (`(2 (m + b) + b) x b`).
    small: GpuMatrix,
    /// The negated coefficients of a Gram-Schmidt pass.
    negated: GpuMatrix,
    /// `M` and `M^T` of a CholQR pass (`b x b`).
    factor: GpuMatrix,
    factor_t: GpuMatrix,
    /// `blockdiag(Y, I_b)` of the restart, `(m + b) x (m + b)`.
    restart: GpuMatrix,
    ritz: Option<RitzBuffers>,
    /// `W^T W` when known on the host for the `W` held now.
    gram: Option<DMatrix<f64>>,
    /// `||W||_F` when known on the host for the `W` held now.
    norm: Option<f64>,
}

/// A linear product `out (+)= A' B'^T` recorded into `plan`.
fn product(ctx: &GpuContext, a: Operand<'_>, b: Operand<'_>, out: &GpuMatrix, accumulate: bool, plan: &mut Vec<crate::gpu::Dispatch>) -> Result<()> {
    ctx.plan_product(KernelCode::of(&Kernel::Linear), a, b, out, ProductFlags { accumulate, ..ProductFlags::default() }, plan)
}

impl<'a, O: ResidentSymmetricOperator> DeviceKrylov<'a, O> {
    /// The buffers of a solve of order `n` with blocks of `b` and a basis
    /// of `m` columns on the GPU of `device` (which must hold `f64`).
    ///
    /// Errors: [`Error::Unsupported`] on the CPU or without `f64`; the
    /// device's allocation errors.
    pub(crate) fn new(device: &'a Device, a: &'a mut O, n: usize, b: usize, m: usize) -> Result<Self> {
        let ctx = match device.context() {
            Some(ctx) if ctx.supports(Precision::F64) => ctx,
            _ => return Err(Error::Unsupported(format!("a resident Krylov basis needs f64 on a GPU, not {}", device.describe()))),
        };
        let columns = m.checked_add(b).ok_or(Error::InvalidParameter { name: "n", reason: "the Lanczos basis size overflows".into() })?;
        let zeros = |rows: usize, cols: usize| ctx.zeros(rows, cols, Precision::F64);
        let pieces: Vec<(usize, usize)> = (0..n).step_by(DEPTH_CHUNK).map(|r| (r, DEPTH_CHUNK.min(n - r))).collect();
        let copy = || pieces.iter().map(|&(_, len)| zeros(columns, len)).collect::<Result<Vec<_>>>();
        Ok(DeviceKrylov {
            ctx,
            a,
            n,
            b,
            vt: [copy()?, copy()?],
            pieces,
            columns,
            current: 0,
            q: zeros(n, b)?,
            w: zeros(n, b)?,
            q1: zeros(n, b)?,
            small: zeros(2 * columns + b, b)?,
            negated: zeros(columns, b)?,
            factor: zeros(b, b)?,
            factor_t: zeros(b, b)?,
            restart: zeros(columns, columns)?,
            ritz: None,
            gram: None,
            norm: None,
        })
    }

    fn read(&self, m: &GpuMatrix) -> Result<DMatrix<f64>> {
        Ok(DMatrix::from_row_slice(m.nrows(), m.ncols(), &self.ctx.download(m)?))
    }

    fn write(&self, m: &GpuMatrix, host: &DMatrix<f64>) -> Result<()> {
        self.ctx.write_rows(m, &row_major(host))
    }

    /// `out = X^T X` for an `n x b` matrix `X`, one product per piece of
    /// rows added into `out`.
    fn plan_gram(&self, x: &GpuMatrix, out: &GpuMatrix, plan: &mut Vec<crate::gpu::Dispatch>) -> Result<()> {
        for (j, &(r0, len)) in self.pieces.iter().enumerate() {
            let xj = x.rows_view(r0, len)?;
            product(self.ctx, Operand::transposed(&xj), Operand::transposed(&xj), out, j > 0, plan)?;
        }
        Ok(())
    }

    /// `W^T W`, computed and read back.
    fn gram_of_w(&self) -> Result<DMatrix<f64>> {
        let g = self.small.rows_view(0, self.b)?;
        let mut plan = Vec::new();
        self.plan_gram(&self.w, &g, &mut plan)?;
        self.ctx.run_plan(plan)?;
        self.read(&g)
    }

    /// The basis rows `at..at + count` of `V^T` (`count x n`), read back.
    fn read_basis_rows(&self, at: usize, count: usize) -> Result<DMatrix<f64>> {
        let mut out = DMatrix::<f64>::zeros(count, self.n);
        for (piece, &(r0, len)) in self.vt[self.current].iter().zip(&self.pieces) {
            out.columns_mut(r0, len).copy_from(&self.read(&piece.rows_view(at, count)?)?);
        }
        Ok(out)
    }

    /// Writes `rows` (`count x n`) as the basis rows `at..` of `V^T`.
    fn write_basis_rows(&self, at: usize, rows: &DMatrix<f64>) -> Result<()> {
        for (piece, &(r0, len)) in self.vt[self.current].iter().zip(&self.pieces) {
            self.write(&piece.rows_view(at, rows.nrows())?, &rows.columns(r0, len).into_owned())?;
        }
        Ok(())
    }

    /// CholQR2 of `W` from its Gram matrix `g` (module docs): `R`, with `Q`
    /// stored at basis row `cols`; `None` where a factor is declined.
    fn cholesky_qr2(&mut self, g: &DMatrix<f64>, scales: &[f64], cols: usize) -> Result<Option<DMatrix<f64>>> {
        let b = self.b;
        let equilibrated = DMatrix::from_fn(b, b, |i, j| g[(i, j)] / (scales[i] * scales[j]));
        let Some((l1, l1_inv)) = gram_factor(&equilibrated) else { return Ok(None) };
        let mut m1 = l1_inv.transpose();
        for (i, d) in scales.iter().enumerate() {
            m1.row_mut(i).scale_mut(1.0 / d);
        }
        self.write(&self.factor, &m1)?;
        let g2 = self.small.rows_view(0, b)?;
        let mut plan = Vec::new();
        product(self.ctx, Operand::plain(&self.w), Operand::transposed(&self.factor), &self.q1, false, &mut plan)?;
        self.plan_gram(&self.q1, &g2, &mut plan)?;
        self.ctx.run_plan(plan)?;
        let Some((l2, l2_inv)) = gram_factor(&self.read(&g2)?) else { return Ok(None) };
        self.write(&self.factor, &l2_inv.transpose())?;
        self.write(&self.factor_t, &l2_inv)?;
        let mut plan = Vec::new();
        product(self.ctx, Operand::plain(&self.q1), Operand::transposed(&self.factor), &self.q, false, &mut plan)?;
        for (piece, &(r0, len)) in self.vt[self.current].iter().zip(&self.pieces) {
            product(self.ctx, Operand::plain(&self.factor_t), Operand::plain(&self.q1.rows_view(r0, len)?), &piece.rows_view(cols, b)?, false, &mut plan)?;
        }
        self.ctx.run_plan(plan)?;
        let d = DMatrix::from_diagonal(&DVector::from_column_slice(scales));
        Ok(Some(l2.transpose() * (l1.transpose() * d)))
    }

    /// The host's Gram-Schmidt on `W` and the basis read back, `Q` written
    /// back as the block and the basis rows at `cols`.
    fn gram_schmidt(&mut self, cols: usize, breakdown: f64, rng: &mut StdRng) -> Result<DMatrix<f64>> {
        let mut w = self.read(&self.w)?;
        let basis = if cols > 0 { self.read_basis_rows(0, cols)?.transpose() } else { DMatrix::zeros(self.n, 0) };
        let r = gram_schmidt_block(&AllRows::new(self.n), &basis, cols, &mut w, breakdown, rng)?;
        self.write(&self.q, &w)?;
        self.write_basis_rows(cols, &w.transpose())?;
        Ok(r)
    }
}

impl<O: ResidentSymmetricOperator> KrylovBasis for DeviceKrylov<'_, O> {
    fn draw_start(&mut self, rng: &mut StdRng, start: Option<&DMatrix<f64>>) -> Result<()> {
        if start.is_some() {
            return Err(Error::Unsupported("a start block for a resident Krylov basis".into()));
        }
        let w = random_rows(&AllRows::new(self.n), self.b, rng);
        self.write(&self.w, &w)?;
        self.norm = Some(w.norm());
        self.gram = None;
        Ok(())
    }

    fn apply_block(&mut self, _at: usize) -> Result<()> {
        self.norm = None;
        self.gram = None;
        self.a.apply_resident(&DeviceMatrix::from_gpu(self.q.clone()), &DeviceMatrix::from_gpu(self.w.clone()))
    }

    fn block_norm(&mut self) -> Result<f64> {
        if let Some(norm) = self.norm {
            return Ok(norm);
        }
        let g = self.gram_of_w()?;
        let norm = g.diagonal().sum().max(0.0).sqrt();
        self.norm = Some(norm);
        Ok(norm)
    }

    fn orthogonalise(&mut self, cols: usize) -> Result<DMatrix<f64>> {
        let (ctx, b) = (self.ctx, self.b);
        let negated = self.negated.rows_view(0, cols)?;
        let mut plan = Vec::new();
        for pass in 0..2 {
            let h = self.small.rows_view(pass * cols, cols)?;
            for (j, (piece, &(r0, len))) in self.vt[self.current].iter().zip(&self.pieces).enumerate() {
                product(ctx, Operand::plain(&piece.rows_view(0, cols)?), Operand::transposed(&self.w.rows_view(r0, len)?), &h, j > 0, &mut plan)?;
            }
            ctx.plan_elementwise(ElementwiseMap::Shift { alpha: -1.0, gamma: 0.0 }, &h, &h, &negated, &mut plan)?;
            for (piece, &(r0, len)) in self.vt[self.current].iter().zip(&self.pieces) {
                product(ctx, Operand::transposed(&piece.rows_view(0, cols)?), Operand::transposed(&negated), &self.w.rows_view(r0, len)?, true, &mut plan)?;
            }
        }
        self.plan_gram(&self.w, &self.small.rows_view(2 * cols, b)?, &mut plan)?;
        ctx.run_plan(plan)?;
        let back = self.read(&self.small.rows_view(0, 2 * cols + b)?)?;
        let mut total = DMatrix::<f64>::zeros(cols, b);
        total += back.rows(0, cols);
        total += back.rows(cols, cols);
        self.gram = Some(back.rows(2 * cols, b).into_owned());
        self.norm = None;
        Ok(total)
    }

    fn orthonormalise_into(&mut self, cols: usize, breakdown: f64, rng: &mut StdRng) -> Result<DMatrix<f64>> {
        let g = match self.gram.take() {
            Some(g) => g,
            None => self.gram_of_w()?,
        };
        self.norm = None;
        let scales: Vec<f64> = (0..self.b).map(|j| g[(j, j)].max(0.0).sqrt()).collect();
        if scales.iter().all(|&d| d > breakdown) {
            if let Some(r) = self.cholesky_qr2(&g, &scales, cols)? {
                return Ok(r);
            }
        }
        self.gram_schmidt(cols, breakdown, rng)
    }

    fn converged_vectors(&mut self, cols: usize, y: &DMatrix<f64>, values: &DVector<f64>, floor: f64, bound: f64) -> Result<Option<DMatrix<f64>>> {
        let (ctx, n, k) = (self.ctx, self.n, y.ncols());
        if self.ritz.as_ref().is_none_or(|r| r.vectors.ncols() != k) {
            let zeros = |rows: usize, cols: usize| ctx.zeros(rows, cols, Precision::F64);
            self.ritz = Some(RitzBuffers { y: zeros(self.columns, k)?, vectors: zeros(n, k)?, product: zeros(n, k)?, shift: zeros(k, k)?, gram: zeros(k, k)? });
        }
        let ritz = self.ritz.as_ref().expect("allocated above");
        let yc = ritz.y.rows_view(0, cols)?;
        self.write(&yc, y)?;
        self.write(&ritz.shift, &DMatrix::from_diagonal(&(-values)))?;
        let mut plan = Vec::new();
        for (piece, &(r0, len)) in self.vt[self.current].iter().zip(&self.pieces) {
            product(ctx, Operand::transposed(&piece.rows_view(0, cols)?), Operand::transposed(&yc), &ritz.vectors.rows_view(r0, len)?, false, &mut plan)?;
        }
        ctx.run_plan(plan)?;
        self.a.apply_resident(&DeviceMatrix::from_gpu(ritz.vectors.clone()), &DeviceMatrix::from_gpu(ritz.product.clone()))?;
        let mut plan = Vec::new();
        product(ctx, Operand::plain(&ritz.vectors), Operand::transposed(&ritz.shift), &ritz.product, true, &mut plan)?;
        self.plan_gram(&ritz.product, &ritz.gram, &mut plan)?;
        ctx.run_plan(plan)?;
        let squares = self.read(&ritz.gram)?;
        if !(0..k).filter(|&j| values[j] > floor).all(|j| squares[(j, j)].max(0.0).sqrt() <= bound) {
            return Ok(None);
        }
        Ok(Some(self.read(&ritz.vectors)?))
    }

    fn restart(&mut self, cols: usize, keep: usize, y: &DMatrix<f64>) -> Result<()> {
        let (b, columns) = (self.b, self.columns);
        let mut z = DMatrix::<f64>::zeros(cols + b, columns);
        z.view_mut((0, 0), (cols, keep)).copy_from(y);
        for j in 0..b {
            z[(cols + j, keep + j)] = 1.0;
        }
        let zr = self.restart.rows_view(0, cols + b)?;
        self.write(&zr, &z)?;
        let mut plan = Vec::new();
        for (from, to) in self.vt[self.current].iter().zip(&self.vt[1 - self.current]) {
            product(self.ctx, Operand::transposed(&zr), Operand::transposed(&from.rows_view(0, cols + b)?), to, false, &mut plan)?;
        }
        self.ctx.run_plan(plan)?;
        self.current = 1 - self.current;
        Ok(())
    }
}

/// A [`ResidentSymmetricOperator`] as a host [`SymmetricOperator`]: each
/// product sends `V` up and reads `A V` back (for the dense `A I` of small
/// orders).
pub(crate) struct HostBridge<'a, O: ResidentSymmetricOperator> {
    pub(crate) device: &'a Device,
    pub(crate) a: &'a mut O,
}

impl<O: ResidentSymmetricOperator> SymmetricOperator for HostBridge<'_, O> {
    fn apply(&mut self, v: faer::MatRef<'_, f64>, mut out: faer::MatMut<'_, f64>) -> Result<()> {
        let mut host = DMatrix::<f64>::zeros(v.nrows(), v.ncols());
        crate::linalg::faer_mut(&mut host).copy_from(v);
        let vd = self.device.upload(&host, Precision::F64)?;
        let od = self.device.zeros(v.nrows(), v.ncols(), Precision::F64)?;
        self.a.apply_resident(&vd, &od)?;
        let back = self.device.to_host(&od)?;
        out.copy_from(faer_ref(&back));
        Ok(())
    }
}

/// [`symmetric_operator_largest`] for an operator whose products run on
/// the GPU `device`, with the Krylov basis, its blocks and their products
/// resident there in `f64` ([`DeviceKrylov`]): per block product
/// only the projected coefficients (`O(b m)` numbers) come back and
/// `b x b` factors go up, so nothing of length `n` crosses, and nothing is
/// allocated after the first product. The iteration, its decisions and its
/// projected problems are the host solver's ([`block_lanczos_in`]); the
/// numbers differ from it by the rounding of the device products. Small
/// orders (the basis not below `n`) take `A I` through host round trips.
///
/// Errors: those of [`symmetric_operator_largest`]; [`Error::Unsupported`]
/// on the CPU or a GPU without `f64`.
pub(crate) fn symmetric_operator_largest_resident<O: ResidentSymmetricOperator>(device: &Device, n: usize, k: usize, mut a: O, settings: &TopEigenSettings) -> Result<LargestSymmetricEigen> {
    let rows = AllRows::new(n);
    check_arguments(n, k, settings)?;
    if let Some(shape) = BlockShape::new(n, k, &TopEigenSettings { min_ratio: 1, ..*settings }) {
        let outcome = widening(n, k, shape, settings, |shape, settings| {
            let mut basis = DeviceKrylov::new(device, &mut a, n, shape.b, shape.m)?;
            block_lanczos_in(&rows, &mut basis, None, k, shape, settings, false, None)
        })?;
        match outcome {
            BlockOutcome::Converged(found) => return Ok(found),
            BlockOutcome::Stopped { converged, restarts } => return Err(Error::EigenNotConverged { converged, requested: k, restarts }),
            BlockOutcome::TooWide => {}
        }
    }
    dense_from_operator(&rows, k, &mut HostBridge { device, a: &mut a })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GpuOptions;
    use super::symmetric_operator_largest_resident;
    use crate::linalg::{symmetric_operator_largest, TopEigenSettings};
    use faer::{MatMut, MatRef};

    /// `A = diag(d)` on the device: `A V = d o V` by one element-wise
    /// product with `d` repeated over the columns (one matrix per width).
    struct Diagonal<'a> {
        ctx: &'a GpuContext,
        repeated: Vec<GpuMatrix>,
    }

    impl ResidentSymmetricOperator for Diagonal<'_> {
        fn apply_resident(&mut self, v: &DeviceMatrix, out: &DeviceMatrix) -> Result<()> {
            let d = self.repeated.iter().find(|d| d.ncols() == v.ncols()).expect("a width of the test");
            let mut plan = Vec::new();
            self.ctx.plan_elementwise(ElementwiseMap::Hadamard, v.gpu()?, d, out.gpu()?, &mut plan)?;
            self.ctx.run_plan(plan)
        }
    }

    /// A GPU with f64, or `None` (the test is then skipped).
    fn gpu() -> Option<Device> {
        let device = Device::gpu_with(&GpuOptions { allow_software: true, ..GpuOptions::default() }).ok()?;
        device.supports(Precision::F64).then_some(device)
    }

    /// Order 5000 (two pieces of rows: products over the rows of more than
    /// 4095 rows), an indefinite diagonal with a decaying spectrum. The
    /// resident basis finds the host solver's pairs: both stop at true
    /// residuals within `100 * 1e-10 ||A||`, so the eigenvalues agree to
    /// `1e-8 ||A||` (and with the exact ones, the largest diagonal entries)
    /// and the eigenvectors, up to sign, to `1e-6` (residual over the gaps
    /// of about 0.13). With a tolerance no basis meets, one restart and its
    /// one block product more (the second run less the first) allocate
    /// nothing and wait twice.
    #[test]
    fn a_resident_basis_matches_the_host_solver_and_allocates_nothing_per_product() {
        let Some(device) = gpu() else { return };
        let ctx = device.context().expect("a GPU");
        let (n, k) = (5000usize, 4usize);
        let d: Vec<f64> = (0..n).map(|i| (-(i as f64) / 7.0).exp() * if i % 3 == 2 { -1.0 } else { 1.0 }).collect();
        let repeated = [8usize, k].iter().map(|&c| ctx.upload(&d.iter().flat_map(|&x| std::iter::repeat_n(x, c)).collect::<Vec<_>>(), n, c, Precision::F64)).collect::<Result<Vec<_>>>().unwrap();
        let settings = TopEigenSettings { tolerance: 1e-10, max_restarts: 300, seed: 3, ..TopEigenSettings::default() };
        let got = symmetric_operator_largest_resident(&device, n, k, Diagonal { ctx, repeated: repeated.clone() }, &settings).unwrap();
        let host_product = |v: MatRef<'_, f64>, mut out: MatMut<'_, f64>| -> Result<()> {
            for j in 0..v.ncols() {
                for i in 0..n {
                    out[(i, j)] = d[i] * v[(i, j)];
                }
            }
            Ok(())
        };
        let want = symmetric_operator_largest(n, k, host_product, &settings).unwrap();
        assert!(got.partial && got.block_products > 0);
        let mut exact: Vec<f64> = d.clone();
        exact.sort_by(|a, b| a.total_cmp(b));
        for j in 0..k {
            let (g, w, e) = (got.eigen.eigenvalues[j], want.eigen.eigenvalues[j], exact[n - k + j]);
            assert!((g - w).abs() <= 1e-8 && (g - e).abs() <= 1e-8, "eigenvalue {j}: device {g}, host {w}, exact {e}");
            let (u, v) = (got.eigen.eigenvectors.column(j), want.eigen.eigenvectors.column(j));
            let error = (u - v).amax().min((u + v).amax());
            assert!(error <= 1e-6, "eigenvector {j} differs by {error:e}");
        }
        // Per product: nothing allocated, two waits.
        let stopped = |restarts: usize| {
            let settings = TopEigenSettings { tolerance: 1e-15, max_restarts: restarts, ..settings };
            device.reset_device_counters();
            let err = symmetric_operator_largest_resident(&device, n, k, Diagonal { ctx, repeated: repeated.clone() }, &settings).unwrap_err();
            assert!(matches!(err, Error::EigenNotConverged { .. }), "{err:?}");
            device.device_counters()
        };
        let (first, second) = (stopped(0), stopped(1));
        let step = second.since(&first);
        assert_eq!((step.allocations, step.waits), (0, 2), "{step:?}");
        assert!(first.allocations > 0 && first.allocations == second.allocations, "the solver's buffers, once per solve: {first:?}");
    }

    /// Order 40: the basis (51 columns) does not fit, `A I` is formed
    /// through host round trips and decomposed densely: the exact top
    /// eigenvalues to rounding.
    #[test]
    fn a_small_operator_is_decomposed_densely() {
        let Some(device) = gpu() else { return };
        let ctx = device.context().expect("a GPU");
        let (n, k) = (40usize, 3usize);
        let d: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
        let repeated = vec![ctx.upload(&d.iter().flat_map(|&x| std::iter::repeat_n(x, n)).collect::<Vec<_>>(), n, n, Precision::F64).unwrap()];
        let got = symmetric_operator_largest_resident(&device, n, k, Diagonal { ctx, repeated }, &TopEigenSettings::default()).unwrap();
        assert!(!got.partial);
        let mut exact = d.clone();
        exact.sort_by(|a, b| a.total_cmp(b));
        for j in 0..k {
            assert!((got.eigen.eigenvalues[j] - exact[n - k + j]).abs() <= 1e-12, "eigenvalue {j}: {} vs {}", got.eigen.eigenvalues[j], exact[n - k + j]);
        }
    }
}
