// The device steps of mklaren (src/gpu/mklaren.rs, src/mklaren/device.rs),
// after a precision prelude (T = f64) and the kernel function
// (`kernel_function.wgsl`). One module, the step chosen by
// job.mode; every mode binds the same eight buffers (a, b, c, e, o, the
// state vector st, and a CSR matrix's row pointers and column indices; a
// mode that needs fewer binds st in their place, so all are read_write). Pivots, kernel choices and step lengths never go through
// the host: they are read from st, where earlier dispatches wrote them.
//
// Modes (rows: invocations, one per row unless said):
//   0 copy:     o[o_off + r o_rs] = a[a_off + r a_rs] (w12 = 1: = s0).
//   1 argblock: arg-max of a[a_off + r a_rs] per workgroup of 256 rows;
//               partial w = (key0, key1, index, bad) at o[o_off + 4 w].
//   2 score:    the look-ahead score of candidate row r (Eq. 14-16, 11) and
//               the arg-min of the keys per workgroup, partials as mode 1.
//   3 combine:  one workgroup reduces `rows` partials of a (from a_off) into
//               st: w12 = 0 (an arg-max): st[slot0] = index, st[slot0 + 1] =
//               value (and the same at slot1 unless NONE); w12 = 1 (a
//               candidate): st[slot0 .. slot0 + 3] = (key0, key1, index).
//   4 (none)
//   5 icd:      a Cholesky column (Eq. 2-3) with the pivot p = st[slot0] and
//               d_p = st[slot1]: k = a[a_off + r], q = b[b_off + r], d =
//               c[w12 + r w13] (in place), g = o[o_off + r o_rs];
//               earlier pivots (d < 0): g = 0; the pivot: g = sqrt(d_p),
//               d = -1; others: g = (k - q) / sqrt(d_p), d = max(d - g^2, 0).
//               Where d_p <= s0 (the tolerance) g = 0 and d is kept.
//   6 cnorm:    o[o_off + r o_rs] = z^T M z with z the first w12 entries of
//               row r of a (rows of a_rs numbers) and M = B^T B - B^T 1 1^T B
//               / n read from e = [B 1 ..]^T [B 1 ..] (a_rs x a_rs).
//   7 kernels:  one invocation: the best of `rows` candidates at st[slot0 +
//               q slot1 + 6 ..] (ties: the lower q): st[2] = q, st[3] = index;
//               none valid: st[1] = 1, st[2] = -1.
//   8 elem:     w12 = 0: o[r] = a[r] - st[slot0] / n (r < n), 0 beyond;
//               w12 = 1: o[r] = o[r] / sqrt(st[slot0]) s0 (r < n), s1 at
//               r = n + slot1, 0 elsewhere (st[1] = 2 where the norm is not
//               finite and > 0); w12 = 2: o[r] += t a[2r + 1], a[2r] -= t
//               a[2r + 1] with t = st[slot0]; w12 = 3: a[r] *= st[slot0],
//               o[o_off + r o_rs] = a[r]. n = w13.
//   9 small:    one invocation: w12 = 0: st[4] = the LAR step (Eq. 11) of
//               c = st[9], a = st[10] at the active correlation st[15],
//               capped at 1 (0 where w13 = 1: the first step); w12 = 1:
//               st[7] = the sign of st[13].
//  10 dots:     partial sums of
//               out(i, j) = sum_r a[a_off + r a_rs + i] b[b_off + r b_rs + j]
//               (i < w12, j < w13) over chunks of w14 of the `rows` rows:
//               o[o_off + chunk w12 w13 + i w13 + j];
//  11 dotsum:   out(i, j) = the sum over w14 chunks of those partials (a,
//               from a_off), written at o[o_off + i o_rs + j].
//  12 kcol:    the kernel column of pivot p = st[slot0] against every row:
//               o[o_off + r o_rs] = k(x_r, x_p), x_r the w12 numbers at
//               a[a_off + r a_rs], k of kind w13 (degree w14, gamma s0,
//               coef0 s1) applied to ||x_r - x_p||^2 (RBF, Laplacian) or
//               x_r^T x_p; and st[slot1] = b[b_off + p b_rs] unless slot1 is
//               NONE. Row p of X is read where it lies: no gather.
//  13 rowdot:   a tall matrix times a short vector, the vector row p of b
//               (p = st[slot0], 0 where slot0 is NONE):
//               o[o_off + r o_rs] = sum_j a[a_off + r a_rs + j] b[b_off + p b_rs + j]
//               over j < w12 and w13 <= j < w13 + w14 (e.g. p = F F(i,:)^T
//               over the columns computed, or u = H w).
//  14 skcol:    mode 12 on a CSR X (values in a, row pointers and column
//               indices in csr_row_ptr, csr_col_idx; rows = n): one merge of
//               the sorted column indices of rows r and p = st[slot0] gives
//               the inner product <x_r, x_p> (the products of the shared
//               columns, in column order) and the merged squared distance
//               m = sum over the union of (x_rc - x_pc)^2; for RBF and
//               Laplacian the statistic is s = max(||x_r||^2 + ||x_p||^2 -
//               2 <x_r, x_p>, 0) with the squared norms c[r], c[p], or m
//               where s <= 1e-4 (||x_r||^2 + ||x_p||^2) (a near duplicate:
//               the CPU's sparse statistic, src/sparse.rs), else s = <x_r,
//               x_p>. o[o_off + r o_rs] = k(s) (kind w13, degree w14), the
//               d_p copy as mode 12. Each pass of the merge advances at
//               least one row: at most nnz(x_r) + nnz(x_p) passes, capped at
//               w15 (twice the longest row, within the loop budget).
// Modes 10 and 11 count invocations on a 2-D grid (id = x + y 256 groups_x).
// Where a mode has a predicate (pred_slot not NONE), it runs only where
// st[pred_slot] == pred_value. A key (key0, key1, index) is better than
// another when it is valid (index >= 0) and smaller in that order: the
// arg-max keys are (-v, 0, row), the candidates' (LAR step, -|c|, row), so
// ties go to the lowest row as in a sequential scan; `bad` marks NaN or an
// infinity (a non-finite entry, or a non-finite score), reported in st[0].

