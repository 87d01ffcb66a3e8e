// Batched, register-tiled kernel-matrix / matrix-product shader in f32,
// compiled after `prelude_f32.wgsl` and `problem.wgsl` (the descriptor and
// the kernel functions).
//
// For every problem p of the batch (workgroup_id.z) it computes
//     C_p[i, j] = f_p( s(a_i, b_j) )     (rows x cols, row-major at c_off)
// where a_i is row i of A_p (element (i, k) at a_off + i a_rs + k a_cs),
// b_j is row j of B_p (element (j, k) at b_off + j b_rs + k b_cs), C_p's
// element (i, j) is at c_off + i c_rs + j c_cs, s is the squared distance
// ||a_i - b_j||^2 (distance kernels) or the inner product <a_i, b_j>, and f
// is the kernel function of `kernel.rs` (identity for the linear kernel, so
// kind LINEAR is the plain product A B^T).
//
// flags bit 0 (ACCUMULATE): add the statistic already stored in C (the host
//   splits a long depth into chunks and accumulates the statistic);
// flags bit 1 (APPLY): apply f after accumulating (last chunk only).
// flags bit 2 (WEIGHTED, linear kind only): s = sum_k a_ik w_k b_jk with the
//   weights w at w_off (the weighted Gram P diag(w) P^T).
//
// The strides let one shader read row-major operands, their transposes and
// row blocks of device-resident matrices in place.
//
// Each 16 x 16 workgroup computes a 128 x 128 tile of C, each invocation an
// 8 x 8 block (rows 8 ly .. 8 ly + 7, columns 8 lx .. 8 lx + 7) held in 16
// vec4 registers, written out by name: dynamically indexed private arrays end
// up in slow local memory on some drivers. 128 x 16 slices of A and B are
// staged in workgroup memory (16 KiB) as vec4s, so each step of the inner
// loop is 4 vector loads and 16 vector FMAs (32 for distances).

const TILE: u32 = 128u;
const RB: u32 = 8u;
const KC: u32 = 16u;


var<workgroup> a_tile: array<array<vec4<f32>, 32>, 16>;
var<workgroup> b_tile: array<array<vec4<f32>, 32>, 16>;

