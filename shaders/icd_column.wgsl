// One fused step of an incomplete Cholesky decomposition on pivot i (Eq. 2-3
// of the mklaren paper), after a precision prelude (T). With k = K(:, i) the
// kernel column and p = G G(i,:)^T the combination of the earlier columns
// (both n x 1), every row r of the dispatch writes column t of G (at g_off +
// r g_rs) and updates the residual diagonal d in place:
//   an earlier pivot (d_r < 0, the mark below):  g_r = 0, d_r kept;
//   the pivot (r = pivot):                       g_r = sqrt(d_i), d_r = -1;
//   any other row:  g_r = (k_r - p_r) / sqrt(d_i), d_r = max(d_r - g_r^2, 0).
// Pivots are marked by -1 in d (a residual diagonal is otherwise >= 0), so
// an arg-max over d never picks them again and the next step knows them
// without a list. sqrt(d_i) and its inverse come from the host (scale, beta).
// One invocation per row; each reads and writes its own row only.

struct Icd {
    rows: u32,
    k_off: u32,
    p_off: u32,
    d_off: u32,
    g_off: u32,
    g_rs: u32,
    pivot: u32,
    scale: T,
    beta: T,
}

@group(0) @binding(0) var<storage, read> job: Icd;
@group(0) @binding(1) var<storage, read> k: array<T>;
@group(0) @binding(2) var<storage, read> p: array<T>;
@group(0) @binding(3) var<storage, read_write> d: array<T>;
@group(0) @binding(4) var<storage, read_write> g: array<T>;

@compute @workgroup_size(256, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.y * nwg.x * 256u;
    if (r >= job.rows) {
        return;
    }
    let dr = d[job.d_off + r];
    var gv = T(0.0);
    if (r == job.pivot) {
        gv = job.beta;
        d[job.d_off + r] = T(-1.0);
    } else if (dr >= T(0.0)) {
        gv = (k[job.k_off + r] - p[job.p_off + r]) * job.scale;
        d[job.d_off + r] = max(dr - gv * gv, T(0.0));
    }
    g[job.g_off + r * job.g_rs] = gv;
}
