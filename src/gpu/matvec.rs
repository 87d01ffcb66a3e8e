//! The kernel matvec `K(X, Z) V` on resident matrices without storing
//! `K(X, Z)`: the fused shader (`kernel_matvec.wgsl`, kernel tiles in
//! registers multiplied into partial sums) where V is narrow and rows are
//! short enough for one kernel tile per dispatch, otherwise tiles of K in one
//! scratch matrix multiplied into the output by the product engine.
//!
//! The pair form gives `K(X, Z) V` and `K(X, Z)^T W` from one evaluation of
//! each kernel entry (the cross-source blocks of eKSVD's coupling, where
//! `K_qp = K_pq^T`): the fused shader's PAIR form, or one K tile applied
//! both ways.
//!
//! The fused shader's partial sums live in one buffer per precision kept by
//! the context ([`MatvecScratch`]): allocated at the first matvec, grown (to
//! the next power of two within a binding) when a larger one comes, and
//! otherwise reused, so that repeated products (a Krylov solver's) allocate
//! nothing. Every slot a dispatch's reductions read is written by that
//! dispatch, so what an earlier product left there is never read. A plan
//! uses the buffer from its matvec dispatch to its reductions in one
//! submission; [`GpuContext::kernel_matvec_into`] and
//! [`GpuContext::kernel_matvec_pair_into`] hold the scratch's run lock
//! from planning to submission, so that no other thread's matvec writes the
//! buffer in between even where a long plan takes several submissions.

use std::collections::HashMap;
use std::sync::Mutex;

use super::buffers::GpuMatrix;
use super::plan::{cuts, Dispatch, Operand, PipelineKind, ProductFlags};
use super::problem::{KernelCode, Problem, Reduce};
use super::variants::{self, Op, ShapeClass, CATALOGUE, PAIR_KEY};
use super::{GpuContext, LOOP_BUDGET};
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::precision::Precision;

/// The fused kernel matvec's reused partial-sums buffers (module docs).
#[derive(Default)]
pub(crate) struct MatvecScratch {
    /// One buffer per precision (`f32`, `f64`), an `elements x 1` matrix.
    partials: Mutex<[Option<GpuMatrix>; 2]>,
    /// Held by a matvec from planning to submission.
    runs: Mutex<()>,
}

