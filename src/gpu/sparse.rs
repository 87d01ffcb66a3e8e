//! A sparse operand on the device: a CSR matrix ([`GpuCsr`], one sample per
//! row) uploaded once as its three arrays, and its products with dense
//! device matrices (`shaders/sparse_product.wgsl`):
//!
//! - `Y = X B` ([`GpuContext::sparse_times_dense`], `X` n x d, `B` d x c):
//!   `y_ij = sum_{p in nz(x_i)} x_p B(col_p, j)`, `2 nnz(X) c` flops;
//! - the kernel matrix `K(X, Z)` ([`GpuContext::sparse_kernel_matrix`], `Z`
//!   m x d dense) for every [`Kernel`]: the inner products
//!   `<x_i, z_j> = sum_{p in nz(x_i)} x_p z_{j, col_p}` (linear, polynomial,
//!   sigmoid), and for RBF and Laplacian (`exp(-gamma ||x - z||)`, the
//!   Euclidean distance) the squared distance
//!   `||x_i - z_j||^2 = sum_{p} (x_p - z_{j,col_p})^2 + (||z_j||^2 - sum_{p} z_{j,col_p}^2)`
//!   with `||z_j||^2` a row reduction of `Z` on the device; both
//!   `O(nnz(X) m)`. The second term is `||z_j||^2` restricted to the
//!   columns outside `nz(x_i)`, computed from the same fused multiply-adds
//!   in the same order as the norm, so a row of `X` equal to `z_j` gives 0
//!   exactly (the Laplacian's `sqrt` keeps its accuracy near duplicates);
//!   it is clamped at 0.
//!
//! One workgroup takes one row of `X` and 64 output columns, staging the
//! row's non-zeros in workgroup memory 64 at a time. Sizes are checked
//! before anything is allocated: each array within one buffer binding,
//! row pointers, column indices and the column count within `u32`, and
//! every row within [`SPARSE_MAX_ROW_NNZ`] non-zeros (the loop budget of one
//! invocation, [`LOOP_BUDGET`]); beyond them the upload is
//! [`Error::TooLargeForGpu`], on which callers take the CPU path
//! ([`crate::sparse`]). The dispatches count as products (`Y = X B`, a
//! linear kernel) or kernel matrices in the device counters, with `nnz`
//! in place of `r k` (see [`super::counters`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytemuck::Zeroable;

use super::buffers::GpuMatrix;
use super::plan::{cuts, Dispatch, PipelineKind};
use super::problem::{KernelCode, Problem, FLAG_APPLY};
use super::{GpuContext, LOOP_BUDGET};
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::precision::Precision;
use crate::sparse::CsrMatrix;

/// Output columns of one workgroup of `sparse_product.wgsl`.
const SPARSE_GROUP: usize = 64;

/// Non-zeros a row of a [`GpuCsr`] may hold: an invocation of the sparse
/// products makes `nnz + 2 ceil(nnz / 64) + 2` loop passes over its row (and
/// at most 33 in the polynomial power), within the engine's loop budget of
/// `2^15` passes per invocation (software Vulkan drivers stop a loop
/// silently after 65,535 passes).
pub const SPARSE_MAX_ROW_NNZ: usize = LOOP_BUDGET - LOOP_BUDGET / 16;

/// Bytes charged to a context's device-memory ledger, returned on drop.
struct Charge {
    bytes: u64,
    ledger: Arc<AtomicU64>,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.ledger.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// A CSR matrix in GPU memory: row pointers and column indices (`u32`) and
/// the values (`f32` or `f64`), each one buffer. Cheap to clone (clones
/// share the buffers).
#[derive(Clone)]
pub struct GpuCsr {
    row_ptr: wgpu::Buffer,
    col_idx: wgpu::Buffer,
    values: wgpu::Buffer,
    rows: usize,
    cols: usize,
    nnz: usize,
    precision: Precision,
    /// The row pointers, also kept on the host (the counters read the
    /// non-zeros of each dispatch's rows).
    row_offsets: Arc<[u32]>,
    /// Non-zeros of the longest row.
    longest: usize,
    context: u64,
    _charge: Arc<Charge>,
}

impl std::fmt::Debug for GpuCsr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuCsr({} x {}, {} non-zeros, {:?})", self.rows, self.cols, self.nnz, self.precision)
    }
}

impl GpuCsr {
    /// Rows (samples).
    pub fn nrows(&self) -> usize {
        self.rows
    }
    /// Columns (the input dimension).
    pub fn ncols(&self) -> usize {
        self.cols
    }
    /// Stored entries.
    pub fn nnz(&self) -> usize {
        self.nnz
    }
    /// Element type of the values.
    pub fn precision(&self) -> Precision {
        self.precision
    }
    /// Bytes of the three arrays as uploaded: `4 (rows + 1) + 4 nnz + e nnz`
    /// for `e`-byte values.
    pub fn bytes(&self) -> u64 {
        csr_bytes(self.rows, self.nnz, self.precision)
    }

