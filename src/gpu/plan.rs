//! Dispatch planning: the descriptors the shaders read ([`Problem`], the
//! kernel's encoding [`KernelCode`]), the one product engine
//! ([`GpuContext::plan_product`]), row reductions and element-wise maps, all
//! recorded as [`Dispatch`]es that [`GpuContext::run_plan`] submits.
//!
//! The product engine computes `C = f(s(A', B'))` with `A'` and `B'` each a
//! matrix or its transpose, `s` an inner product (optionally weighted,
//! `A' diag(w) B'^T`) or a squared distance, and `f` a kernel function:
//! kernel matrices, kernel columns, every matrix product form and the
//! weighted Gram `P diag(w) P^T` are this one operation with different
//! operands. It cuts the problem at every row block boundary of its operands
//! and of the output, at the workgroup grid limit, and the depth into chunks
//! within [`LOOP_BUDGET`], and records one dispatch per piece.
//!
//! A symmetric output `C = A' diag(w) A'^T` (the weighted Gram, with
//! [`ProductFlags::lower`]) runs as a **triangle**: only the output tiles
//! that hold an element on or below the diagonal, one workgroup each on a
//! one-dimensional grid ([`FLAG_LOWER`], `shaders/product.wgsl`), each
//! element `(i, j)`, `j <= i`, stored at `(i, j)` and `(j, i)`: for `r x r`
//! in tiles of side `t`, `T (T + 1) / 2` of the `T^2` tiles (`T = r / t`),
//! about half the flops, and the result exactly symmetric. Long depths over
//! few tiles are split (split-K, `plan_split_depth`); a weighted product is
//! split until it fills a card of 132 SMs ([`SPLIT_FILL_WORKGROUPS`]).

use bytemuck::Zeroable;

use super::buffers::GpuMatrix;
use super::problem::{KernelCode, Problem, Reduce, FLAG_ACCUMULATE, FLAG_APPLY, FLAG_WEIGHTED};
use super::variants::{ShapeClass, CATALOGUE};
use super::{GpuContext, LOOP_BUDGET};
use crate::error::{Error, Result};
use crate::linalg::MatrixProduct;
use crate::precision::Precision;





/// One operand of the product engine: a matrix read as is (its rows are the
/// product's rows, its columns the depth) or transposed.
#[derive(Clone, Copy)]
pub(crate) struct Operand<'a> {
    pub(crate) m: &'a GpuMatrix,
    pub(crate) transposed: bool,
}

impl<'a> Operand<'a> {
    pub(crate) fn plain(m: &'a GpuMatrix) -> Self {
        Operand { m, transposed: false }
    }
    pub(crate) fn transposed(m: &'a GpuMatrix) -> Self {
        Operand { m, transposed: true }
    }
    /// The operands `(A', B')` of the product `form` of `a` and `b`, in the
    /// engine's terms `C = A' B'^T`.
    pub(crate) fn of_product(a: &'a GpuMatrix, b: &'a GpuMatrix, form: MatrixProduct) -> (Self, Self) {
        match form {
            MatrixProduct::AB => (Operand::plain(a), Operand::transposed(b)),
            MatrixProduct::ABt => (Operand::plain(a), Operand::plain(b)),
            MatrixProduct::AtB => (Operand::transposed(a), Operand::transposed(b)),
        }
    }
    pub(super) fn rows(&self) -> usize {
        if self.transposed { self.m.ncols() } else { self.m.nrows() }
    }
    fn depth(&self) -> usize {
        if self.transposed { self.m.nrows() } else { self.m.ncols() }
    }
    /// (buffer block, element offset, row stride, depth stride) of the piece
    /// at product rows `i0..`, depth `k0..`.
    fn locate(&self, i0: usize, k0: usize) -> (usize, u32, u32, u32) {
        let cols = self.m.ncols();
        if self.transposed {
            let s = self.m.locate(k0);
            (s.block, (s.local_row * cols + i0) as u32, 1, cols as u32)
        } else {
            let s = self.m.locate(i0);
            (s.block, (s.local_row * cols + k0) as u32, cols as u32, 1)
        }
    }
}

/// A dispatch recorded by the product engine, run later in one submission.
#[derive(Clone)]
pub(crate) struct Dispatch {
    pub(super) problem: Problem,
    pub(super) precision: Precision,
    /// The storage buffers bound after the descriptor, in binding order
    /// (a product binds the weights, or `buffers[0]` unused, as binding 4).
    pub(super) buffers: Vec<wgpu::Buffer>,
    pub(super) weights: Option<wgpu::Buffer>,
    pub(super) grid: [u32; 3],
    pub(super) pipeline: PipelineKind,
    /// The product variant (index in the catalogue; products only).
    pub(super) variant: usize,
    /// Kernel parameters in `f64` (the f64 shader reads these; `problem`
    /// holds them rounded to `f32`).
    pub(super) params: (f64, f64),
}