@compute @workgroup_size(16, 16, 1)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let p = problems[wg.z];
    let row0 = wg.y * TILE;
    let col0 = wg.x * TILE;
    // Whole workgroup leaves together (uniform), before any barrier.
    if (row0 >= p.rows || col0 >= p.cols) {
        return;
    }
    let distance = p.kind == KIND_RBF || p.kind == KIND_LAPLACIAN;

    var acc00 = vec4<f32>(0.0);
    var acc01 = vec4<f32>(0.0);
    var acc10 = vec4<f32>(0.0);
    var acc11 = vec4<f32>(0.0);
    var acc20 = vec4<f32>(0.0);
    var acc21 = vec4<f32>(0.0);
    var acc30 = vec4<f32>(0.0);
    var acc31 = vec4<f32>(0.0);
    var acc40 = vec4<f32>(0.0);
    var acc41 = vec4<f32>(0.0);
    var acc50 = vec4<f32>(0.0);
    var acc51 = vec4<f32>(0.0);
    var acc60 = vec4<f32>(0.0);
    var acc61 = vec4<f32>(0.0);
    var acc70 = vec4<f32>(0.0);
    var acc71 = vec4<f32>(0.0);

    for (var k0 = 0u; k0 < p.depth; k0 += KC) {
        // 256 invocations stage 128 x 16 values of A and of B, 8 each;
        // consecutive invocations read consecutive features of one row.
        for (var t = 0u; t < 8u; t++) {
            let e = li + t * 256u;
            let r = e / KC;
            let kk = e % KC;
            let gk = k0 + kk;
            let av = load_a(p, row0 + r, gk);
            let bv = load_b(p, col0 + r, gk);
            a_tile[kk][r / 4u][r % 4u] = av;
            b_tile[kk][r / 4u][r % 4u] = bv;
        }
        workgroupBarrier();
        // Zero padding beyond `depth` adds nothing to either statistic.
        if (distance) {
            for (var kk = 0u; kk < KC; kk++) {
                let a0 = a_tile[kk][2u * lid.y];
                let a1 = a_tile[kk][2u * lid.y + 1u];
                let b0 = b_tile[kk][2u * lid.x];
                let b1 = b_tile[kk][2u * lid.x + 1u];
                var d: vec4<f32>;
                d = vec4<f32>(a0.x) - b0;
                acc00 = fma(d, d, acc00);
                d = vec4<f32>(a0.x) - b1;
                acc01 = fma(d, d, acc01);
                d = vec4<f32>(a0.y) - b0;
                acc10 = fma(d, d, acc10);
                d = vec4<f32>(a0.y) - b1;
                acc11 = fma(d, d, acc11);
                d = vec4<f32>(a0.z) - b0;
                acc20 = fma(d, d, acc20);
                d = vec4<f32>(a0.z) - b1;
                acc21 = fma(d, d, acc21);
                d = vec4<f32>(a0.w) - b0;
                acc30 = fma(d, d, acc30);
                d = vec4<f32>(a0.w) - b1;
                acc31 = fma(d, d, acc31);
                d = vec4<f32>(a1.x) - b0;
                acc40 = fma(d, d, acc40);
                d = vec4<f32>(a1.x) - b1;
                acc41 = fma(d, d, acc41);
                d = vec4<f32>(a1.y) - b0;
                acc50 = fma(d, d, acc50);
                d = vec4<f32>(a1.y) - b1;
                acc51 = fma(d, d, acc51);
                d = vec4<f32>(a1.z) - b0;
                acc60 = fma(d, d, acc60);
                d = vec4<f32>(a1.z) - b1;
                acc61 = fma(d, d, acc61);
                d = vec4<f32>(a1.w) - b0;
                acc70 = fma(d, d, acc70);
                d = vec4<f32>(a1.w) - b1;
                acc71 = fma(d, d, acc71);
            }
        } else {
            for (var kk = 0u; kk < KC; kk++) {
                let a0 = a_tile[kk][2u * lid.y];
                let a1 = a_tile[kk][2u * lid.y + 1u];
                let b0 = b_tile[kk][2u * lid.x];
                let b1 = b_tile[kk][2u * lid.x + 1u];
                acc00 = fma(vec4<f32>(a0.x), b0, acc00);
                acc01 = fma(vec4<f32>(a0.x), b1, acc01);
                acc10 = fma(vec4<f32>(a0.y), b0, acc10);
                acc11 = fma(vec4<f32>(a0.y), b1, acc11);
                acc20 = fma(vec4<f32>(a0.z), b0, acc20);
                acc21 = fma(vec4<f32>(a0.z), b1, acc21);
                acc30 = fma(vec4<f32>(a0.w), b0, acc30);
                acc31 = fma(vec4<f32>(a0.w), b1, acc31);
                acc40 = fma(vec4<f32>(a1.x), b0, acc40);
                acc41 = fma(vec4<f32>(a1.x), b1, acc41);
                acc50 = fma(vec4<f32>(a1.y), b0, acc50);
                acc51 = fma(vec4<f32>(a1.y), b1, acc51);
                acc60 = fma(vec4<f32>(a1.z), b0, acc60);
                acc61 = fma(vec4<f32>(a1.z), b1, acc61);
                acc70 = fma(vec4<f32>(a1.w), b0, acc70);
                acc71 = fma(vec4<f32>(a1.w), b1, acc71);
            }
        }
        workgroupBarrier();
    }

    let acc = array<vec4<f32>, 16>(acc00, acc01, acc10, acc11, acc20, acc21, acc30, acc31, acc40, acc41, acc50, acc51, acc60, acc61, acc70, acc71);
    for (var r = 0u; r < RB; r++) {
        let gr = row0 + 8u * lid.y + r;
        if (gr >= p.rows) {
            break;
        }
        for (var q = 0u; q < RB; q++) {
            let gc = col0 + 8u * lid.x + q;
            if (gc >= p.cols) {
                break;
            }
            store_c(p, gr, gc, acc[2u * r + q / 4u][q % 4u]);
        }
    }
}