    /// Non-zeros of the longest row.
    pub fn longest_row(&self) -> usize {
        self.longest
    }

    /// The three arrays (row pointers, column indices, values), for the
    /// shaders that bind them beside their own operands.
    pub(crate) fn arrays(&self) -> [&wgpu::Buffer; 3] {
        [&self.row_ptr, &self.col_idx, &self.values]
    }

    /// The id of the context that holds it.
    pub(crate) fn context_id(&self) -> u64 {
        self.context
    }
}

fn csr_bytes(rows: usize, nnz: usize, precision: Precision) -> u64 {
    4 * (rows as u64 + 1) + (4 + precision.bytes() as u64) * nnz as u64
}

impl GpuContext {
    /// Uploads a CSR matrix (values stored in `precision`): its row
    /// pointers, column indices and values, `4 (n + 1) + (4 + e) nnz` bytes,
    /// never the `n x d` dense copy.
    ///
    /// Errors: an empty or non-finite matrix ([`Error::Empty`],
    /// [`Error::NonFinite`]); [`Error::Unsupported`] for `f64` without
    /// `SHADER_F64`; [`Error::TooLargeForGpu`] for an array beyond one
    /// buffer binding, row pointers, column indices or columns beyond `u32`,
    /// or a row of more than [`SPARSE_MAX_ROW_NNZ`] non-zeros;
    /// [`Error::OutOfMemory`] beyond the device budget.
    pub fn upload_csr(&self, x: &CsrMatrix<f64>, precision: Precision) -> Result<GpuCsr> {
        self.check_supported(precision)?;
        crate::sparse::check_csr("x", x)?;
        let (rows, cols, nnz) = (x.nrows(), x.ncols(), x.nnz());
        let too_large = |what: &'static str, bytes: u64, limit: u64| Error::TooLargeForGpu { what, bytes, limit };
        let u32_limit = u32::MAX as u64;
        if cols as u64 > u32_limit {
            return Err(too_large("columns of a sparse matrix (u32 column indices: a count, not bytes)", cols as u64, u32_limit));
        }
        if nnz as u64 > u32_limit || rows as u64 >= u32_limit {
            return Err(too_large("row pointers of a sparse matrix (u32: a count, not bytes)", nnz.max(rows) as u64, u32_limit));
        }
        let offsets = x.row_offsets();
        let longest = offsets.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        if longest > SPARSE_MAX_ROW_NNZ {
            let e = precision.bytes() as u64;
            return Err(too_large("non-zeros of one row of a sparse matrix (the loop budget of one shader invocation)", longest as u64 * e, SPARSE_MAX_ROW_NNZ as u64 * e));
        }
        let e = precision.bytes() as u64;
        for (what, bytes) in [("row pointers of a sparse matrix", 4 * (rows as u64 + 1)), ("column indices of a sparse matrix", 4 * nnz as u64), ("values of a sparse matrix", e * nnz as u64)] {
            if bytes > self.max_binding_bytes {
                return Err(too_large(what, bytes, self.max_binding_bytes));
            }
        }
        // Buffers of whole 16 bytes, at least 16 (a matrix without
        // non-zeros still binds its arrays).
        let sized = |bytes: u64| bytes.max(16).next_multiple_of(16);
        let sizes = [sized(4 * (rows as u64 + 1)), sized(4 * nnz as u64), sized(e * nnz as u64)];
        let total = csr_bytes(rows, nnz, precision);
        let held = self.allocated.fetch_add(total, Ordering::Relaxed);
        let charge = Arc::new(Charge { bytes: total, ledger: self.allocated.clone() });
        if let Some(budget) = self.device_budget {
            if held.saturating_add(total) > budget {
                return Err(Error::device_memory(format!("a {rows} x {cols} sparse matrix of {nnz} non-zeros ({total} bytes) with {held} bytes held exceeds the device budget of {budget} bytes")));
            }
        }
        let row_ptr: Vec<u32> = offsets.iter().map(|&o| o as u32).collect();
        let col_idx: Vec<u32> = x.col_indices().iter().map(|&c| c as u32).collect();
        let values: Vec<u8> = match precision {
            Precision::F64 => bytemuck::cast_slice(x.values()).to_vec(),
            Precision::F32 => bytemuck::cast_slice(&x.values().iter().map(|&v| v as f32).collect::<Vec<f32>>()).to_vec(),
        };
        let [row_ptr_buf, col_idx_buf, values_buf] = self.checked(|| {
            let make = |size: u64| {
                self.device.create_buffer(&wgpu::BufferDescriptor { label: Some("gramian sparse matrix"), size, usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST, mapped_at_creation: false })
            };
            let buffers = [make(sizes[0]), make(sizes[1]), make(sizes[2])];
            self.counters.count_matrix_upload();
            for (buffer, data) in buffers.iter().zip([bytemuck::cast_slice::<u32, u8>(&row_ptr), bytemuck::cast_slice::<u32, u8>(&col_idx), &values[..]]) {
                if !data.is_empty() {
                    self.write_counted(buffer, 0, data);
                }
            }
            Ok(buffers)
        })?;
        self.counters.count_allocation(total, 3);
        Ok(GpuCsr { row_ptr: row_ptr_buf, col_idx: col_idx_buf, values: values_buf, rows, cols, nnz, precision, row_offsets: row_ptr.into(), longest, context: self.id, _charge: charge })
    }

