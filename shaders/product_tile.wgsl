// Batched, register-tiled kernel-matrix / matrix-product shader: the
// template of every product variant. `src/gpu/variants.rs` fills the
// template fields (written between double at-signs) for one variant (tile shape, register block, depth chunk,
// vector width, global load width, lane layout, distance form, staging
// order, stages) and compiles the result after a precision prelude
// (`prelude_f32.wgsl` or `prelude_f64.wgsl`: T, texp, ttanh, tsqrt) and
// `problem.wgsl` (the descriptor, bindings, load_a / load_b / store_c, the
// kernel functions; with vec4 global loads also `vec4_loads.wgsl`).
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
// and both squared norms (one FMA per term instead of two) and forms the
// distance by `expanded_distance` (`problem.wgsl`), which recomputes it
// directly where the expansion cancels.

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

var<workgroup> a_tile: array<array<array<@@VT@@, @@AU@@>, @@KC@@>, @@STAGES@@>;
var<workgroup> b_tile: array<array<array<@@VT@@, @@BU@@>, @@KC@@>, @@STAGES@@>;

// Stages depth k0 .. k0 + KC of tile rows row0.. of A and col0.. of B into
// buffer `buf` (zero beyond the problem): with vec4 global loads and
// FLAG_VEC4 four depth elements per load, else element by element.
fn stage(p: Problem, buf: u32, k0: u32, row0: u32, col0: u32, li: u32) {
@@STAGE4@@    for (var t = 0u; t < @@A_LOADS@@u; t++) {
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

// The statistic of entry (gr, gc) from the registers: `v` is the statistic
// itself (direct form, inner products) or <a, b> with the squared norms
// na, nb (expanded distances).
fn statistic_of(p: Problem, distance: bool, gr: u32, gc: u32, v: T, na: T, nb: T) -> T {
    if (EXPANDED && distance) {
        return expanded_distance(p, gr, gc, v, na, nb);
    }
    return v;
}

