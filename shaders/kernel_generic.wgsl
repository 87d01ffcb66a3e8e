// Generic-precision kernel-matrix / matrix-product shader, compiled after a
// precision prelude (`prelude_f64.wgsl` or `prelude_f32.wgsl`, defining the
// scalar type T and texp, ttanh, tsqrt) and `problem.wgsl`. Same problem semantics as
// `kernel_matrix.wgsl` (strided operands, ACCUMULATE / APPLY / WEIGHTED):
//     C_p[i, j] = f_p( s(a_i, b_j) ),  s = ||a_i - b_j||^2 or <a_i, b_j>
//     (WEIGHTED: s = sum_k a_ik w_k b_jk),
// a_i at a_off + i a_rs + k a_cs, b_j at b_off + j b_rs + k b_cs, C at
// c_off + i c_rs + j c_cs; the kernel parameters gamma and coef0 are T.
//
// A 16 x 16 workgroup computes a 64 x 64 tile of C, each invocation a 4 x 4
// block (rows 4 ly.., columns 4 lx..); 64 x 16 slices of A and B are staged
// in workgroup memory (16 KiB in f64).

const GTILE: u32 = 64u;
const KC: u32 = 16u;


var<workgroup> a_tile: array<array<T, 64>, 16>;
var<workgroup> b_tile: array<array<T, 64>, 16>;

@compute @workgroup_size(16, 16, 1)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let p = problems[wg.z];
    let row0 = wg.y * GTILE;
    let col0 = wg.x * GTILE;
    if (row0 >= p.rows || col0 >= p.cols) {
        return;
    }
    let distance = p.kind == KIND_RBF || p.kind == KIND_LAPLACIAN;
    var acc: array<T, 16>;
    for (var q = 0u; q < 16u; q++) {
        acc[q] = T(0.0);
    }
    for (var k0 = 0u; k0 < p.depth; k0 += KC) {
        // 256 invocations stage 64 x 16 values of A and of B, 4 each.
        for (var t = 0u; t < 4u; t++) {
            let e = li + t * 256u;
            let r = e / KC;
            let kk = e % KC;
            let gk = k0 + kk;
            let av = load_a(p, row0 + r, gk);
            let bv = load_b(p, col0 + r, gk);
            a_tile[kk][r] = av;
            b_tile[kk][r] = bv;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < KC; kk++) {
            for (var i = 0u; i < 4u; i++) {
                let av = a_tile[kk][4u * lid.y + i];
                for (var j = 0u; j < 4u; j++) {
                    let bv = b_tile[kk][4u * lid.x + j];
                    if (distance) {
                        let d = av - bv;
                        acc[4u * i + j] = fma(d, d, acc[4u * i + j]);
                    } else {
                        acc[4u * i + j] = fma(av, bv, acc[4u * i + j]);
                    }
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let gr = row0 + 4u * lid.y + i;
        if (gr >= p.rows) {
            break;
        }
        for (var j = 0u; j < 4u; j++) {
            let gc = col0 + 4u * lid.x + j;
            if (gc >= p.cols) {
                break;
            }
            store_c(p, gr, gc, acc[4u * i + j]);
        }
    }
}
