//! The block solver's vectors resident on a GPU ([`DeviceKrylov`]), for
//! operators whose products run there ([`ResidentSymmetricOperator`]): the
//! iteration is the host solver's ([`super::block_lanczos_in`]), only where
//! its `n`-vectors live and how their products run differ.
//!
//! **Layout.** The basis is held transposed, `V^T` (`(m + b) x n`
//! row-major, so that a basis vector is a row and the first `c` columns of
//! `V` are a row view), in two copies: the basis and the target of the
//! thick restart. The current block `Q` (the basis block stored last, the
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
//! ([`super::gram_factor`]); where CholQR2 declines, `W` and the basis are
//! read back and the host's column-by-column Gram-Schmidt
//! ([`super::gram_schmidt_block`]) answers, its `Q` written back (rare: an
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

use super::{gram_factor, gram_schmidt_block, random_rows, AllRows, KrylovBasis, SymmetricOperator};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::gpu::{ElementwiseMap, GpuContext, GpuMatrix, KernelCode, Operand, ProductFlags};
use crate::kernel::Kernel;
use crate::linalg::faer_ref;
use crate::precision::Precision;
use crate::resident::DeviceMatrix;

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
    /// `V^T`, the basis (`vt[current]`) and the restart's target.
    vt: [GpuMatrix; 2],
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

/// `m` in the device layout (row-major).
fn row_major(m: &DMatrix<f64>) -> Vec<f64> {
    m.transpose().as_slice().to_vec()
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
        Ok(DeviceKrylov {
            ctx,
            a,
            n,
            b,
            vt: [zeros(columns, n)?, zeros(columns, n)?],
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

    /// `W^T W`, computed and read back.
    fn gram_of_w(&self) -> Result<DMatrix<f64>> {
        let g = self.small.rows_view(0, self.b)?;
        let mut plan = Vec::new();
        product(self.ctx, Operand::transposed(&self.w), Operand::transposed(&self.w), &g, false, &mut plan)?;
        self.ctx.run_plan(plan)?;
        self.read(&g)
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
        product(self.ctx, Operand::transposed(&self.q1), Operand::transposed(&self.q1), &g2, false, &mut plan)?;
        self.ctx.run_plan(plan)?;
        let Some((l2, l2_inv)) = gram_factor(&self.read(&g2)?) else { return Ok(None) };
        self.write(&self.factor, &l2_inv.transpose())?;
        self.write(&self.factor_t, &l2_inv)?;
        let mut plan = Vec::new();
        product(self.ctx, Operand::plain(&self.q1), Operand::transposed(&self.factor), &self.q, false, &mut plan)?;
        product(self.ctx, Operand::plain(&self.factor_t), Operand::plain(&self.q1), &self.vt[self.current].rows_view(cols, b)?, false, &mut plan)?;
        self.ctx.run_plan(plan)?;
        let d = DMatrix::from_diagonal(&DVector::from_column_slice(scales));
        Ok(Some(l2.transpose() * (l1.transpose() * d)))
    }

    /// The host's Gram-Schmidt on `W` and the basis read back, `Q` written
    /// back as the block and the basis rows at `cols`.
    fn gram_schmidt(&mut self, cols: usize, breakdown: f64, rng: &mut StdRng) -> Result<DMatrix<f64>> {
        let mut w = self.read(&self.w)?;
        let basis = if cols > 0 { self.read(&self.vt[self.current].rows_view(0, cols)?)?.transpose() } else { DMatrix::zeros(self.n, 0) };
        let r = gram_schmidt_block(&AllRows::new(self.n), &basis, cols, &mut w, breakdown, rng)?;
        self.write(&self.q, &w)?;
        self.write(&self.vt[self.current].rows_view(cols, self.b)?, &w.transpose())?;
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
        let vt = self.vt[self.current].rows_view(0, cols)?;
        let negated = self.negated.rows_view(0, cols)?;
        let mut plan = Vec::new();
        for pass in 0..2 {
            let h = self.small.rows_view(pass * cols, cols)?;
            product(ctx, Operand::plain(&vt), Operand::transposed(&self.w), &h, false, &mut plan)?;
            ctx.plan_elementwise(ElementwiseMap::Shift { alpha: -1.0, gamma: 0.0 }, &h, &h, &negated, &mut plan)?;
            product(ctx, Operand::transposed(&vt), Operand::transposed(&negated), &self.w, true, &mut plan)?;
        }
        product(ctx, Operand::transposed(&self.w), Operand::transposed(&self.w), &self.small.rows_view(2 * cols, b)?, false, &mut plan)?;
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
            self.ritz = Some(RitzBuffers { y: zeros(self.vt[0].nrows(), k)?, vectors: zeros(n, k)?, product: zeros(n, k)?, shift: zeros(k, k)?, gram: zeros(k, k)? });
        }
        let ritz = self.ritz.as_ref().expect("allocated above");
        let yc = ritz.y.rows_view(0, cols)?;
        self.write(&yc, y)?;
        self.write(&ritz.shift, &DMatrix::from_diagonal(&(-values)))?;
        let mut plan = Vec::new();
        product(ctx, Operand::transposed(&self.vt[self.current].rows_view(0, cols)?), Operand::transposed(&yc), &ritz.vectors, false, &mut plan)?;
        ctx.run_plan(plan)?;
        self.a.apply_resident(&DeviceMatrix::from_gpu(ritz.vectors.clone()), &DeviceMatrix::from_gpu(ritz.product.clone()))?;
        let mut plan = Vec::new();
        product(ctx, Operand::plain(&ritz.vectors), Operand::transposed(&ritz.shift), &ritz.product, true, &mut plan)?;
        product(ctx, Operand::transposed(&ritz.product), Operand::transposed(&ritz.product), &ritz.gram, false, &mut plan)?;
        ctx.run_plan(plan)?;
        let squares = self.read(&ritz.gram)?;
        if !(0..k).filter(|&j| values[j] > floor).all(|j| squares[(j, j)].max(0.0).sqrt() <= bound) {
            return Ok(None);
        }
        Ok(Some(self.read(&ritz.vectors)?))
    }

    fn restart(&mut self, cols: usize, keep: usize, y: &DMatrix<f64>) -> Result<()> {
        let (b, columns) = (self.b, self.vt[0].nrows());
        let mut z = DMatrix::<f64>::zeros(cols + b, columns);
        z.view_mut((0, 0), (cols, keep)).copy_from(y);
        for j in 0..b {
            z[(cols + j, keep + j)] = 1.0;
        }
        let zr = self.restart.rows_view(0, cols + b)?;
        self.write(&zr, &z)?;
        let mut plan = Vec::new();
        let target = &self.vt[1 - self.current];
        product(self.ctx, Operand::transposed(&zr), Operand::transposed(&self.vt[self.current].rows_view(0, cols + b)?), target, false, &mut plan)?;
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
