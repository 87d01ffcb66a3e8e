// Shared by the product shaders (compiled after a precision prelude that
// defines T, texp, ttanh, tsqrt, and after `kernel_function.wgsl`): the
// problem descriptor (std430; element offsets and strides of A, B and C,
// flags, the kernel, the weights' offset), the bindings, the operand loads
// and the output epilogue shared by every tiling, the expanded distance
// form with its fallback, and the kernel function applied to the statistic.

struct Problem {
    rows: u32,
    cols: u32,
    depth: u32,
    a_off: u32,
    b_off: u32,
    c_off: u32,
    flags: u32,
    kind: u32,
    a_rs: u32,
    a_cs: u32,
    b_rs: u32,
    b_cs: u32,
    c_rs: u32,
    c_cs: u32,
    w_off: u32,
    degree: u32,
    // The pair matvec's W offset (in the `w` binding); 0 elsewhere.
    u_off: u32,
    gamma: T,
    coef0: T,
}

const FLAG_ACCUMULATE: u32 = 1u;
const FLAG_APPLY: u32 = 2u;
const FLAG_WEIGHTED: u32 = 4u;
// Only the tiles on and below the diagonal, each stored at (i, j) and (j, i)
// (`product.wgsl`; the SIMT product variants only).
const FLAG_LOWER: u32 = 16u;

// The kernel function (`kernel_function.wgsl`, compiled before this file)
// with the problem's kind and parameters.
fn kernel_of_statistic(p: Problem, s: T) -> T {
    return kernel_value(p.kind, p.gamma, p.coef0, p.degree, s);
}

@group(0) @binding(0) var<storage, read> problems: array<Problem>;
// A and B: arrays of T, or of vec4<T> for the variants with vec4 global
// loads (`vec4_loads.wgsl`), whose element idx is component idx % 4 of
// vec4 idx / 4.
@group(0) @binding(1) var<storage, read> a: array<@@OPERAND@@>;
@group(0) @binding(2) var<storage, read> b: array<@@OPERAND@@>;
@group(0) @binding(3) var<storage, read_write> c: array<T>;
@group(0) @binding(4) var<storage, read> w: array<T>;

// Element (i, k) of A, times w_k for WEIGHTED problems; 0 outside the
// problem (zero padding adds nothing to either statistic).
fn load_a(p: Problem, i: u32, k: u32) -> T {
    if (i >= p.rows || k >= p.depth) {
        return T(0.0);
    }
    let idx = p.a_off + i * p.a_rs + k * p.a_cs;
    var v = a@@AT@@;
    if ((p.flags & FLAG_WEIGHTED) != 0u) {
        v = v * w[p.w_off + k];
    }
    return v;
}

// Element (j, k) of B; 0 outside the problem.
fn load_b(p: Problem, j: u32, k: u32) -> T {
    if (j >= p.cols || k >= p.depth) {
        return T(0.0);
    }
    let idx = p.b_off + j * p.b_rs + k * p.b_cs;
    return b@@AT@@;
}

// C(i, j) = f(s (+ C(i, j) with ACCUMULATE)), f applied with APPLY.
fn store_c(p: Problem, i: u32, j: u32, statistic: T) {
    let idx = p.c_off + i * p.c_rs + j * p.c_cs;
    var s = statistic;
    if ((p.flags & FLAG_ACCUMULATE) != 0u) {
        s = s + c[idx];
    }
    if ((p.flags & FLAG_APPLY) != 0u) {
        s = kernel_of_statistic(p, s);
    }
    c[idx] = s;
}

// Below this fraction of |a|^2 + |b|^2 the expanded distance is recomputed
// directly.
const NEAR: f32 = 0.125;

// ||a_i - b_j||^2 over the problem's depth, from global memory.
fn direct_distance(p: Problem, i: u32, j: u32) -> T {
    var s = T(0.0);
    for (var k = 0u; k < p.depth; k++) {
        let d = load_a(p, i, k) - load_b(p, j, k);
        s = fma(d, d, s);
    }
    return s;
}

// The squared distance of (a_i, b_j) in the expanded form
// s = |a|^2 + |b|^2 - 2 <a, b> from the inner product `dot` and the squared
// norms na, nb. Where the expansion cancels (s <= NEAR (|a|^2 + |b|^2):
// near-duplicate points, data far from the origin) the pair is recomputed
// directly, so the expanded form has the direct form's accuracy: it keeps the
// Laplacian's sqrt(s) accurate near 0 and the RBF's exp(-gamma s) exact on
// the diagonal.
fn expanded_distance(p: Problem, i: u32, j: u32, dot: T, na: T, nb: T) -> T {
    let scale = na + nb;
    let s = max(scale - T(2.0) * dot, T(0.0));
    if (s <= T(NEAR) * scale) {
        return direct_distance(p, i, j);
    }
    return s;
}