impl GpuContext {
    /// Records the fused kernel matvec `out (+)= K(X, Z) V` (V with at most
    /// [`MATVEC_MAX_COLUMNS`] columns) without writing K: per piece (cut at
    /// the row blocks of X, Z, V and out, and where an invocation would
    /// visit more column tiles than the loop budget allows) one dispatch of
    /// the chosen variant's `kernel_matvec.wgsl` writes partial sums, and
    /// row-reduction dispatches add them into out.
    ///
    /// Returns false, with nothing recorded, where rows are too long for the
    /// fused shader: a kernel tile over the whole depth would exceed
    /// [`LOOP_BUDGET`] in one invocation (the kernel function needs the whole
    /// statistic, so the depth cannot be cut there). The caller then forms
    /// tiles of K with the product engine, which cuts the depth.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn plan_kernel_matvec(&self, code: KernelCode, x: &GpuMatrix, z: &GpuMatrix, v: &GpuMatrix, out: &GpuMatrix, accumulate: bool, plan: &mut Vec<Dispatch>) -> Result<bool> {
        let precision = self.check_same(&[x, z, v, out])?;
        let (n, m, d, c) = (x.nrows(), z.nrows(), x.ncols(), v.ncols());
        if z.ncols() != d || v.nrows() != m || out.nrows() != n || out.ncols() != c {
            return Err(Error::DimensionMismatch { what: "shapes of a fused kernel matvec", expected: n * c, found: out.nrows() * out.ncols() });
        }
        if c > MATVEC_MAX_COLUMNS {
            return Err(Error::InvalidParameter { name: "v", reason: format!("the fused kernel matvec takes at most {MATVEC_MAX_COLUMNS} columns, got {c}") });
        }
        let distance = code.is_distance();
        let mv: usize = if c == 1 { 1 } else { MATVEC_MAX_COLUMNS };
        if !self.product_variants().iter().any(|var| var.precision == precision && Self::matvec_tiles_per_split(var, d, &code, mv, false) > 0) {
            return Ok(false);
        }
        let class = ShapeClass { op: Op::Matvec { wide: c > 1 }, ..ShapeClass::of(precision, distance, false, false, n, m, d) };
        let variant = self.variant_for(class, (n, m, d))?;
        self.plan_kernel_matvec_with(variant, code, x, z, v, out, accumulate, None, plan)
    }

    /// Records the pair matvec `out (+)= K(X, Z) V` and
    /// `out_t (+)= K(X, Z)^T W` (each kernel entry evaluated once; V and W
    /// of at most [`MATVEC_MAX_COLUMNS`] columns, row views of one
    /// single-buffer matrix). Returns false, with nothing recorded, where
    /// the fused shader cannot take the job (rows too long, V and W in
    /// different buffers).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn plan_kernel_matvec_pair(&self, code: KernelCode, x: &GpuMatrix, z: &GpuMatrix, v: &GpuMatrix, w: &GpuMatrix, out: &GpuMatrix, out_t: &GpuMatrix, accumulate: bool, accumulate_t: bool, plan: &mut Vec<Dispatch>) -> Result<bool> {
        let precision = self.check_same(&[x, z, v, w, out, out_t])?;
        check_pair_shapes(x, z, v, w, out, out_t)?;
        let (n, m, d, c) = (x.nrows(), z.nrows(), x.ncols(), v.ncols());
        if c > MATVEC_MAX_COLUMNS {
            return Err(Error::InvalidParameter { name: "v", reason: format!("the fused kernel matvec takes at most {MATVEC_MAX_COLUMNS} columns, got {c}") });
        }
        let one_buffer = v.storage.blocks.len() == 1 && v.same_storage(w);
        let mv: usize = if c == 1 { 1 } else { MATVEC_MAX_COLUMNS };
        if !one_buffer || !self.product_variants().iter().any(|var| var.precision == precision && Self::matvec_tiles_per_split(var, d, &code, mv, true) > 0) {
            return Ok(false);
        }
        let class = ShapeClass { op: Op::Matvec { wide: c > 1 }, ..ShapeClass::of(precision, code.is_distance(), false, false, n, m, d) };
        let variant = self.variant_for(class, (n, m, d))?;
        self.plan_kernel_matvec_with(variant, code, x, z, v, out, accumulate, Some(PairOutput { w, out_t, accumulate_t }), plan)
    }

    /// Column tiles one invocation of `var`'s fused kernel matvec may visit
    /// within [`LOOP_BUDGET`] at depth `d` (0: not even one).
    fn matvec_tiles_per_split(var: &variants::ProductVariant, d: usize, code: &KernelCode, mv: usize, pair: bool) -> usize {
        let (per_tile, once) = var.matvec_passes(d, code, mv, pair);
        LOOP_BUDGET.saturating_sub(once) / per_tile
    }

    /// [`Self::plan_kernel_matvec`] (and with `pair` the pair form of
    /// [`Self::plan_kernel_matvec_pair`]) with the product variant `variant`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn plan_kernel_matvec_with(&self, variant: usize, code: KernelCode, x: &GpuMatrix, z: &GpuMatrix, v: &GpuMatrix, out: &GpuMatrix, accumulate: bool, pair: Option<PairOutput<'_>>, plan: &mut Vec<Dispatch>) -> Result<bool> {
        let precision = out.precision();
        let var = &CATALOGUE[variant];
        let (n, m, d, c) = (x.nrows(), z.nrows(), x.ncols(), v.ncols());
        let mv: usize = if c == 1 { 1 } else { MATVEC_MAX_COLUMNS };
        let tiles_per_split = Self::matvec_tiles_per_split(var, d, &code, mv, pair.is_some());
        if tiles_per_split == 0 {
            return Ok(false);
        }
        let eb = precision.bytes();
        let (tr, tc, slots) = (var.tile_rows(), var.tile_cols(), var.matvec_slots() as usize);
        // The pair form keeps both kinds of partial sums in one binding: half each.
        let binding = self.max_binding_bytes as usize / if pair.is_some() { 2 } else { 1 };
        // Rows per piece: the grid limit, and the partials' slots of a split
        // column within a binding.
        let max_rows = (self.max_workgroups as usize * tr).min((binding / (slots * c * eb)).max(1));
        let mut rb = x.block_breaks();
        rb.extend(out.block_breaks());
        if let Some(pr) = &pair {
            rb.extend(pr.w.block_breaks());
        }
        let row_cuts = cuts(n, rb, max_rows);
        let longest = row_cuts.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(1);
        // Splits of the column tiles: enough workgroups to fill a GPU, and
        // enough that no invocation visits more than `tiles_per_split`
        // tiles; column pieces are cut so that this many splits fit the
        // grid and the partial sums fit a binding.
        let max_splits = |rows: usize| (binding / (slots * rows * c * eb)).max(1).min(self.max_workgroups as usize);
        let mut cb = z.block_breaks();
        cb.extend(v.block_breaks());
        // The pair's column sums: one slot per row tile and column.
        let mut max_cols = max_splits(longest) * tiles_per_split * tc;
        if let Some(pr) = &pair {
            cb.extend(pr.out_t.block_breaks());
            max_cols = max_cols.min((binding / (longest.div_ceil(tr) * c * eb)).max(1));
        }
        let col_cuts = cuts(m, cb, max_cols);
        let splits_for = |rows: usize, cols: usize| -> usize {
            let tiles = cols.div_ceil(tc);
            let wanted = MATVEC_TARGET_WORKGROUPS.div_ceil(rows.div_ceil(tr)).max(1);
            wanted.min(tiles).min(max_splits(rows)).max(tiles.div_ceil(tiles_per_split)).max(1)
        };
        // Partial slots for the most demanding piece.
        let column_slots = |rows: usize, cols: usize| if pair.is_some() { rows.div_ceil(tr) * cols } else { 0 };
        let slot_rows = row_cuts.windows(2).flat_map(|r| col_cuts.windows(2).map(move |cj| (r[1] - r[0], cj[1] - cj[0]))).map(|(rows, cols)| splits_for(rows, cols) * slots * rows + column_slots(rows, cols)).max().unwrap_or(1);
        let partial = self.matvec_partials(slot_rows * c, precision)?;
        debug_assert_eq!(partial.storage.blocks.len(), 1);
        let key = variant | (mv << 16) | if pair.is_some() { PAIR_KEY } else { 0 };
        for (piece, ri) in row_cuts.windows(2).enumerate() {
            let (i0, i1) = (ri[0], ri[1]);
            let rows = i1 - i0;
            let (xs, os) = (x.locate(i0), out.locate(i0));
            for (t, cj) in col_cuts.windows(2).enumerate() {
                let (j0, j1) = (cj[0], cj[1]);
                let cols = j1 - j0;
                let (zs, vs) = (z.locate(j0), v.locate(j0));
                let splits = splits_for(rows, cols);
                let problem = Problem {
                    rows: rows as u32,
                    cols: cols as u32,
                    depth: d as u32,
                    a_off: (xs.local_row * d) as u32,
                    b_off: (zs.local_row * d) as u32,
                    c_off: 0,
                    flags: 0,
                    kind: code.kind,
                    a_rs: d as u32,
                    a_cs: 1,
                    b_rs: d as u32,
                    b_cs: 1,
                    c_rs: c as u32,
                    c_cs: c as u32,
                    w_off: (vs.local_row * c) as u32,
                    degree: code.degree,
                    u_off: pair.as_ref().map_or(0, |pr| (pr.w.locate(i0).local_row * c) as u32),
                    gamma: code.gamma as f32,
                    coef0: code.coef0 as f32,
                }
                .with_vec4_where_allowed(var.vec4_loads);
                plan.push(Dispatch {
                    problem,
                    precision,
                    buffers: vec![x.buffer(xs.block).clone(), z.buffer(zs.block).clone(), partial.buffer(0).clone()],
                    weights: Some(v.buffer(vs.block).clone()),
                    grid: [splits as u32, rows.div_ceil(tr) as u32, 1],
                    pipeline: PipelineKind::Matvec,
                    variant: key,
                    params: (code.gamma, code.coef0),
                });
                // out[rows of the piece] (+)= sum over the splits' slots.
                let elements = rows * c;
                let job = Reduce {
                    rows: elements as u32,
                    cols: (splits * slots) as u32,
                    x_off: 0,
                    x_rs: 1,
                    x_cs: elements as u32,
                    out_off: (os.local_row * c) as u32,
                    mode: 1,
                    accumulate: (accumulate || t > 0) as u32,
                };
                self.push_row_reduce(job, precision, [partial.buffer(0), out.buffer(os.block)], plan);
                if let Some(pr) = &pair {
                    // out_t[columns of the piece] (+)= sum over the row tiles' slots.
                    let ots = pr.out_t.locate(j0);
                    let job = Reduce {
                        rows: (cols * c) as u32,
                        cols: rows.div_ceil(tr) as u32,
                        x_off: (splits * slots * elements) as u32,
                        x_rs: 1,
                        x_cs: (cols * c) as u32,
                        out_off: (ots.local_row * c) as u32,
                        mode: 1,
                        accumulate: (pr.accumulate_t || piece > 0) as u32,
                    };
                    self.push_row_reduce(job, precision, [partial.buffer(0), pr.out_t.buffer(ots.block)], plan);
                }
            }
        }
        Ok(true)
    }

    /// The partial-sums buffer of the fused matvec, at least `elements`
    /// long in `precision`: the context's, or a larger one allocated in its
    /// place (module docs); a reuse is counted as a scratch reuse.
    fn matvec_partials(&self, elements: usize, precision: Precision) -> Result<GpuMatrix> {
        let mut held = self.matvec_scratch.partials.lock().map_err(|_| Error::Gpu("matvec scratch lock poisoned".into()))?;
        let slot = &mut held[matches!(precision, Precision::F64) as usize];
        if let Some(p) = slot.as_ref().filter(|p| p.nrows() >= elements) {
            self.counters.count_scratch(true);
            return Ok(p.clone());
        }
        let within = (self.max_binding_bytes as usize / precision.bytes()).max(elements);
        let p = self.zeros(elements.max(1).next_power_of_two().min(within), 1, precision)?;
        *slot = Some(p.clone());
        Ok(p)
    }

    /// `out (+)= K(X, Z) V` on resident matrices (checked shapes, one
    /// precision): the fused shader for V of at most [`MATVEC_MAX_COLUMNS`]
    /// columns where rows are short enough for it, else tiles of K (at most
    /// [`MATVEC_BLOCK`] rows and columns, within a binding) in one scratch
    /// matrix per tile shape, each multiplied into the output by the product
    /// engine; memory is one tile however large n x m is.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn kernel_matvec_into(&self, code: KernelCode, x: &GpuMatrix, z: &GpuMatrix, v: &GpuMatrix, out: &GpuMatrix, accumulate: bool) -> Result<()> {
        if v.ncols() <= MATVEC_MAX_COLUMNS {
            let _run = self.matvec_scratch.runs.lock().map_err(|_| Error::Gpu("matvec scratch lock poisoned".into()))?;
            let mut plan = Vec::new();
            if self.plan_kernel_matvec(code, x, z, v, out, accumulate, &mut plan)? {
                return self.run_plan(plan);
            }
        }
        self.tiled_kernel_matvec(code, x, z, v, out, accumulate, None, &mut KernelTiles::new())
    }

    /// The pair matvec `out (+)= K(X, Z) V`, `out_t (+)= K(X, Z)^T W` on
    /// resident matrices, each kernel entry evaluated once: the fused
    /// shader's pair form where it takes the job, else each tile of K
    /// applied both ways (as [`Self::kernel_matvec_into`]), the tiles taken
    /// from `tiles` (and left there for the next call: a caller that
    /// multiplies many times keeps them).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn kernel_matvec_pair_into(&self, code: KernelCode, x: &GpuMatrix, z: &GpuMatrix, v: &GpuMatrix, w: &GpuMatrix, out: &GpuMatrix, out_t: &GpuMatrix, accumulate: bool, accumulate_t: bool, tiles: &mut KernelTiles) -> Result<()> {
        if v.ncols() <= MATVEC_MAX_COLUMNS {
            let _run = self.matvec_scratch.runs.lock().map_err(|_| Error::Gpu("matvec scratch lock poisoned".into()))?;
            let mut plan = Vec::new();
            if self.plan_kernel_matvec_pair(code, x, z, v, w, out, out_t, accumulate, accumulate_t, &mut plan)? {
                return self.run_plan(plan);
            }
        }
        self.check_same(&[x, z, v, w, out, out_t])?;
        check_pair_shapes(x, z, v, w, out, out_t)?;
        self.tiled_kernel_matvec(code, x, z, v, out, accumulate, Some(PairOutput { w, out_t, accumulate_t }), tiles)
    }

    /// The kernel matvec (and with `pair` its pair form) through tiles of K
    /// in scratch matrices multiplied into the outputs by the product engine.
    #[allow(clippy::too_many_arguments)]
    #[allow(clippy::too_many_arguments)]
    fn tiled_kernel_matvec(&self, code: KernelCode, x: &GpuMatrix, z: &GpuMatrix, v: &GpuMatrix, out: &GpuMatrix, accumulate: bool, pair: Option<PairOutput<'_>>, tiles: &mut KernelTiles) -> Result<()> {
        let (n, m) = (x.nrows(), z.nrows());
        let precision = x.precision();
        let eb = precision.bytes();
        let binding = self.max_binding_bytes as usize;
        let bc = m.min(MATVEC_BLOCK).min((binding / eb).max(1));
        let br = n.min(MATVEC_BLOCK).min((binding / (eb * bc)).max(1));
        let linear = KernelCode::of(&Kernel::Linear);
        let mut plan = Vec::new();
        for r0 in (0..n).step_by(br) {
            let tr = br.min(n - r0);
            let xr = x.rows_view(r0, tr)?;
            let yr = out.rows_view(r0, tr)?;
            for c0 in (0..m).step_by(bc) {
                let tc = bc.min(m - c0);
                let zc = z.rows_view(c0, tc)?;
                let vc = v.rows_view(c0, tc)?;
                let tile = match tiles.get(&(tr, tc, precision)) {
                    Some(t) => t.clone(),
                    None => {
                        let t = self.zeros(tr, tc, precision)?;
                        tiles.insert((tr, tc, precision), t.clone());
                        t
                    }
                };
                self.plan_product(code, Operand::plain(&xr), Operand::plain(&zc), &tile, ProductFlags::default(), &mut plan)?;
                self.plan_product(linear, Operand::plain(&tile), Operand::transposed(&vc), &yr, ProductFlags { accumulate: accumulate || c0 > 0, ..ProductFlags::default() }, &mut plan)?;
                if let Some(pr) = &pair {
                    // out_t[c0..] (+)= tile^T W[r0..].
                    let (wr, yc) = (pr.w.rows_view(r0, tr)?, pr.out_t.rows_view(c0, tc)?);
                    self.plan_product(linear, Operand::transposed(&tile), Operand::transposed(&wr), &yc, ProductFlags { accumulate: pr.accumulate_t || r0 > 0, ..ProductFlags::default() }, &mut plan)?;
                }
            }
            // Bound the recorded work per submission.
            if plan.len() > 4096 {
                self.run_plan(std::mem::take(&mut plan))?;
            }
        }
        self.run_plan(plan)
    }
}