struct Job {
    mode: u32,
    rows: u32,
    a_off: u32,
    a_rs: u32,
    b_off: u32,
    b_rs: u32,
    o_off: u32,
    o_rs: u32,
    slot0: u32,
    slot1: u32,
    pred_slot: u32,
    pred_value: u32,
    w12: u32,
    w13: u32,
    w14: u32,
    w15: u32,
    s0: T,
    s1: T,
}

@group(0) @binding(0) var<storage, read> job: Job;
@group(0) @binding(1) var<storage, read_write> a: array<T>;
@group(0) @binding(2) var<storage, read_write> b: array<T>;
@group(0) @binding(3) var<storage, read_write> c: array<T>;
@group(0) @binding(4) var<storage, read_write> e: array<T>;
@group(0) @binding(5) var<storage, read_write> o: array<T>;
@group(0) @binding(6) var<storage, read_write> st: array<T>;
@group(0) @binding(7) var<storage, read_write> csr_row_ptr: array<u32>;
@group(0) @binding(8) var<storage, read_write> csr_col_idx: array<u32>;

const NONE: u32 = 0xffffffffu;
// The largest finite f64; a LAR step with no positive solution is this
// (above every finite step, as the host's infinity is).
const HUGE: f64 = 1.7976931348623157e308;

var<workgroup> wk0: array<T, 256>;
var<workgroup> wk1: array<T, 256>;
var<workgroup> wix: array<T, 256>;
var<workgroup> wbd: array<T, 256>;

fn finite(v: T) -> bool {
    return abs(v) <= T(HUGE);
}

// Whether key x is better than key y (see the header).
fn better(x0: T, x1: T, xi: T, y0: T, y1: T, yi: T) -> bool {
    if (xi < T(0.0)) {
        return false;
    }
    if (yi < T(0.0)) {
        return true;
    }
    if (x0 != y0) {
        return x0 < y0;
    }
    if (x1 != y1) {
        return x1 < y1;
    }
    return xi < yi;
}

// The best key of the workgroup's 256 slots into slot 0 (called in uniform
// control flow by every invocation).
fn reduce_tree(lid: u32) {
    for (var s = 128u; s > 0u; s = s >> 1u) {
        workgroupBarrier();
        if (lid < s) {
            let j = lid + s;
            if (better(wk0[j], wk1[j], wix[j], wk0[lid], wk1[lid], wix[lid])) {
                wk0[lid] = wk0[j];
                wk1[lid] = wk1[j];
                wix[lid] = wix[j];
            }
            wbd[lid] = max(wbd[lid], wbd[j]);
        }
    }
    workgroupBarrier();
}