    /// `Y = X B` (n x c) for a CSR `X` (n x d) and a dense `B` (d x c) on
    /// the device, in their precision; nothing crosses to the host.
    ///
    /// Errors: a matrix of another context ([`Error::DeviceMismatch`]),
    /// mixed precisions, `B` of other than d rows
    /// ([`Error::DimensionMismatch`]), `B` in more than one buffer binding
    /// ([`Error::TooLargeForGpu`]: every row of `B` may be read by any row
    /// of `X`).
    pub fn sparse_times_dense(&self, x: &GpuCsr, b: &GpuMatrix) -> Result<GpuMatrix> {
        self.check_sparse_operands(x, b)?;
        if b.nrows() != x.cols {
            return Err(Error::DimensionMismatch { what: "rows of the dense factor vs columns of the sparse one", expected: x.cols, found: b.nrows() });
        }
        if !b.block_breaks().is_empty() {
            return Err(Error::TooLargeForGpu { what: "the dense factor of a sparse product (one buffer binding)", bytes: b.bytes(), limit: self.max_binding_bytes });
        }
        let out = self.zeros(x.rows, b.ncols(), x.precision)?;
        let mut plan = Vec::new();
        self.plan_sparse(KernelCode::of(&Kernel::Linear), x, b, true, None, &out, &mut plan)?;
        self.run_plan(plan)?;
        Ok(out)
    }

    /// The kernel matrix `K(X, Z)` (n x m) of a CSR `X` (n x d) and dense
    /// rows `Z` (m x d) on the device, in their precision (see the module
    /// docs); nothing crosses to the host.
    ///
    /// Errors: invalid kernel parameters, a matrix of another context,
    /// mixed precisions, `Z` of other than d columns.
    pub fn sparse_kernel_matrix(&self, kernel: &Kernel, x: &GpuCsr, z: &GpuMatrix) -> Result<GpuMatrix> {
        kernel.validate()?;
        self.check_sparse_operands(x, z)?;
        if z.ncols() != x.cols {
            return Err(Error::DimensionMismatch { what: "feature dimension of z vs x", expected: x.cols, found: z.ncols() });
        }
        let code = KernelCode::of(kernel);
        let out = self.zeros(x.rows, z.nrows(), x.precision)?;
        let mut plan = Vec::new();
        let norms = if code.is_distance() {
            let norms = self.zeros(z.nrows(), 1, x.precision)?;
            self.plan_row_reduce(z, &norms, true, false, &mut plan)?;
            Some(norms)
        } else {
            None
        };
        self.plan_sparse(code, x, z, false, norms.as_ref(), &out, &mut plan)?;
        self.run_plan(plan)?;
        Ok(out)
    }

    fn check_sparse_operands(&self, x: &GpuCsr, dense: &GpuMatrix) -> Result<()> {
        if x.context != self.id {
            return Err(Error::DeviceMismatch);
        }
        self.check_owned(dense)?;
        if dense.precision() != x.precision {
            return Err(Error::PrecisionMismatch { expected: x.precision, found: dense.precision() });
        }
        self.check_supported(x.precision)
    }