/// X (n x d), Z (m x d), V (m x c), W (n x c), out (n x c), out_t (m x c).
fn check_pair_shapes(x: &GpuMatrix, z: &GpuMatrix, v: &GpuMatrix, w: &GpuMatrix, out: &GpuMatrix, out_t: &GpuMatrix) -> Result<()> {
    let (n, m, c) = (x.nrows(), z.nrows(), v.ncols());
    if z.ncols() != x.ncols() || v.nrows() != m || w.nrows() != n || w.ncols() != c || out.nrows() != n || out.ncols() != c || out_t.nrows() != m || out_t.ncols() != c {
        return Err(Error::DimensionMismatch { what: "shapes of a pair kernel matvec", expected: (n + m) * c, found: out.nrows() * out.ncols() + out_t.nrows() * out_t.ncols() });
    }
    Ok(())
}

/// Scratch tiles of K for the tiled kernel matvec, by rows, columns and
/// precision: one per tile shape, reused by every call given the same map.
pub(crate) type KernelTiles = HashMap<(usize, usize, Precision), GpuMatrix>;

/// The second output of the pair matvec: `out_t (+)= K^T w`.
pub(super) struct PairOutput<'a> {
    w: &'a GpuMatrix,
    out_t: &'a GpuMatrix,
    accumulate_t: bool,
}

/// Most columns of V the fused kernel matvec takes per call.
pub(crate) const MATVEC_MAX_COLUMNS: usize = 8;
/// Workgroups the fused kernel matvec aims at (column tiles are split).
const MATVEC_TARGET_WORKGROUPS: usize = 1024;
/// Largest row and column block of the tiled kernel matvec's K tile.
const MATVEC_BLOCK: usize = 4096;
