// Element-wise maps of a row-major matrix X (rows x cols), after a precision
// prelude (T):
//   mode 0 (cosine features): out_ij = scale * cos(x_ij + y_j), y a row of
//          phases (random Fourier features, eKSVD);
//   mode 1 (Hadamard product): out_ij = x_ij * y_ij (the PSD gradient's
//          (K B) o K);
//   mode 2 (combination): out_ij = scale * x_ij + beta * y_ij;
//   mode 3 (shift): out_ij = scale * x_ij + beta [i = j] (y is not read),
//          with i counted from row0, the first row of this dispatch in the
//          whole matrix (the polynomial steps of the PSD positive part);
//   mode 4 (negative root): out_ij = (v - sqrt(v^2 + c)) / 2 for v = x_ij,
//          c = scale * y_ij >= 0, written -c / (2 (v + sqrt(v^2 + c))) for
//          v > 0 (no cancellation): the prox of the negative
//          log-likelihood's conjugate with a step per entry (src/psd/loss.rs);
//   mode 5 (log): out_ij = ln(scale * x_ij) where scale * x_ij > 0, else 0;
//   mode 6 (outside): out_ij = 0 where scale * x_ij > 0, else 1 (NaN too):
//          with mode 5, the sums of a log-likelihood and its domain check;
//   mode 7 (box): out_ij = lo_j where x_ij < lo_j, hi_j where x_ij > hi_j,
//          else x_ij (NaN stays), y the 2 x cols rows lo and hi: the prox
//          of the pinball loss's conjugate (src/psd/regression.rs);
//   mode 8 (outside box): out_ij = 0 where lo_j - beta <= x_ij <= hi_j +
//          beta, else 1 (NaN too), y as in mode 7: its domain check;
//   mode 9 (pinball): out_ij = max(y_j x_ij, (y_j - 1) x_ij), y a row of
//          levels: the pinball loss of the residual x_ij.
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
    } else if (job.mode == 4u) {
        let c = job.scale * y[job.y_off + e];
        let root = tsqrt(v * v + c);
        if (v > T(0.0)) {
            out[job.out_off + e] = -c / (T(2.0) * (v + root));
        } else {
            out[job.out_off + e] = T(0.5) * (v - root);
        }
    } else if (job.mode == 5u) {
        let w = job.scale * v;
        out[job.out_off + e] = select(T(0.0), tlog(w), w > T(0.0));
    } else if (job.mode == 6u) {
        out[job.out_off + e] = select(T(1.0), T(0.0), job.scale * v > T(0.0));
    } else if (job.mode == 7u) {
        let lo = y[job.y_off + j];
        let hi = y[job.y_off + job.cols + j];
        var c = v;
        if (v < lo) {
            c = lo;
        } else if (v > hi) {
            c = hi;
        }
        out[job.out_off + e] = c;
    } else if (job.mode == 8u) {
        let inside = v >= y[job.y_off + j] - job.beta && v <= y[job.y_off + job.cols + j] + job.beta;
        out[job.out_off + e] = select(T(1.0), T(0.0), inside);
    } else if (job.mode == 9u) {
        let tau = y[job.y_off + j];
        let a = tau * v;
        let b = (tau - T(1.0)) * v;
        out[job.out_off + e] = select(b, a, a > b);
    } else {
        var shift = T(0.0);
        if (job.row0 + e / job.cols == j) {
            shift = job.beta;
        }
        out[job.out_off + e] = job.scale * v + shift;
    }
}
