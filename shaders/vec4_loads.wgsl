// Loads of four depth elements at once, for the variants with vec4 global
// loads (A and B bound as arrays of vec4<T>; compiled after `problem.wgsl`).
// Only for problems with FLAG_VEC4, which the host sets where every row is
// contiguous and 4-aligned (unit column strides; offsets, row strides and
// depth multiples of 4): then for k a multiple of 4, elements (i, k .. k + 3)
// are one vec4 of the binding, all inside the problem or all beyond its depth.

const FLAG_VEC4: u32 = 8u;

// Elements (i, k .. k + 3) of A, times w_k .. w_k+3 for WEIGHTED problems;
// 0 outside the problem.
fn load_a4(p: Problem, i: u32, k: u32) -> vec4<T> {
    if (i >= p.rows || k >= p.depth) {
        return vec4<T>(T(0.0));
    }
    var v = a[(p.a_off + i * p.a_rs + k) / 4u];
    if ((p.flags & FLAG_WEIGHTED) != 0u) {
        let o = p.w_off + k;
        v = v * vec4<T>(w[o], w[o + 1u], w[o + 2u], w[o + 3u]);
    }
    return v;
}

// Elements (j, k .. k + 3) of B; 0 outside the problem.
fn load_b4(p: Problem, j: u32, k: u32) -> vec4<T> {
    if (j >= p.cols || k >= p.depth) {
        return vec4<T>(T(0.0));
    }
    return b[(p.b_off + j * p.b_rs + k) / 4u];
}