impl Dispatch {
    /// Checks that every element a product or matvec dispatch can address
    /// lies inside the buffer bound for it (the product variants are built
    /// without runtime bounds checks, see `pipelines::compile`): with `i <
    /// rows`, `j < cols`, `k < depth` as the shaders test them, A at `a_off
    /// + i a_rs + k a_cs`, B at `b_off + j b_rs + k b_cs`, C at `c_off + i
    /// c_rs + j c_cs` (a matvec: V at `w_off + j c_rs + t`, `t < c_cs`, and
    /// its partial slots `c_off + (s rows + i) c_cs + t` for the grid's `s`),
    /// the weights at `w_off + k`. Other dispatches keep their checks.
    pub(super) fn check_reach(&self) -> Result<()> {
        let p = &self.problem;
        let eb = self.precision.bytes() as u64;
        let elements = |b: &wgpu::Buffer| b.size() / eb;
        let top = |off: u32, extents: &[(u32, u32)]| -> Option<u64> {
            extents.iter().try_fold(off as u64, |acc, &(n, stride)| if n == 0 { None } else { Some(acc + (n as u64 - 1) * stride as u64) })
        };
        let mut reach: Vec<(&str, Option<u64>, &wgpu::Buffer)> = Vec::new();
        match self.pipeline {
            PipelineKind::Product => {
                reach.push(("A", top(p.a_off, &[(p.rows, p.a_rs), (p.depth, p.a_cs)]), &self.buffers[0]));
                reach.push(("B", top(p.b_off, &[(p.cols, p.b_rs), (p.depth, p.b_cs)]), &self.buffers[1]));
                reach.push(("C", top(p.c_off, &[(p.rows, p.c_rs), (p.cols, p.c_cs)]), &self.buffers[2]));
                if p.flags & super::problem::FLAG_WEIGHTED != 0 {
                    let w = self.weights.as_ref().ok_or_else(|| Error::Gpu("a weighted product without weights".into()))?;
                    reach.push(("w", top(p.w_off, &[(p.depth, 1)]), w));
                }
            }
            PipelineKind::Matvec => {
                let wx = CATALOGUE[self.variant & 0xffff].matvec_slots();
                reach.push(("X", top(p.a_off, &[(p.rows, p.a_rs), (p.depth, p.a_cs)]), &self.buffers[0]));
                reach.push(("Z", top(p.b_off, &[(p.cols, p.b_rs), (p.depth, p.b_cs)]), &self.buffers[1]));
                let v = self.weights.as_ref().ok_or_else(|| Error::Gpu("a matvec without V".into()))?;
                reach.push(("V", top(p.w_off, &[(p.cols, p.c_rs), (p.c_cs, 1)]), v));
                let slots = (self.grid[0] as u64 * wx as u64).min(u32::MAX as u64) as u32;
                let partial_top = top(0, &[(slots, 1)]).and_then(|s| Some(p.c_off as u64 + (s * p.rows as u64 + p.rows.checked_sub(1)? as u64) * p.c_cs as u64 + p.c_cs.checked_sub(1)? as u64));
                reach.push(("the partial sums", partial_top, &self.buffers[2]));
                if self.variant & super::variants::PAIR_KEY != 0 {
                    reach.push(("W", top(p.u_off, &[(p.rows, p.c_rs), (p.c_cs, 1)]), v));
                    // The column sums after the row sums: a slot per row tile (grid y).
                    let after = slots as u64 * p.rows as u64 * p.c_cs as u64;
                    let column_top = top(0, &[(self.grid[1], p.cols)]).and_then(|t| Some(p.c_off as u64 + after + (t + p.cols.checked_sub(1)? as u64) * p.c_cs as u64 + p.c_cs.checked_sub(1)? as u64));
                    reach.push(("the column sums", column_top, &self.buffers[2]));
                }
            }
            PipelineKind::Sparse => {
                // The dense operand at b_off + j b_rs + k b_cs, the output,
                // the norms of the distance kernels; the CSR arrays are
                // checked at upload and the shader is built with bounds checks.
                reach.push(("D", top(p.b_off, &[(p.cols, p.b_rs), (p.depth, p.b_cs)]), &self.buffers[1]));
                reach.push(("the output", top(p.c_off, &[(p.rows, p.c_rs), (p.cols, p.c_cs)]), &self.buffers[2]));
                if p.kind == 1 || p.kind == 2 {
                    reach.push(("the norms", top(p.w_off, &[(p.cols, 1)]), &self.buffers[3]));
                }
            }
            PipelineKind::RowReduce | PipelineKind::Elementwise | PipelineKind::IcdColumn | PipelineKind::Mklaren => {}
        }
        for (what, last, buffer) in reach {
            if let Some(last) = last {
                if last >= elements(buffer) || last > u32::MAX as u64 {
                    return Err(Error::Gpu(format!("a dispatch would reach element {last} of {what}, beyond its buffer of {} elements; not run", elements(buffer))));
                }
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum PipelineKind {
    Product,
    /// The fused kernel matvec of a product variant.
    Matvec,
    RowReduce,
    Elementwise,
    /// The fused Cholesky column of `icd_column.wgsl`.
    IcdColumn,
    /// A step of mklaren on the device (`mklaren_step.wgsl`, `f64` only).
    Mklaren,
    /// A product of a CSR matrix with a dense one (`sparse_product.wgsl`).
    Sparse,
}

/// Entries summed by one invocation in the first pass of
/// [`GpuContext::plan_vector_sums`].
pub(crate) const VECTOR_SUM_SPAN: usize = 256;

/// The element-wise maps of `elementwise.wgsl`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ElementwiseMap {
    /// `out_ij = scale cos(x_ij + y_j)`, y a 1 x cols row.
    CosineFeatures { scale: f64 },
    /// `out_ij = x_ij y_ij`.
    Hadamard,
    /// `out_ij = alpha x_ij + beta y_ij`.
    Combination { alpha: f64, beta: f64 },
    /// `out_ij = alpha x_ij + gamma [i = j]` (`y` is not read).
    Shift { alpha: f64, gamma: f64 },
    /// `out_ij = (v - sqrt(v^2 + c)) / 2`, `v = x_ij`, `c = scale y_ij`.
    NegativeRoot { scale: f64 },
    /// `out_ij = ln(scale x_ij)` where `scale x_ij > 0`, else 0 (`y` is not read).
    Log { scale: f64 },
    /// `out_ij = 0` where `scale x_ij > 0`, else 1 (`y` is not read).
    Outside { scale: f64 },
    /// `out_ij = x_ij` clipped to `[lo_j, hi_j]` (NaN stays), `y` the
    /// 2 x cols rows `lo` and `hi`.
    Box,
    /// `out_ij = 0` where `lo_j - slack <= x_ij <= hi_j + slack`, else 1
    /// (NaN too), `y` as for [`ElementwiseMap::Box`].
    OutsideBox { slack: f64 },
    /// `out_ij = max(tau_j x_ij, (tau_j - 1) x_ij)`, `y` the 1 x cols row of `tau`.
    Pinball,
}

impl ElementwiseMap {
    /// The rows of the second operand where it is read per column (a
    /// `rows x cols` block of rows of per-column values), `None` where it
    /// has the shape of the first.
    pub(crate) fn operand_rows(&self) -> Option<usize> {
        match self {
            ElementwiseMap::CosineFeatures { .. } | ElementwiseMap::Pinball => Some(1),
            ElementwiseMap::Box | ElementwiseMap::OutsideBox { .. } => Some(2),
            _ => None,
        }
    }
}



/// Sorted, deduplicated cut points `0 = c_0 < ... < c_k = len`.
pub(super) fn cuts(len: usize, mut inner: Vec<usize>, max_span: usize) -> Vec<usize> {
    inner.push(0);
    inner.push(len);
    let mut step = max_span.max(1);
    while step < len {
        inner.push(step);
        step += max_span.max(1);
    }
    inner.retain(|&c| c <= len);
    inner.sort_unstable();
    inner.dedup();
    inner
}

/// Problem flag of a triangle (`shaders/problem.wgsl`): the workgroups of
/// the grid's x dimension are the output tiles on and below the diagonal,
/// band by band of tile rows ([`lower_tiles`]), and each element `(i, j)`
/// with `j <= i` is stored at `(i, j)` and `(j, i)`.
pub(crate) const FLAG_LOWER: u32 = 16;

/// Tiles of a `rows x cols` output in tiles of `tile_rows x tile_cols`
/// that hold an element on or below the diagonal: band `b` of tile rows
/// holds the tile columns that start at or before its last row.
pub(crate) fn lower_tiles(rows: usize, cols: usize, tile_rows: usize, tile_cols: usize) -> usize {
    let columns = cols.div_ceil(tile_cols.max(1));
    (0..rows.div_ceil(tile_rows.max(1))).map(|b| ((b + 1) * tile_rows).div_ceil(tile_cols.max(1)).min(columns)).sum()
}

/// Elements of the tiles of [`lower_tiles`] within the output (what the
/// triangle's workgroups compute, the diagonal tiles whole).
pub(crate) fn lower_tile_elements(rows: usize, cols: usize, tile_rows: usize, tile_cols: usize) -> u64 {
    let (tr, tc) = (tile_rows.max(1), tile_cols.max(1));
    let columns = cols.div_ceil(tc);
    (0..rows.div_ceil(tr)).map(|b| ((rows - b * tr).min(tr) * (((b + 1) * tr).div_ceil(tc).min(columns) * tc).min(cols)) as u64).sum()
}

/// What a product computes besides `f(s(A', B'))`.
#[derive(Clone, Copy, Default)]
pub(crate) struct ProductFlags<'a> {
    /// The output is symmetric: `A'` and `B'` are the same operand (the
    /// same matrix, read the same way). Planned as a triangle
    /// ([`FLAG_LOWER`]) where the variant is a SIMT one, the output square
    /// in one row block and within one grid, and the weights the only
    /// difference between the operands' reads; otherwise as the full
    /// product (the same result, twice the work).
    pub(crate) lower: bool,
    /// Add to what `out` holds (only for the linear kind).
    pub(crate) accumulate: bool,
    /// Weights over the depth: `A' diag(w) B'^T` (a depth x 1 matrix).
    pub(crate) weights: Option<&'a GpuMatrix>,
    /// The statistic continues one that an earlier product over other
    /// columns of the depth left in `out` (any kernel): added to it.
    pub(crate) continued: bool,
    /// More of the depth follows in a later product: the kernel function is
    /// not applied yet.
    pub(crate) open: bool,
    /// Where a split product's partial products go (`plan_split_depth`):
    /// a `rows x cols` matrix of the precision from this (a pool's, one
    /// block) instead of a new allocation.
    pub(crate) scratch: Option<&'a dyn Fn(usize, usize, Precision) -> Result<GpuMatrix>>,
}

impl GpuContext {
    /// Records `out = f(s(A', B'))` (see the module docs) as dispatches.
    pub(crate) fn plan_product(&self, code: KernelCode, a: Operand<'_>, b: Operand<'_>, out: &GpuMatrix, flags: ProductFlags<'_>, plan: &mut Vec<Dispatch>) -> Result<()> {
        let mut operands = vec![a.m, b.m, out];
        if let Some(w) = flags.weights {
            operands.push(w);
        }
        let precision = self.check_same(&operands)?;
        if a.depth() != b.depth() {
            return Err(Error::DimensionMismatch { what: "inner dimension of a device product", expected: a.depth(), found: b.depth() });
        }
        if out.nrows() != a.rows() || out.ncols() != b.rows() {
            return Err(Error::DimensionMismatch { what: "shape of a device product's output", expected: a.rows() * b.rows(), found: out.nrows() * out.ncols() });
        }
        if out.same_storage(a.m) || out.same_storage(b.m) || flags.weights.is_some_and(|w| out.same_storage(w)) {
            return Err(Error::InvalidParameter { name: "out", reason: "the output of a device product may not share storage with an operand".into() });
        }
        if let Some(w) = flags.weights {
            if w.ncols() != 1 || w.nrows() != a.depth() {
                return Err(Error::DimensionMismatch { what: "weights of a weighted product (depth x 1)", expected: a.depth(), found: w.nrows() * w.ncols() });
            }
            if code.kind != 0 {
                return Err(Error::InvalidParameter { name: "weights", reason: "only a linear (inner product) statistic can be weighted".into() });
            }
        }
        if flags.accumulate && code.kind != 0 {
            return Err(Error::InvalidParameter { name: "accumulate", reason: "only a linear product can accumulate into its output".into() });
        }
        let (rows, cols, depth) = (a.rows(), b.rows(), a.depth());
        let distance = code.kind == 1 || code.kind == 2;
        let class = ShapeClass::of(precision, distance, a.transposed, b.transposed, rows, cols, depth);
        let variant = self.variant_for(class, (rows, cols, depth))?;
        self.plan_product_with(variant, code, a, b, out, flags, plan)
    }


    /// [`Self::plan_product`] with the product variant `variant` (checked
    /// operands).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn plan_product_with(&self, variant: usize, code: KernelCode, a: Operand<'_>, b: Operand<'_>, out: &GpuMatrix, flags: ProductFlags<'_>, plan: &mut Vec<Dispatch>) -> Result<()> {
        let precision = out.precision();
        let v = &CATALOGUE[variant];
        let (rows, cols, depth) = (a.rows(), b.rows(), a.depth());
        let row_span = self.max_workgroups as usize * v.tile_rows();
        let col_span = self.max_workgroups as usize * v.tile_cols();
        let mut row_cuts = out.block_breaks();
        if !a.transposed {
            row_cuts.extend(a.m.block_breaks());
        }
        let row_cuts = cuts(rows, row_cuts, row_span);
        let col_cuts = cuts(cols, if b.transposed { Vec::new() } else { b.m.block_breaks() }, col_span);
        let mut depth_cuts = Vec::new();
        if a.transposed {
            depth_cuts.extend(a.m.block_breaks());
        }
        if b.transposed {
            depth_cuts.extend(b.m.block_breaks());
        }
        if let Some(w) = flags.weights {
            depth_cuts.extend(w.block_breaks());
        }
        // Depth chunks within the loop budget; each after the first adds to
        // the statistic in out, the last applies the kernel function.
        let depth_cuts = cuts(depth, depth_cuts, v.max_product_depth(&code));
        let out_cols = out.ncols();
        let triangle = flags.lower
            && std::ptr::eq(a.m, b.m)
            && a.transposed == b.transposed
            && rows == cols
            && !v.is_cooperative()
            && row_cuts == [0, rows]
            && col_cuts == [0, cols]
            && rows.div_ceil(v.tile_rows()) <= LOOP_BUDGET
            && lower_tiles(rows, cols, v.tile_rows(), v.tile_cols()) <= self.max_workgroups as usize;
        if triangle {
            let o = out.locate(0);
            let chunks = depth_cuts.len() - 1;
            for (t, ck) in depth_cuts.windows(2).enumerate() {
                let (k0, k1) = (ck[0], ck[1]);
                let accumulate = t > 0 || flags.accumulate || flags.continued;
                if self.plan_split_depth(variant, code, a, b, out, flags, true, (0, rows), (0, cols), (k0, k1), accumulate, plan)? {
                    continue;
                }
                let mut bits = if accumulate { FLAG_ACCUMULATE } else { 0 };
                if t + 1 == chunks && !flags.open {
                    bits |= FLAG_APPLY;
                }
                let target = (out.buffer(o.block), o.local_row * out_cols, out_cols);
                plan.push(Self::lowered(variant, Self::product_piece(variant, code, precision, a, b, flags.weights, (0, rows), (0, cols), (k0, k1), target, bits)));
            }
            return Ok(());
        }
        for ri in row_cuts.windows(2) {
            let (i0, i1) = (ri[0], ri[1]);
            let o = out.locate(i0);
            for cj in col_cuts.windows(2) {
                let (j0, j1) = (cj[0], cj[1]);
                let chunks = depth_cuts.len() - 1;
                for (t, ck) in depth_cuts.windows(2).enumerate() {
                    let (k0, k1) = (ck[0], ck[1]);
                    let accumulate = t > 0 || flags.accumulate || flags.continued;
                    if self.plan_split_depth(variant, code, a, b, out, flags, false, (i0, i1), (j0, j1), (k0, k1), accumulate, plan)? {
                        continue;
                    }
                    let mut bits = if accumulate { FLAG_ACCUMULATE } else { 0 };
                    if t + 1 == chunks && !flags.open {
                        bits |= FLAG_APPLY;
                    }
                    let target = (out.buffer(o.block), o.local_row * out_cols + j0, out_cols);
                    plan.push(Self::product_piece(variant, code, precision, a, b, flags.weights, (i0, i1), (j0, j1), (k0, k1), target, bits));
                }
            }
        }
        Ok(())
    }

    /// `d` (a square piece of a product by `variant`) as a triangle: only
    /// its tiles on and below the diagonal, on a one-dimensional grid
    /// ([`FLAG_LOWER`]).
    fn lowered(variant: usize, mut d: Dispatch) -> Dispatch {
        let v = &CATALOGUE[variant];
        d.problem.flags |= FLAG_LOWER;
        d.grid = [lower_tiles(d.problem.rows as usize, d.problem.cols as usize, v.tile_rows(), v.tile_cols()) as u32, 1, 1];
        d
    }

    /// The dispatch of one piece of a product: rows `i0..i1` of A', rows
    /// `j0..j1` of B', depth `k0..k1`, written at `target = (buffer, element
    /// offset, row stride)` with `bits` (ACCUMULATE / APPLY; WEIGHTED is
    /// added when there are weights).
    #[allow(clippy::too_many_arguments)]
    fn product_piece(variant: usize, code: KernelCode, precision: Precision, a: Operand<'_>, b: Operand<'_>, weights: Option<&GpuMatrix>, (i0, i1): (usize, usize), (j0, j1): (usize, usize), (k0, k1): (usize, usize), target: (&wgpu::Buffer, usize, usize), mut bits: u32) -> Dispatch {
        let (ab, a_off, a_rs, a_cs) = a.locate(i0, k0);
        let (bb, b_off, b_rs, b_cs) = b.locate(j0, k0);
        let (weights, w_off) = match weights {
            Some(w) => {
                bits |= FLAG_WEIGHTED;
                let l = w.locate(k0);
                (Some(w.buffer(l.block).clone()), l.local_row as u32)
            }
            None => (None, 0),
        };
        let (c_buffer, c_off, c_rs) = target;
        let problem = Problem {
            rows: (i1 - i0) as u32,
            cols: (j1 - j0) as u32,
            depth: (k1 - k0) as u32,
            a_off,
            b_off,
            c_off: c_off as u32,
            flags: bits,
            kind: code.kind,
            a_rs,
            a_cs,
            b_rs,
            b_cs,
            c_rs: c_rs as u32,
            c_cs: 1,
            w_off,
            degree: code.degree,
            u_off: 0,
            gamma: code.gamma as f32,
            coef0: code.coef0 as f32,
        };
        let v = &CATALOGUE[variant];
        Dispatch {
            problem: problem.with_vec4_where_allowed(v.vec4_loads),
            precision,
            buffers: vec![a.m.buffer(ab).clone(), b.m.buffer(bb).clone(), c_buffer.clone()],
            weights,
            grid: [(j1 - j0).div_ceil(v.tile_cols()) as u32, (i1 - i0).div_ceil(v.tile_rows()) as u32, 1],
            pipeline: PipelineKind::Product,
            variant,
            params: (code.gamma, code.coef0),
        }
    }

    /// Split-K for a linear product piece with few output tiles and a long
    /// depth (`P diag(w) P^T` over many samples, `Phi^T V`): a single tile
    /// grid of a few workgroups would leave most of a GPU idle. The depth is
    /// cut into chunks that write stacked partial products into a scratch
    /// matrix in one dispatch each, then one row-reduction dispatch sums the
    /// partials into the output (adding to it with `accumulate`). A plain
    /// product is split below [`SPLIT_BELOW_TILES`] tiles, towards
    /// [`SPLIT_TARGET_WORKGROUPS`]; a weighted one (the weighted Gram, its
    /// tiles those of the triangle with `triangle`) below and towards
    /// [`SPLIT_FILL_WORKGROUPS`]. Returns false (nothing recorded) when the
    /// piece does not call for it.
    #[allow(clippy::too_many_arguments)]
    fn plan_split_depth(&self, variant: usize, code: KernelCode, a: Operand<'_>, b: Operand<'_>, out: &GpuMatrix, flags: ProductFlags<'_>, triangle: bool, (i0, i1): (usize, usize), (j0, j1): (usize, usize), (k0, k1): (usize, usize), accumulate: bool, plan: &mut Vec<Dispatch>) -> Result<bool> {
        let precision = out.precision();
        let v = &CATALOGUE[variant];
        let (rows, cols, len) = (i1 - i0, j1 - j0, k1 - k0);
        let tiles = if triangle { lower_tiles(rows, cols, v.tile_rows(), v.tile_cols()) } else { rows.div_ceil(v.tile_rows()) * cols.div_ceil(v.tile_cols()) };
        let (below, target) = if flags.weights.is_some() { (SPLIT_FILL_WORKGROUPS, SPLIT_FILL_WORKGROUPS) } else { (SPLIT_BELOW_TILES, SPLIT_TARGET_WORKGROUPS) };
        let elements = rows * cols;
        let fits = (self.max_binding_bytes as usize) / (elements * precision.bytes()).max(1);
        if code.kind != 0 || j0 != 0 || j1 != out.ncols() || tiles >= below || len < 2 * SPLIT_MIN_DEPTH || elements > self.max_workgroups as usize * 64 {
            return Ok(false);
        }
        let wanted = (target / tiles).min(len / SPLIT_MIN_DEPTH).min(fits).min(SPLIT_MAX_CHUNKS);
        if wanted < 2 {
            return Ok(false);
        }
        let chunk = len.div_ceil(wanted);
        let chunks = len.div_ceil(chunk);
        let partial = match flags.scratch {
            Some(scratch) => scratch(chunks * rows, cols, precision)?,
            None => self.zeros(chunks * rows, cols, precision)?,
        };
        if partial.storage.blocks.len() != 1 || partial.locate(0).local_row != 0 || partial.nrows() != chunks * rows || partial.ncols() != cols || partial.precision() != precision {
            return Err(Error::DimensionMismatch { what: "partial products of a split product (one whole block)", expected: chunks * elements, found: partial.nrows() * partial.ncols() });
        }
        let o = out.locate(i0);
        for s in 0..chunks {
            let (ks, ke) = (k0 + s * chunk, (k0 + (s + 1) * chunk).min(k1));
            let target = (partial.buffer(0), s * elements, cols);
            let piece = Self::product_piece(variant, code, precision, a, b, flags.weights, (i0, i1), (j0, j1), (ks, ke), target, FLAG_APPLY);
            plan.push(if triangle { Self::lowered(variant, piece) } else { piece });
        }
        // out[e] (+)= sum_s partial[s, e] over the elements e of the piece
        // (full rows of out, so contiguous from the piece's first row).
        let job = Reduce {
            rows: elements as u32,
            cols: chunks as u32,
            x_off: 0,
            x_rs: 1,
            x_cs: elements as u32,
            out_off: (o.local_row * out.ncols()) as u32,
            mode: 1,
            accumulate: accumulate as u32,
        };
        self.push_row_reduce(job, precision, [partial.buffer(0), out.buffer(o.block)], plan);
        Ok(true)
    }


    /// Records `out[j] = sum_i v_j[i]` for n x 1 vectors `v_j` into a
    /// k x 1 `out` (k = `vectors.len()`), in two passes per row block of a
    /// vector: sums of [`VECTOR_SUM_SPAN`] consecutive entries in parallel
    /// into a partial vector, then the partials in one invocation, added to
    /// `out[j]` after the first block. A partial vector of
    /// `ceil(n / VECTOR_SUM_SPAN)` entries per block is allocated here.
    pub(crate) fn plan_vector_sums(&self, vectors: &[&GpuMatrix], out: &GpuMatrix, plan: &mut Vec<Dispatch>) -> Result<()> {
        self.plan_vector_sums_with(vectors, out, plan, |partials, precision| Ok((self.zeros(partials, 1, precision)?, 0)))
    }

    /// The entries of the partial vector of [`Self::plan_vector_sums_into`]
    /// for `vectors`.
    pub(crate) fn vector_sum_partials(vectors: &[&GpuMatrix]) -> usize {
        vectors.iter().map(|v| cuts(v.nrows(), v.block_breaks(), usize::MAX).windows(2).map(|r| (r[1] - r[0]).div_ceil(VECTOR_SUM_SPAN)).sum::<usize>()).sum()
    }

    /// [`Self::plan_vector_sums`] with the partial sums in `partial` (one
    /// block, at least [`Self::vector_sum_partials`] entries, not one of
    /// the vectors or `out`): nothing is allocated.
    pub(crate) fn plan_vector_sums_into(&self, vectors: &[&GpuMatrix], out: &GpuMatrix, partial: &GpuMatrix, plan: &mut Vec<Dispatch>) -> Result<()> {
        let needed = Self::vector_sum_partials(vectors);
        if partial.ncols() != 1 || partial.nrows() < needed || !partial.block_breaks().is_empty() || partial.locate(0).local_row != 0 {
            return Err(Error::DimensionMismatch { what: "entries of the partial sums of vector sums (one block)", expected: needed, found: partial.nrows() * partial.ncols() });
        }
        if partial.same_storage(out) || vectors.iter().any(|v| v.same_storage(partial)) {
            return Err(Error::InvalidParameter { name: "partial", reason: "the partial sums may not share storage with a summed vector or the output".into() });
        }
        let mut next = 0;
        self.plan_vector_sums_with(vectors, out, plan, |partials, _| {
            let at = next;
            next += partials;
            Ok((partial.clone(), at))
        })
    }

    /// [`Self::plan_vector_sums`] with `partial_for(entries, precision)`
    /// giving the partial vector of each piece and the offset of its entries.
    fn plan_vector_sums_with(&self, vectors: &[&GpuMatrix], out: &GpuMatrix, plan: &mut Vec<Dispatch>, mut partial_for: impl FnMut(usize, Precision) -> Result<(GpuMatrix, usize)>) -> Result<()> {
        let mut operands: Vec<&GpuMatrix> = vectors.to_vec();
        operands.push(out);
        let precision = self.check_same(&operands)?;
        if out.nrows() != vectors.len() || out.ncols() != 1 || out.block_breaks().len() > 0 {
            return Err(Error::DimensionMismatch { what: "rows of the output of vector sums (k x 1, one block)", expected: vectors.len(), found: out.nrows() * out.ncols() });
        }
        for (j, v) in vectors.iter().enumerate() {
            if v.ncols() != 1 {
                return Err(Error::DimensionMismatch { what: "columns of a summed vector", expected: 1, found: v.ncols() });
            }
            if out.same_storage(v) {
                return Err(Error::InvalidParameter { name: "out", reason: "vector sums may not write into a summed vector".into() });
            }
            let o = out.locate(j);
            let row_cuts = cuts(v.nrows(), v.block_breaks(), usize::MAX);
            for (piece, r) in row_cuts.windows(2).enumerate() {
                let (i0, len) = (r[0], r[1] - r[0]);
                let s = v.locate(i0);
                let (full, tail) = (len / VECTOR_SUM_SPAN, len % VECTOR_SUM_SPAN);
                let partials = full + usize::from(tail > 0);
                let (partial, at) = partial_for(partials, precision)?;
                debug_assert_eq!(partial.storage.blocks.len(), 1);
                if full > 0 {
                    let job = Reduce { rows: full as u32, cols: VECTOR_SUM_SPAN as u32, x_off: s.local_row as u32, x_rs: VECTOR_SUM_SPAN as u32, x_cs: 1, out_off: at as u32, mode: 1, accumulate: 0 };
                    self.push_row_reduce(job, precision, [v.buffer(s.block), partial.buffer(0)], plan);
                }
                if tail > 0 {
                    let job = Reduce { rows: 1, cols: tail as u32, x_off: (s.local_row + full * VECTOR_SUM_SPAN) as u32, x_rs: 0, x_cs: 1, out_off: (at + full) as u32, mode: 1, accumulate: 0 };
                    self.push_row_reduce(job, precision, [v.buffer(s.block), partial.buffer(0)], plan);
                }
                let job = Reduce { rows: 1, cols: partials as u32, x_off: at as u32, x_rs: 0, x_cs: 1, out_off: o.local_row as u32, mode: 1, accumulate: u32::from(piece > 0) };
                self.push_row_reduce(job, precision, [partial.buffer(0), out.buffer(o.block)], plan);
            }
        }
        Ok(())
    }

    /// Records `out[i] (+)= sum_k x_ik^2` (`squares`) or `sum_k x_ik`.
    pub(crate) fn plan_row_reduce(&self, x: &GpuMatrix, out: &GpuMatrix, squares: bool, accumulate: bool, plan: &mut Vec<Dispatch>) -> Result<()> {
        let precision = self.check_same(&[x, out])?;
        if out.nrows() != x.nrows() || out.ncols() != 1 {
            return Err(Error::DimensionMismatch { what: "rows of a row reduction's output (n x 1)", expected: x.nrows(), found: out.nrows() * out.ncols() });
        }
        if out.same_storage(x) {
            return Err(Error::InvalidParameter { name: "out", reason: "a row reduction may not write into its input".into() });
        }
        let mut breaks = x.block_breaks();
        breaks.extend(out.block_breaks());
        let row_cuts = cuts(x.nrows(), breaks, self.max_workgroups as usize * 64);
        let cols = x.ncols();
        for r in row_cuts.windows(2) {
            let (i0, i1) = (r[0], r[1]);
            let s = x.locate(i0);
            let o = out.locate(i0);
            let job = Reduce {
                rows: (i1 - i0) as u32,
                cols: cols as u32,
                x_off: (s.local_row * cols) as u32,
                x_rs: cols as u32,
                x_cs: 1,
                out_off: o.local_row as u32,
                mode: if squares { 0 } else { 1 },
                accumulate: accumulate as u32,
            };
            self.push_row_reduce(job, precision, [x.buffer(s.block), out.buffer(o.block)], plan);
        }
        Ok(())
    }

    /// Records the row reduction `job` over `[x, out]`: one dispatch per
    /// chunk of columns within [`LOOP_BUDGET`] (one loop pass per column,
    /// one to leave), every chunk after the first adding to out. Rows beyond
    /// one grid row of workgroups wrap into a second grid dimension.
    pub(super) fn push_row_reduce(&self, job: Reduce, precision: Precision, [x, out]: [&wgpu::Buffer; 2], plan: &mut Vec<Dispatch>) {
        const CHUNK: usize = LOOP_BUDGET - 1;
        let groups = (job.rows as usize).div_ceil(64);
        let gx = groups.min(self.max_workgroups as usize).max(1);
        let gy = groups.div_ceil(gx).max(1);
        let cols = job.cols as usize;
        for chunk in 0..cols.div_ceil(CHUNK).max(1) {
            let k0 = chunk * CHUNK;
            let piece = Reduce {
                cols: (cols - k0).min(CHUNK) as u32,
                x_off: job.x_off + (k0 * job.x_cs as usize) as u32,
                accumulate: (job.accumulate != 0 || chunk > 0) as u32,
                ..job
            };
            let mut problem = Problem::zeroed();
            bytemuck::bytes_of_mut(&mut problem)[..std::mem::size_of::<Reduce>()].copy_from_slice(bytemuck::bytes_of(&piece));
            plan.push(Dispatch {
                problem,
                precision,
                buffers: vec![x.clone(), out.clone()],
                weights: None,
                grid: [gx as u32, gy as u32, 1],
                pipeline: PipelineKind::RowReduce,
                variant: 0,
                params: (0.0, 0.0),
            });
        }
    }

    /// Records `out = map(x, y)` (see [`ElementwiseMap`]).
    pub(crate) fn plan_elementwise(&self, map: ElementwiseMap, x: &GpuMatrix, y: &GpuMatrix, out: &GpuMatrix, plan: &mut Vec<Dispatch>) -> Result<()> {
        let precision = self.check_same(&[x, y, out])?;
        let (rows, cols) = (x.nrows(), x.ncols());
        if out.nrows() != rows || out.ncols() != cols {
            return Err(Error::DimensionMismatch { what: "shape of an element-wise map's output", expected: rows * cols, found: out.nrows() * out.ncols() });
        }
        let y_rows = map.operand_rows();
        let y_is_row = y_rows.is_some();
        let (want_rows, want_cols) = (y_rows.unwrap_or(rows), cols);
        if y.nrows() != want_rows || y.ncols() != want_cols {
            return Err(Error::DimensionMismatch { what: "shape of an element-wise map's second operand", expected: want_rows * want_cols, found: y.nrows() * y.ncols() });
        }
        if out.same_storage(x) || out.same_storage(y) {
            return Err(Error::InvalidParameter { name: "out", reason: "an element-wise map may not write into an operand".into() });
        }
        if y_is_row && y.locate(want_rows - 1).block != y.locate(0).block {
            return Err(Error::InvalidParameter { name: "y", reason: "the rows of per-column values of an element-wise map must lie in one buffer".into() });
        }
        let mut breaks = x.block_breaks();
        breaks.extend(out.block_breaks());
        if !y_is_row {
            breaks.extend(y.block_breaks());
        }
        // At most 65535 x 65535 workgroups of 256, and u32 element counts.
        let max_rows = ((u32::MAX as usize) / cols).max(1);
        let row_cuts = cuts(rows, breaks, max_rows);
        let (mode, scale, beta) = match map {
            ElementwiseMap::CosineFeatures { scale } => (0u32, scale, 0.0),
            ElementwiseMap::Hadamard => (1u32, 0.0, 0.0),
            ElementwiseMap::Combination { alpha, beta } => (2u32, alpha, beta),
            ElementwiseMap::Shift { alpha, gamma } => (3u32, alpha, gamma),
            ElementwiseMap::NegativeRoot { scale } => (4u32, scale, 0.0),
            ElementwiseMap::Log { scale } => (5u32, scale, 0.0),
            ElementwiseMap::Outside { scale } => (6u32, scale, 0.0),
            ElementwiseMap::Box => (7u32, 0.0, 0.0),
            ElementwiseMap::OutsideBox { slack } => (8u32, 0.0, slack),
            ElementwiseMap::Pinball => (9u32, 0.0, 0.0),
        };
        for r in row_cuts.windows(2) {
            let (i0, i1) = (r[0], r[1]);
            let (sx, so) = (x.locate(i0), out.locate(i0));
            let (yb, y_off) = if y_is_row { (y.locate(0).block, (y.locate(0).local_row * cols) as u32) } else { let s = y.locate(i0); (s.block, (s.local_row * cols) as u32) };
            let mut problem = Problem::zeroed();
            let words: [u32; 7] = [(i1 - i0) as u32, cols as u32, (sx.local_row * cols) as u32, y_off, (so.local_row * cols) as u32, mode, i0 as u32];
            bytemuck::cast_slice_mut::<Problem, u32>(std::slice::from_mut(&mut problem))[..7].copy_from_slice(&words);
            let groups = ((i1 - i0) * cols).div_ceil(256);
            let gx = groups.min(self.max_workgroups as usize).max(1);
            let gy = groups.div_ceil(gx).max(1);
            if gy > self.max_workgroups as usize {
                return Err(Error::TooLargeForGpu { what: "an element-wise map's workgroup grid", bytes: ((i1 - i0) * cols * precision.bytes()) as u64, limit: self.max_binding_bytes });
            }
            plan.push(Dispatch {
                problem,
                precision,
                buffers: vec![x.buffer(sx.block).clone(), y.buffer(yb).clone(), out.buffer(so.block).clone()],
                weights: None,
                grid: [gx as u32, gy as u32, 1],
                pipeline: PipelineKind::Elementwise,
                variant: 0,
                params: (scale, beta),
            });
        }
        Ok(())
    }
}

/// Split-K (see `plan_split_depth`): pieces with fewer output tiles than this,
const SPLIT_BELOW_TILES: usize = 64;
/// aiming at about this many workgroups,
const SPLIT_TARGET_WORKGROUPS: usize = 256;
/// with chunks of at least this depth,
const SPLIT_MIN_DEPTH: usize = 2048;
/// and at most this many chunks.
const SPLIT_MAX_CHUNKS: usize = 64;
/// Workgroups a weighted product (the weighted Gram) is split towards, and
/// below which it is split: eight per SM of a 132-SM card (H100 and H200
/// SXM), so that the triangle of a `1000 x 1000` Gram (136 tiles of 64)
/// over `10^5` samples runs as 7 chunks, 952 workgroups, instead of 136.
pub(crate) const SPLIT_FILL_WORKGROUPS: usize = 8 * 132;


#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::problem::FLAG_VEC4;
    use crate::gpu::variants::index_of;

