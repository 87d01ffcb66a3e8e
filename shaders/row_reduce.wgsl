// Row reductions of a strided matrix, after a precision prelude (T):
//     out[out_off + i] = (ACCUMULATE ? out[out_off + i] : 0) + sum_k op(x[x_off + i x_rs + k x_cs])
// with op = square (mode 0: squared row norms, e.g. the model values
// f(x_i) = ||V^T phi(x_i)||^2 of a PSD model) or identity (mode 1: row sums).
// Mode 2 (a block of an arg-max, src/gpu/argmax.rs) writes three numbers per
// row instead: out[out_off + 3 i] = the row's largest entry, + 1 = its
// first position k in the row (the lowest on equal values), + 2 = the row's
// sum (non-finite where the row holds NaN or an infinity, which the largest
// entry alone would skip); `accumulate` is not read.
// One invocation per row, one loop pass per column: the planner cuts long
// rows into column chunks that accumulate (LOOP_BUDGET in src/gpu/mod.rs).

struct Reduce {
    rows: u32,
    cols: u32,
    x_off: u32,
    x_rs: u32,
    x_cs: u32,
    out_off: u32,
    mode: u32,
    accumulate: u32,
}

@group(0) @binding(0) var<storage, read> job: Reduce;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read_write> out: array<T>;

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 64u;
    if (i >= job.rows) {
        return;
    }
    if (job.mode == 2u) {
        let base = job.x_off + i * job.x_rs;
        var best = x[base];
        var at = 0u;
        var total = best;
        for (var k = 1u; k < job.cols; k++) {
            let v = x[base + k * job.x_cs];
            if (v > best) {
                best = v;
                at = k;
            }
            total = total + v;
        }
        out[job.out_off + 3u * i] = best;
        out[job.out_off + 3u * i + 1u] = T(at);
        out[job.out_off + 3u * i + 2u] = total;
        return;
    }
    var s = T(0.0);
    for (var k = 0u; k < job.cols; k++) {
        let v = x[job.x_off + i * job.x_rs + k * job.x_cs];
        if (job.mode == 0u) {
            s = fma(v, v, s);
        } else {
            s = s + v;
        }
    }
    if (job.accumulate != 0u) {
        s = s + out[job.out_off + i];
    }
    out[job.out_off + i] = s;
}
