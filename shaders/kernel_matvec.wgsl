// Kernel matrix times a thin matrix without storing the kernel matrix:
//     Y[i, c] (+)= sum_j k(x_i, z_j) V[j, c]
// X: rows x depth (row-major), Z: cols x depth (row-major), V: cols x width
// (row-major), Y: rows x width (row-major), width <= MAX_WIDTH.
//
// One invocation per row of X, 64 rows per workgroup. Z and V are streamed
// through workgroup memory in blocks of 64 points (and 16 features): each
// invocation accumulates the statistic against the 64 points of the block in
// registers, applies k, and multiplies into its output row. The kernel
// function and parameter layout are those of kernel_matrix.wgsl.

struct Params {
    rows: u32,
    cols: u32,
    depth: u32,
    width: u32,
    flags: u32,
    kind: u32,
    gamma: f32,
    coef0: f32,
    degree: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

const KIND_RBF: u32 = 1u;
const KIND_LAPLACIAN: u32 = 2u;
const KIND_POLYNOMIAL: u32 = 3u;
const KIND_SIGMOID: u32 = 4u;
const FLAG_ACCUMULATE: u32 = 1u;

const JB: u32 = 64u;
const KC: u32 = 16u;
const MAX_WIDTH: u32 = 8u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> z: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

var<workgroup> z_tile: array<array<f32, 64>, 16>;
var<workgroup> v_tile: array<array<f32, 8>, 64>;

fn kernel_of_statistic(s: f32) -> f32 {
    switch params.kind {
        case KIND_RBF: {
            return exp(-params.gamma * s);
        }
        case KIND_LAPLACIAN: {
            return exp(-params.gamma * sqrt(max(s, 0.0)));
        }
        case KIND_POLYNOMIAL: {
            let base = params.gamma * s + params.coef0;
            var r = 1.0;
            for (var e = 0u; e < params.degree; e++) {
                r = r * base;
            }
            return r;
        }
        case KIND_SIGMOID: {
            return tanh(params.gamma * s + params.coef0);
        }
        default: {
            return s;
        }
    }
}

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let row = wg.x * 64u + li;
    let valid_row = row < params.rows;
    let distance = params.kind == KIND_RBF || params.kind == KIND_LAPLACIAN;

    var out: array<f32, 8>;
    for (var w = 0u; w < MAX_WIDTH; w++) {
        out[w] = 0.0;
    }

    for (var j0 = 0u; j0 < params.cols; j0 += JB) {
        var acc: array<f32, 64>;
        for (var jj = 0u; jj < JB; jj++) {
            acc[jj] = 0.0;
        }
        for (var k0 = 0u; k0 < params.depth; k0 += KC) {
            // Stage Z[j0 .. j0+64, k0 .. k0+16]: 1024 values, 16 per invocation.
            for (var t = 0u; t < 16u; t++) {
                let e = li + t * 64u;
                let jj = e / KC;
                let kk = e % KC;
                var zv = 0.0;
                if (j0 + jj < params.cols && k0 + kk < params.depth) {
                    zv = z[(j0 + jj) * params.depth + k0 + kk];
                }
                z_tile[kk][jj] = zv;
            }
            workgroupBarrier();
            for (var kk = 0u; kk < KC; kk++) {
                var xv = 0.0;
                if (valid_row && k0 + kk < params.depth) {
                    xv = x[row * params.depth + k0 + kk];
                }
                if (distance) {
                    for (var jj = 0u; jj < JB; jj++) {
                        let diff = xv - z_tile[kk][jj];
                        acc[jj] = fma(diff, diff, acc[jj]);
                    }
                } else {
                    for (var jj = 0u; jj < JB; jj++) {
                        acc[jj] = fma(xv, z_tile[kk][jj], acc[jj]);
                    }
                }
            }
            workgroupBarrier();
        }
        // Stage V[j0 .. j0+64, 0 .. width]: one row per invocation.
        for (var w = 0u; w < MAX_WIDTH; w++) {
            var vv = 0.0;
            if (j0 + li < params.cols && w < params.width) {
                vv = v[(j0 + li) * params.width + w];
            }
            v_tile[li][w] = vv;
        }
        workgroupBarrier();
        let jmax = min(JB, params.cols - j0);
        for (var jj = 0u; jj < jmax; jj++) {
            let kv = kernel_of_statistic(acc[jj]);
            for (var w = 0u; w < MAX_WIDTH; w++) {
                out[w] = fma(kv, v_tile[jj][w], out[w]);
            }
        }
        workgroupBarrier();
    }

    if (valid_row) {
        for (var w = 0u; w < params.width; w++) {
            let idx = row * params.width + w;
            var r = out[w];
            if ((params.flags & FLAG_ACCUMULATE) != 0u) {
                r = r + y[idx];
            }
            y[idx] = r;
        }
    }
}