    /// The triangle's tile count and elements: every tile with an element
    /// on or below the diagonal, counted against a brute-force scan.
    #[test]
    fn lower_tiles_are_the_tiles_that_reach_the_diagonal() {
        for (r, tr, tc) in [(1usize, 64usize, 64usize), (64, 64, 64), (65, 64, 64), (1000, 64, 64), (300, 64, 128), (300, 128, 64), (7, 4, 4)] {
            let (mut tiles, mut elements) = (0, 0u64);
            for bi in 0..r.div_ceil(tr) {
                for bj in 0..r.div_ceil(tc) {
                    let (rows, cols) = ((bi * tr..((bi + 1) * tr).min(r)), (bj * tc..((bj + 1) * tc).min(r)));
                    if cols.start < rows.end {
                        tiles += 1;
                        elements += (rows.len() * cols.len()) as u64;
                    }
                }
            }
            assert_eq!((lower_tiles(r, r, tr, tc), lower_tile_elements(r, r, tr, tc)), (tiles, elements), "r = {r}, tiles {tr} x {tc}");
        }
        assert_eq!(lower_tiles(1000, 1000, 64, 64), 136);
    }

    /// The weighted Gram of a 1000 x 1000 output over a long depth runs as
    /// the triangle (136 of 256 tiles of 64) split over the depth until it
    /// fills a card of 132 SMs: 7 chunks of 952 workgroups in all, and one
    /// reduction. (Planned only: the depth is 7 x 2048, which gives the
    /// same 7 chunks as 10^5.)
    #[test]
    fn a_long_weighted_gram_is_split_until_it_fills_the_card() {
        let Some(ctx) = super::super::test_context() else { return };
        let variant = index_of("f32-64x64-b4x4-k16-v1-direct").expect("a 64 x 64 variant");
        let (n, r) = (7 * SPLIT_MIN_DEPTH, 1000);
        let phi = ctx.zeros(n, r, Precision::F32).unwrap();
        let w = ctx.zeros(n, 1, Precision::F32).unwrap();
        let out = ctx.zeros(r, r, Precision::F32).unwrap();
        let linear = KernelCode { kind: 0, gamma: 0.0, coef0: 0.0, degree: 0 };
        for (lower, tiles) in [(true, 136u32), (false, 256)] {
            let mut plan = Vec::new();
            ctx.plan_product_with(variant, linear, Operand::transposed(&phi), Operand::transposed(&phi), &out, ProductFlags { weights: Some(&w), lower, ..ProductFlags::default() }, &mut plan).unwrap();
            let products: Vec<&Dispatch> = plan.iter().filter(|d| d.pipeline == PipelineKind::Product).collect();
            let chunks = (SPLIT_FILL_WORKGROUPS / tiles as usize).min(7) as u32;
            assert_eq!(products.len() as u32, chunks, "lower {lower}");
            for d in &products {
                assert_eq!(d.problem.flags & FLAG_LOWER != 0, lower);
                assert_eq!(d.grid.iter().product::<u32>(), tiles);
            }
            let workgroups: u32 = products.iter().map(|d| d.grid.iter().product::<u32>()).sum();
            assert!(workgroups >= 4 * 132, "lower {lower}: {workgroups} workgroups");
            assert_eq!(plan.iter().filter(|d| d.pipeline == PipelineKind::RowReduce).count(), 1);
        }
    }

