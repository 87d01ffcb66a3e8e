// Element-wise maps of a row-major matrix X (rows x cols), after a precision
// prelude (T):
//   mode 0 (cosine features): out_ij = scale * cos(x_ij + y_j), y a row of
//          phases (random Fourier features, eKSVD);
//   mode 1 (Hadamard product): out_ij = x_ij * y_ij (the PSD gradient's
//          (K B) o K);
//   mode 2 (combination): out_ij = scale * x_ij + beta * y_ij;
//   mode 3 (shift): out_ij = scale * x_ij + beta [i = j] (y is not read),
//          with i counted from row0, the first row of this dispatch in the
//          whole matrix (the polynomial steps of the PSD positive part).
// One invocation per element; x, y and out are within one binding each.

struct Map {
    rows: u32,
    cols: u32,
    x_off: u32,
    y_off: u32,
    out_off: u32,
    mode: u32,
    row0: u32,
    scale: T,
    beta: T,
}

@group(0) @binding(0) var<storage, read> job: Map;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read> y: array<T>;
@group(0) @binding(3) var<storage, read_write> out: array<T>;

@compute @workgroup_size(256, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * 256u;
    if (e >= job.rows * job.cols) {
        return;
    }
    let j = e % job.cols;
    let v = x[job.x_off + e];
    if (job.mode == 0u) {
        out[job.out_off + e] = job.scale * tcos(v + y[job.y_off + j]);
    } else if (job.mode == 1u) {
        out[job.out_off + e] = v * y[job.y_off + e];
    } else if (job.mode == 2u) {
        out[job.out_off + e] = job.scale * v + job.beta * y[job.y_off + e];
    } else {
        var shift = T(0.0);
        if (job.row0 + e / job.cols == j) {
            shift = job.beta;
        }
        out[job.out_off + e] = job.scale * v + shift;
    }
}
