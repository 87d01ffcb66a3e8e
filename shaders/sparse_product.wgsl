// Products of a CSR matrix X (n x d: row pointers, column indices, values)
// with a dense operand D, compiled after a precision prelude (T, texp, ...)
// and `problem.wgsl` (the descriptor, the bindings 0-4, the kernel function):
//
//   s_ij = sum_{p in row i} x_p D[b_off + j b_rs + col_p b_cs]
//
// which is Y = X B for D = B (d x c; b_rs = 1, b_cs = c) and the inner
// products <x_i, z_j> for D = Z (m x d; b_rs = d, b_cs = 1). For the distance
// kernels (RBF, Laplacian) the statistic is the squared distance
//
//   ||x_i - z_j||^2 = sum_{p} (x_p - z_{col_p})^2 + (||z_j||^2 - sum_{p} z_{col_p}^2)
//
// (the non-zeros of x_i against z_j, and z_j's squared norm outside them),
// with ||z_j||^2 read from w at w_off + j (a row reduction of Z, the same
// fma over the same columns in the same order as the second sum, so a row
// of X equal to z_j gives exactly 0). The kernel function is applied to
// every statistic (FLAG_APPLY).
//
// Bindings: a = the values of X, b = D, c = the output (element (i, j) at
// c_off + i c_rs + j c_cs), w = the squared norms of Z's rows (bound but not
// read for the inner-product kernels), row_ptr and col_idx of X. The
// problem's rows are the rows a_off .. a_off + rows of X.
//
// One workgroup per row of X (grid x) and 64 output columns (grid y): the
// row's non-zeros are staged in workgroup memory 64 at a time, and each
// invocation sums them against its column j. Loop passes per invocation:
// nnz(x_i) + 2 ceil(nnz(x_i) / 64) + 2, which the host keeps within
// LOOP_BUDGET (src/gpu/sparse.rs: rows of at most SPARSE_MAX_ROW_NNZ
// non-zeros), plus at most 33 of the polynomial power.

@group(0) @binding(5) var<storage, read> row_ptr: array<u32>;
@group(0) @binding(6) var<storage, read> col_idx: array<u32>;

const SPARSE_GROUP: u32 = 64u;

var<workgroup> staged_col: array<u32, 64>;
var<workgroup> staged_val: array<T, 64>;

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let p = problems[0];
    let i = wg.x;
    let j = wg.y * SPARSE_GROUP + lid;
    let row = min(p.a_off + i, p.a_off + p.rows - 1u);
    let start = row_ptr[row];
    let end = row_ptr[row + 1u];
    let distance = p.kind == KIND_RBF || p.kind == KIND_LAPLACIAN;
    let in_range = j < p.cols;
    var s = T(0.0);
    var inside = T(0.0);
    for (var base = start; base < end; base += SPARSE_GROUP) {
        let q = base + lid;
        if (q < end) {
            staged_col[lid] = col_idx[q];
            staged_val[lid] = a[q];
        }
        workgroupBarrier();
        let count = min(SPARSE_GROUP, end - base);
        if (in_range) {
            for (var t = 0u; t < count; t++) {
                let v = staged_val[t];
                let z = b[p.b_off + j * p.b_rs + staged_col[t] * p.b_cs];
                if (distance) {
                    let diff = v - z;
                    s = fma(diff, diff, s);
                    inside = fma(z, z, inside);
                } else {
                    s = fma(v, z, s);
                }
            }
        }
        workgroupBarrier();
    }
    if (!in_range) {
        return;
    }
    if (distance) {
        s = s + max(w[p.w_off + j] - inside, T(0.0));
    }
    if ((p.flags & FLAG_APPLY) != 0u) {
        s = kernel_of_statistic(p, s);
    }
    c[p.c_off + i * p.c_rs + j * p.c_cs] = s;
}