    /// Records `out = f(s(X, D))` (`sparse_product.wgsl`): with `product`
    /// `D` is `B` (d x c, one binding) and `out = X B` (the linear code);
    /// otherwise `D` is `Z` (m x d) and the statistic the inner products,
    /// or with `norms` (m x 1, the distance kernels) the squared distances.
    /// Rows are cut at the output's row blocks and the grid limit, output
    /// columns at `Z`'s and the norms' row blocks and the grid limit.
    #[allow(clippy::too_many_arguments)]
    fn plan_sparse(&self, code: KernelCode, x: &GpuCsr, dense: &GpuMatrix, product: bool, norms: Option<&GpuMatrix>, out: &GpuMatrix, plan: &mut Vec<Dispatch>) -> Result<()> {
        let (n, m) = (x.rows, out.ncols());
        let d = x.cols;
        let grid_limit = self.max_workgroups as usize;
        let row_cuts = cuts(n, out.block_breaks(), grid_limit);
        let mut col_breaks = Vec::new();
        if !product {
            col_breaks.extend(dense.block_breaks());
        }
        if let Some(nm) = norms {
            col_breaks.extend(nm.block_breaks());
        }
        let col_cuts = cuts(m, col_breaks, grid_limit * SPARSE_GROUP);
        let offsets = &x.row_offsets;
        let out_cols = out.ncols();
        for r in row_cuts.windows(2) {
            let (i0, i1) = (r[0], r[1]);
            let o = out.locate(i0);
            let piece_nnz = offsets[i1] - offsets[i0];
            for c in col_cuts.windows(2) {
                let (j0, j1) = (c[0], c[1]);
                // (block, element offset, j stride, k stride) of D at output column j0.
                let (db, d_off, j_stride, k_stride) = if product {
                    let s = dense.locate(0);
                    (s.block, s.local_row * dense.ncols() + j0, 1, dense.ncols())
                } else {
                    let s = dense.locate(j0);
                    (s.block, s.local_row * d, d, 1)
                };
                let (norms_buffer, w_off) = match norms {
                    Some(nm) => {
                        let s = nm.locate(j0);
                        (nm.buffer(s.block).clone(), s.local_row)
                    }
                    None => (x.values.clone(), 0),
                };
                let mut problem = Problem::zeroed();
                problem.rows = (i1 - i0) as u32;
                problem.cols = (j1 - j0) as u32;
                problem.depth = d as u32;
                problem.a_off = i0 as u32;
                // The piece's non-zeros (read by the counters).
                problem.a_rs = piece_nnz as u32;
                problem.b_off = d_off as u32;
                problem.b_rs = j_stride as u32;
                problem.b_cs = k_stride as u32;
                problem.c_off = (o.local_row * out_cols + j0) as u32;
                problem.c_rs = out_cols as u32;
                problem.c_cs = 1;
                problem.w_off = w_off as u32;
                problem.flags = FLAG_APPLY;
                problem.kind = code.kind;
                problem.degree = code.degree;
                problem.gamma = code.gamma as f32;
                problem.coef0 = code.coef0 as f32;
                plan.push(Dispatch {
                    problem,
                    precision: x.precision,
                    buffers: vec![x.values.clone(), dense.buffer(db).clone(), out.buffer(o.block).clone(), norms_buffer, x.row_ptr.clone(), x.col_idx.clone()],
                    weights: None,
                    grid: [(i1 - i0) as u32, (j1 - j0).div_ceil(SPARSE_GROUP) as u32, 1],
                    pipeline: PipelineKind::Sparse,
                    variant: 0,
                    params: (code.gamma, code.coef0),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sparse product shader of each precision through naga (WGSL
    /// front end, validation with f64 where it is `f64`, SPIR-V with and
    /// without bounds checks), without a GPU.
    #[test]
    fn sparse_shader_validates_and_compiles_to_spirv() {
        use naga::back::spv::{self, Capability};
        use naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy};
        use naga::valid::{Capabilities, ValidationFlags, Validator};
        for precision in [Precision::F32, Precision::F64] {
            let src = super::super::pipelines::sparse_source(precision);
            let module = naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{precision:?}: {}", e.emit_to_string(&src)));
            let (caps, mut spv_caps) = (if precision == Precision::F64 { Capabilities::FLOAT64 } else { Capabilities::empty() }, naga::FastHashSet::default());
            spv_caps.insert(Capability::Shader);
            if precision == Precision::F64 {
                spv_caps.insert(Capability::Float64);
            }
            let info = Validator::new(ValidationFlags::all(), caps).validate(&module).unwrap_or_else(|e| panic!("{precision:?}: {}", e.emit_to_string(&src)));
            for policy in [BoundsCheckPolicy::Restrict, BoundsCheckPolicy::Unchecked] {
                let options = spv::Options { lang_version: (1, 6), capabilities: Some(spv_caps.clone()), bounds_check_policies: BoundsCheckPolicies { index: policy, buffer: policy, ..Default::default() }, ..Default::default() };
                spv::write_vec(&module, &info, &options, None).unwrap_or_else(|e| panic!("{precision:?} {policy:?}: {e}"));
            }
        }
    }

    /// The loop passes of the longest row allowed stay within the budget.
    #[test]
    fn the_longest_row_fits_the_loop_budget() {
        let nnz = SPARSE_MAX_ROW_NNZ;
        assert!(nnz + 2 * nnz.div_ceil(SPARSE_GROUP) + 2 + 33 <= LOOP_BUDGET);
    }
}