fn put(lid: u32, k0: T, k1: T, ix: T, bad: T) {
    wk0[lid] = k0;
    wk1[lid] = k1;
    wix[lid] = ix;
    wbd[lid] = bad;
}

fn write_partial(lid: u32, w: u32) {
    if (lid == 0u) {
        let at = job.o_off + 4u * w;
        o[at] = wk0[0];
        o[at + 1u] = wk1[0];
        o[at + 2u] = wix[0];
        o[at + 3u] = wbd[0];
    }
}

fn predicate_holds() -> bool {
    return job.pred_slot == NONE || st[job.pred_slot] == T(job.pred_value);
}

// The LAR step (Eq. 11) in units of the direction: the smallest positive t
// with |c - t a| = (1 - t) C; 0 where |c| >= C; HUGE where none is positive.
fn step_length(act: T, cv: T, av: T) -> T {
    if (abs(cv) >= act) {
        return T(0.0);
    }
    var t = T(HUGE);
    let d1 = act - av;
    if (d1 > T(0.0)) {
        let v = (act - cv) / d1;
        if (v > T(0.0) && v < t) {
            t = v;
        }
    }
    let d2 = act + av;
    if (d2 > T(0.0)) {
        let v = (act + cv) / d2;
        if (v > T(0.0) && v < t) {
            t = v;
        }
    }
    return t;
}

fn argblock(r: u32, lid: u32, w: u32) {
    var k0 = T(0.0);
    var ix = T(-1.0);
    var bad = T(0.0);
    if (r < job.rows) {
        let v = a[job.a_off + r * job.a_rs];
        if (finite(v)) {
            k0 = -v;
            ix = T(r);
        } else {
            bad = T(1.0);
        }
    }
    put(lid, k0, T(0.0), ix, bad);
    reduce_tree(lid);
    write_partial(lid, w);
}

fn score(r: u32, lid: u32, w: u32) {
    var k0 = T(0.0);
    var k1 = T(0.0);
    var ix = T(-1.0);
    var bad = T(0.0);
    if (r < job.rows) {
        let nn = T(job.rows);
        let cc = job.a_rs;
        let delta = job.w12;
        let base = job.slot0;
        let tol = job.s0;
        let dr = b[job.b_off + r * job.b_rs];
        let cn = b[job.b_off + r * job.b_rs + 2u];
        let floor_ = T(1e-10) * max(st[base + 5u], T(0.0));
        if (st[base + 3u] > tol && dr > tol && cn > floor_) {
            var bv0 = T(0.0);
            var bv1 = T(0.0);
            for (var t = 0u; t < delta; t++) {
                let z = a[job.a_off + r * cc + t];
                let s = e[t * cc + delta];
                let v0 = c[2u * t] - s * c[2u * delta] / nn;
                let v1 = c[2u * t + 1u] - s * c[2u * delta + 1u] / nn;
                bv0 = bv0 + v0 * z;
                bv1 = bv1 + v1 * z;
            }
            let inv = job.s1 / sqrt(cn);
            let cv = bv0 * inv;
            let av = bv1 * inv;
            if (finite(cv) && finite(av)) {
                var step = T(0.0);
                if (job.w13 == 0u) {
                    step = step_length(st[15], cv, av);
                }
                k0 = step;
                k1 = -abs(cv);
                ix = T(r);
            } else {
                bad = T(1.0);
            }
        }
    }
    put(lid, k0, k1, ix, bad);
    reduce_tree(lid);
    write_partial(lid, w);
}

fn combine(lid: u32) {
    var k0 = T(0.0);
    var k1 = T(0.0);
    var ix = T(-1.0);
    var bad = T(0.0);
    for (var j = lid; j < job.rows; j += 256u) {
        let at = job.a_off + 4u * j;
        if (better(a[at], a[at + 1u], a[at + 2u], k0, k1, ix)) {
            k0 = a[at];
            k1 = a[at + 1u];
            ix = a[at + 2u];
        }
        bad = max(bad, a[at + 3u]);
    }
    put(lid, k0, k1, ix, bad);
    reduce_tree(lid);
    if (lid == 0u) {
        if (job.w12 == 0u) {
            st[job.slot0] = wix[0];
            st[job.slot0 + 1u] = -wk0[0];
            if (job.slot1 != NONE) {
                st[job.slot1] = wix[0];
                st[job.slot1 + 1u] = -wk0[0];
            }
        } else {
            st[job.slot0] = wk0[0];
            st[job.slot0 + 1u] = wk1[0];
            st[job.slot0 + 2u] = wix[0];
        }
        if (wbd[0] > T(0.0)) {
            st[0] = T(1.0);
        }
    }
}

