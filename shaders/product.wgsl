// Batched, register-tiled kernel-matrix / matrix-product shader: the
// template of every product variant. `src/gpu/variants.rs` fills the
// template fields (written between double at-signs) for one variant (tile shape, register block, depth chunk,
// vector width, lane layout, distance form, staging order, stages) and
// compiles the result after a precision prelude (`prelude_f32.wgsl` or
// `prelude_f64.wgsl`: T, texp, ttanh, tsqrt) and `problem.wgsl` (the
// descriptor, bindings, load_a / load_b / store_c, the kernel functions).
//
// For every problem p of the batch (workgroup_id.z) it computes
//     C_p[i, j] = f_p( s(a_i, b_j) )     (rows x cols)
// where a_i is row i of A_p (element (i, k) at a_off + i a_rs + k a_cs),
// b_j is row j of B_p (element (j, k) at b_off + j b_rs + k b_cs), C_p's
// element (i, j) is at c_off + i c_rs + j c_cs, s is the squared distance
// ||a_i - b_j||^2 (RBF, Laplacian) or the inner product <a_i, b_j>, and f
// the kernel function of `kernel.rs` (identity for the linear kernel, so
// kind LINEAR is the plain product A B^T). Flags: ACCUMULATE adds the
// statistic already in C (depth split in chunks), APPLY applies f (last
// chunk), WEIGHTED (linear only) reads a_ik w_k.
//
// A workgroup of WX x WY invocations computes a TR x TC tile of C; each
// invocation a block of RM rows x RN columns held in registers declared by
// name (dynamically indexed private arrays end up in slow local memory on
// some drivers). KC-deep slices of A and B are staged in workgroup memory
// as UNIT-wide vectors (vec4 or scalars); with two stages the next slice is
// loaded while the current one is used (one barrier per slice).
//
// Distance forms: direct accumulates (a - b)^2; expanded accumulates <a, b>
// and both squared norms and forms s = |a|^2 + |b|^2 - 2 <a, b> (one FMA
// per term instead of two). Where the expansion cancels (s <= NEAR
// (|a|^2 + |b|^2): near-duplicate points, data far from the origin) the
// pair is recomputed directly from global memory, so the expanded form has
// the direct form's accuracy: it keeps the Laplacian's sqrt(s) accurate
// near 0 and the RBF's exp(-gamma s) exact on the diagonal.

const TR: u32 = @@TR@@u;
const TC: u32 = @@TC@@u;
const KC: u32 = @@KC@@u;
const RM: u32 = @@RM@@u;
const RN: u32 = @@RN@@u;
const UNIT: u32 = @@UNIT@@u;
const RMU: u32 = @@RMU@@u;
const RNU: u32 = @@RNU@@u;
const WX: u32 = @@WX@@u;
const WY: u32 = @@WY@@u;
const THREADS: u32 = @@THREADS@@u;
const EXPANDED: bool = @@EXPANDED@@;
const NEAR: f32 = 0.125;

var<workgroup> a_tile: array<array<array<@@VT@@, @@AU@@>, @@KC@@>, @@STAGES@@>;
var<workgroup> b_tile: array<array<array<@@VT@@, @@BU@@>, @@KC@@>, @@STAGES@@>;

// Stages depth k0 .. k0 + KC of tile rows row0.. of A and col0.. of B into
// buffer `buf` (zero beyond the problem).
fn stage(p: Problem, buf: u32, k0: u32, row0: u32, col0: u32, li: u32) {
    for (var t = 0u; t < @@A_LOADS@@u; t++) {
        let e = li + t * THREADS;
        if (e < TR * KC) {
            @@INDEX_A@@
            let v = load_a(p, row0 + r, k0 + kk);
            @@SET_A@@
        }
    }
    for (var t = 0u; t < @@B_LOADS@@u; t++) {
        let e = li + t * THREADS;
        if (e < TC * KC) {
            @@INDEX_B@@
            let v = load_b(p, col0 + r, k0 + kk);
            @@SET_B@@
        }
    }
}

// ||a_i - b_j||^2 over the problem's depth, from global memory: the
// expanded form's fallback where the expansion cancels.
fn direct_distance(p: Problem, i: u32, j: u32) -> T {
    var s = T(0.0);
    for (var k = 0u; k < p.depth; k++) {
        let d = load_a(p, i, k) - load_b(p, j, k);
        s = fma(d, d, s);
    }
    return s;
}

// Writes entry (gr, gc): `v` is the statistic (direct form, inner products)
// or <a, b> with the squared norms na, nb (expanded distances).
fn emit(p: Problem, distance: bool, gr: u32, gc: u32, v: T, na: T, nb: T) {
    var s = v;
    if (EXPANDED && distance) {
        let scale = na + nb;
        s = max(scale - T(2.0) * v, T(0.0));
        if (s <= T(NEAR) * scale) {
            s = direct_distance(p, gr, gc);
        }
    }
    store_c(p, gr, gc, s);
}

@compute @workgroup_size(@@WX@@, @@WY@@, 1)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let p = problems[wg.z];
    let row0 = wg.y * TR;
    let col0 = wg.x * TC;
    // Whole workgroup leaves together (uniform), before any barrier.
    if (row0 >= p.rows || col0 >= p.cols) {
        return;
    }
    let distance = p.kind == KIND_RBF || p.kind == KIND_LAPLACIAN;
    let direct = distance && !EXPANDED;
    let lx = lid.x;
    let ly = lid.y;
@@DECLS@@
@@PROLOGUE@@
    for (var k0 = 0u; k0 < p.depth; k0 += KC) {
@@PRE@@
        if (direct) {
            for (var kk = 0u; kk < KC; kk++) {
@@STEP_DIRECT@@
            }
        } else if (distance) {
            for (var kk = 0u; kk < KC; kk++) {
@@STEP_EXPANDED@@
            }
        } else {
            for (var kk = 0u; kk < KC; kk++) {
@@STEP_INNER@@
            }
        }
@@POST@@
    }

@@PACK@@
    // Rows and columns of an invocation grow with r and q, so the first
    // index beyond the problem ends the loop.
    for (var r = 0u; r < RM; r++) {
        let pu = r / UNIT;
        let gr = row0 + (@@UROW@@) * UNIT + r % UNIT;
        if (gr >= p.rows) {
            break;
        }
        for (var q = 0u; q < RN; q++) {
            let qu = q / UNIT;
            let gc = col0 + (@@UCOL@@) * UNIT + q % UNIT;
            if (gc >= p.cols) {
                break;
            }
            emit(p, distance, gr, gc, @@ACC_AT@@, @@NA_AT@@, @@NB_AT@@);
        }
    }
}