    /// A variant with vec4 global loads gets `FLAG_VEC4` on exactly the
    /// dispatches whose rows allow it (unit column strides, offsets, row
    /// strides and depth multiples of 4), products and fused matvecs alike;
    /// a scalar variant never does.
    #[test]
    fn vec4_loads_are_flagged_only_where_the_rows_allow_them() {
        let Some(ctx) = super::super::test_context() else { return };
        let g4 = index_of("f32-64x64-s4x4-k16-v4-expanded-db-g4").expect("a vec4 variant");
        let scalar = index_of("f32-64x64-s4x4-k16-v4-expanded-db").expect("its scalar twin");
        let rbf = KernelCode { kind: 1, gamma: 0.5, coef0: 0.0, degree: 0 };
        let flagged = |plan: &[Dispatch]| -> Vec<bool> { plan.iter().filter(|d| matches!(d.pipeline, PipelineKind::Product | PipelineKind::Matvec)).map(|d| d.problem.flags & FLAG_VEC4 != 0).collect() };
        // (depth, first row of the views, A transposed, expected)
        for (d, row, transposed, want) in [(8, 0, false, true), (8, 1, false, true), (6, 0, false, false), (6, 2, false, false), (12, 0, true, false)] {
            let x = ctx.zeros(9, d, Precision::F32).unwrap();
            let xt = ctx.zeros(d, 9, Precision::F32).unwrap();
            let z = ctx.zeros(5, d, Precision::F32).unwrap();
            let xv = x.rows_view(row, 9 - row).unwrap();
            let zv = z.rows_view(row, 5 - row).unwrap();
            let a = if transposed { Operand::transposed(&xt) } else { Operand::plain(&xv) };
            let rows = if transposed { 9 } else { 9 - row };
            let out = ctx.zeros(rows, 5 - row, Precision::F32).unwrap();
            for (variant, expect) in [(g4, want), (scalar, false)] {
                let mut plan = Vec::new();
                ctx.plan_product_with(variant, rbf, a, Operand::plain(&zv), &out, ProductFlags::default(), &mut plan).unwrap();
                assert_eq!(flagged(&plan), vec![expect], "product d = {d}, row {row}, transposed {transposed}, {}", CATALOGUE[variant].name);
                if transposed {
                    continue;
                }
                let v = ctx.zeros(5 - row, 1, Precision::F32).unwrap();
                let y = ctx.zeros(9 - row, 1, Precision::F32).unwrap();
                let mut plan = Vec::new();
                assert!(ctx.plan_kernel_matvec_with(variant, rbf, &xv, &zv, &v, &y, false, None, &mut plan).unwrap());
                assert_eq!(flagged(&plan), vec![expect], "matvec d = {d}, row {row}, {}", CATALOGUE[variant].name);
            }
        }
    }
}