fn dots(id: u32) {
    let entries = job.w12 * job.w13;
    let chunks = (job.rows + job.w14 - 1u) / job.w14;
    if (id >= entries * chunks) {
        return;
    }
    let e = id % entries;
    let i = e / job.w13;
    let j = e % job.w13;
    let r0 = (id / entries) * job.w14;
    let r1 = min(r0 + job.w14, job.rows);
    var s = T(0.0);
    for (var r = r0; r < r1; r++) {
        s = s + a[job.a_off + r * job.a_rs + i] * b[job.b_off + r * job.b_rs + j];
    }
    o[job.o_off + id] = s;
}

fn dotsum(id: u32) {
    let entries = job.w12 * job.w13;
    if (id >= entries) {
        return;
    }
    var s = T(0.0);
    for (var c = 0u; c < job.w14; c++) {
        s = s + a[job.a_off + c * entries + id];
    }
    o[job.o_off + (id / job.w13) * job.o_rs + id % job.w13] = s;
}

@compute @workgroup_size(256, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x;
    if (job.mode == 10u) {
        dots(gid.x + gid.y * nwg.x * 256u);
        return;
    }
    if (job.mode == 11u) {
        dotsum(gid.x + gid.y * nwg.x * 256u);
        return;
    }
    if (job.mode == 1u) {
        argblock(r, lid, wg.x);
        return;
    }
    if (job.mode == 2u) {
        score(r, lid, wg.x);
        return;
    }
    if (job.mode == 3u) {
        combine(lid);
        return;
    }
    if (r >= job.rows || !predicate_holds()) {
        return;
    }
    switch job.mode {
        case 0u: {
            var v = job.s0;
            if (job.w12 == 0u) {
                v = a[job.a_off + r * job.a_rs];
            }
            o[job.o_off + r * job.o_rs] = v;
        }
        case 5u: {
            let p = u32(max(st[job.slot0], T(0.0)));
            let dp = st[job.slot1];
            let g_at = job.o_off + r * job.o_rs;
            if (!(dp > job.s0)) {
                o[g_at] = T(0.0);
                return;
            }
            let beta = sqrt(dp);
            let scale = T(1.0) / beta;
            let d_at = job.w12 + r * job.w13;
            let dr = c[d_at];
            var gv = T(0.0);
            if (r == p) {
                gv = beta;
                c[d_at] = T(-1.0);
            } else if (dr >= T(0.0)) {
                gv = (a[job.a_off + r] - b[job.b_off + r]) * scale;
                c[d_at] = max(dr - gv * gv, T(0.0));
            }
            o[g_at] = gv;
        }
        case 6u: {
            let cc = job.a_rs;
            let delta = job.w12;
            let nn = T(job.rows);
            let row = job.a_off + r * cc;
            var q = T(0.0);
            for (var t = 0u; t < delta; t++) {
                let zt = a[row + t];
                var acc = T(0.0);
                for (var s = 0u; s < delta; s++) {
                    let m = e[t * cc + s] - e[t * cc + delta] * e[s * cc + delta] / nn;
                    acc = acc + m * a[row + s];
                }
                q = q + zt * acc;
            }
            o[job.o_off + r * job.o_rs] = q;
        }
        case 7u: {
            if (r != 0u) {
                return;
            }
            var k0 = T(0.0);
            var k1 = T(0.0);
            var ix = T(-1.0);
            var best = -1;
            for (var q = 0u; q < job.rows; q++) {
                let at = job.slot0 + q * job.slot1 + 6u;
                if (better(st[at], st[at + 1u], st[at + 2u], k0, k1, ix)) {
                    k0 = st[at];
                    k1 = st[at + 1u];
                    ix = st[at + 2u];
                    best = i32(q);
                }
            }
            st[2] = T(best);
            st[3] = ix;
            if (best < 0) {
                st[1] = T(1.0);
            }
        }
        case 8u: {
            let n = job.w13;
            if (job.w12 == 0u) {
                var v = T(0.0);
                if (r < n) {
                    v = a[r] - st[job.slot0] / T(n);
                }
                o[r] = v;
            } else if (job.w12 == 1u) {
                let norm = sqrt(st[job.slot0]);
                var v = T(0.0);
                if (r < n) {
                    v = o[r] / norm * job.s0;
                } else if (r == n + job.slot1) {
                    v = job.s1;
                }
                o[r] = v;
                if (r == 0u && !(norm > T(0.0) && finite(norm))) {
                    st[1] = T(2.0);
                }
            } else if (job.w12 == 2u) {
                let t = st[job.slot0];
                let u = a[2u * r + 1u];
                o[r] = o[r] + t * u;
                a[2u * r] = a[2u * r] - t * u;
            } else {
                let v = a[r] * st[job.slot0];
                a[r] = v;
                o[job.o_off + r * job.o_rs] = v;
            }
        }
        case 12u: {
            let p = u32(max(st[job.slot0], T(0.0)));
            let xr = job.a_off + r * job.a_rs;
            let xp = job.a_off + p * job.a_rs;
            var s = T(0.0);
            if (job.w13 == KIND_RBF || job.w13 == KIND_LAPLACIAN) {
                for (var k = 0u; k < job.w12; k++) {
                    let t = a[xr + k] - a[xp + k];
                    s = s + t * t;
                }
            } else {
                for (var k = 0u; k < job.w12; k++) {
                    s = s + a[xr + k] * a[xp + k];
                }
            }
            o[job.o_off + r * job.o_rs] = kernel_value(job.w13, job.s0, job.s1, job.w14, s);
            if (r == 0u && job.slot1 != NONE) {
                st[job.slot1] = b[job.b_off + p * job.b_rs];
            }
        }
        case 14u: {
            let p = min(u32(max(st[job.slot0], T(0.0))), job.rows - 1u);
            let r1 = csr_row_ptr[r + 1u];
            let p1 = csr_row_ptr[p + 1u];
            var i = csr_row_ptr[r];
            var j = csr_row_ptr[p];
            let passes = min((r1 - i) + (p1 - j), job.w15);
            var dot = T(0.0);
            var merged = T(0.0);
            for (var t = 0u; t < passes; t++) {
                var cr = NONE;
                if (i < r1) {
                    cr = csr_col_idx[i];
                }
                var cp = NONE;
                if (j < p1) {
                    cp = csr_col_idx[j];
                }
                if (cr == NONE && cp == NONE) {
                    break;
                }
                var diff = T(0.0);
                if (cr < cp) {
                    diff = a[i];
                    i = i + 1u;
                } else if (cp < cr) {
                    diff = -a[j];
                    j = j + 1u;
                } else {
                    let u = a[i];
                    let v = a[j];
                    dot = dot + u * v;
                    diff = u - v;
                    i = i + 1u;
                    j = j + 1u;
                }
                merged = merged + diff * diff;
            }
            var s = dot;
            if (job.w13 == KIND_RBF || job.w13 == KIND_LAPLACIAN) {
                let both = c[r] + c[p];
                s = max(both - T(2.0) * dot, T(0.0));
                if (s <= T(1e-4) * both) {
                    s = merged;
                }
            }
            o[job.o_off + r * job.o_rs] = kernel_value(job.w13, job.s0, job.s1, job.w14, s);
            if (r == 0u && job.slot1 != NONE) {
                st[job.slot1] = b[job.b_off + p * job.b_rs];
            }
        }
        case 13u: {
            var p = 0u;
            if (job.slot0 != NONE) {
                p = u32(max(st[job.slot0], T(0.0)));
            }
            let ar = job.a_off + r * job.a_rs;
            let bp = job.b_off + p * job.b_rs;
            var s = T(0.0);
            for (var j = 0u; j < job.w12; j++) {
                s = s + a[ar + j] * b[bp + j];
            }
            for (var j = job.w13; j < job.w13 + job.w14; j++) {
                s = s + a[ar + j] * b[bp + j];
            }
            o[job.o_off + r * job.o_rs] = s;
        }
        case 9u: {
            if (r != 0u) {
                return;
            }
            if (job.w12 == 0u) {
                var t = T(0.0);
                if (job.w13 == 0u) {
                    t = min(step_length(st[15], st[9], st[10]), T(1.0));
                }
                st[4] = t;
            } else {
                var s = T(1.0);
                if (st[13] < T(0.0)) {
                    s = T(-1.0);
                }
                st[7] = s;
            }
        }
        default: {}
    }
}
