// Batched, register-tiled kernel-matrix / matrix-product shader.
//
// For every problem p of the batch (workgroup_id.z) it computes
//     C_p[i, j] = f_p( s(a_i, b_j) )     (rows x cols, row-major at c_off)
// where a_i is row i of A_p (rows x depth, row-major at a_off), b_j is row j
// of B_p (cols x depth, row-major at b_off), s is the squared distance
// ||a_i - b_j||^2 (distance kernels) or the inner product <a_i, b_j>, and f
// is the kernel function of `kernel.rs` (identity for the linear kernel, so
// kind LINEAR is the plain product A B^T).
//
// flags bit 0 (ACCUMULATE): add the statistic already stored in C (the host
//   splits a long depth into chunks and accumulates the statistic);
// flags bit 1 (APPLY): apply f after accumulating (last chunk only).
//
// Each 16 x 16 workgroup computes a 128 x 128 tile of C, each invocation an
// 8 x 8 block held in registers (rows ly + 16 r, columns lx + 16 q), staging
// 128 x 16 slices of A and B in workgroup memory (16 KiB).

struct Problem {
    rows: u32,
    cols: u32,
    depth: u32,
    a_off: u32,
    b_off: u32,
    c_off: u32,
    flags: u32,
    kind: u32,
    gamma: f32,
    coef0: f32,
    degree: u32,
    _pad: u32,
}

const KIND_LINEAR: u32 = 0u;
const KIND_RBF: u32 = 1u;
const KIND_LAPLACIAN: u32 = 2u;
const KIND_POLYNOMIAL: u32 = 3u;
const KIND_SIGMOID: u32 = 4u;

const FLAG_ACCUMULATE: u32 = 1u;
const FLAG_APPLY: u32 = 2u;

const TILE: u32 = 128u;
const RB: u32 = 8u;
const KC: u32 = 16u;

@group(0) @binding(0) var<storage, read> problems: array<Problem>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

var<workgroup> a_tile: array<array<f32, 128>, 16>;
var<workgroup> b_tile: array<array<f32, 128>, 16>;

fn kernel_of_statistic(p: Problem, s: f32) -> f32 {
    switch p.kind {
        case KIND_RBF: {
            return exp(-p.gamma * s);
        }
        case KIND_LAPLACIAN: {
            return exp(-p.gamma * sqrt(max(s, 0.0)));
        }
        case KIND_POLYNOMIAL: {
            let base = p.gamma * s + p.coef0;
            var r = 1.0;
            for (var e = 0u; e < p.degree; e++) {
                r = r * base;
            }
            return r;
        }
        case KIND_SIGMOID: {
            return tanh(p.gamma * s + p.coef0);
        }
        default: {
            return s;
        }
    }
}

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

    var acc: array<f32, 64>;
    for (var t = 0u; t < 64u; t++) {
        acc[t] = 0.0;
    }

    for (var k0 = 0u; k0 < p.depth; k0 += KC) {
        // 256 invocations stage 128 x 16 values of A and of B, 8 each.
        for (var t = 0u; t < 8u; t++) {
            let e = li + t * 256u;
            let r = e / KC;
            let kk = e % KC;
            let gk = k0 + kk;
            var av = 0.0;
            var bv = 0.0;
            if (gk < p.depth) {
                if (row0 + r < p.rows) {
                    av = a[p.a_off + (row0 + r) * p.depth + gk];
                }
                if (col0 + r < p.cols) {
                    bv = b[p.b_off + (col0 + r) * p.depth + gk];
                }
            }
            a_tile[kk][r] = av;
            b_tile[kk][r] = bv;
        }
        workgroupBarrier();
        // Zero padding beyond `depth` adds nothing to either statistic.
        if (distance) {
            for (var kk = 0u; kk < KC; kk++) {
                var bv: array<f32, 8>;
                for (var q = 0u; q < RB; q++) {
                    bv[q] = b_tile[kk][lid.x + 16u * q];
                }
                for (var r = 0u; r < RB; r++) {
                    let av = a_tile[kk][lid.y + 16u * r];
                    for (var q = 0u; q < RB; q++) {
                        let diff = av - bv[q];
                        acc[r * RB + q] = fma(diff, diff, acc[r * RB + q]);
                    }
                }
            }
        } else {
            for (var kk = 0u; kk < KC; kk++) {
                var bv: array<f32, 8>;
                for (var q = 0u; q < RB; q++) {
                    bv[q] = b_tile[kk][lid.x + 16u * q];
                }
                for (var r = 0u; r < RB; r++) {
                    let av = a_tile[kk][lid.y + 16u * r];
                    for (var q = 0u; q < RB; q++) {
                        acc[r * RB + q] = fma(av, bv[q], acc[r * RB + q]);
                    }
                }
            }
        }
        workgroupBarrier();
    }

    for (var r = 0u; r < RB; r++) {
        let gr = row0 + lid.y + 16u * r;
        if (gr >= p.rows) {
            continue;
        }
        for (var q = 0u; q < RB; q++) {
            let gc = col0 + lid.x + 16u * q;
            if (gc >= p.cols) {
                continue;
            }
            let idx = p.c_off + gr * p.cols + gc;
            var s = acc[r * RB + q];
            if ((p.flags & FLAG_ACCUMULATE) != 0u) {
                s = s + c[idx];
            }
            if ((p.flags & FLAG_APPLY) != 0u) {
                s = kernel_of_statistic(p, s);
            }
            c[idx] = s;
        }
    }
}
