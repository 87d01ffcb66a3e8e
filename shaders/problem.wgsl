// Shared by the product shaders (compiled after a precision prelude that
// defines T, texp, ttanh, tsqrt): the problem descriptor (std430; element
// offsets and strides of A, B and C, flags, the kernel, the weights'
// offset), and the kernel function applied to the statistic.

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
    gamma: T,
    coef0: T,
}

const KIND_LINEAR: u32 = 0u;
const KIND_RBF: u32 = 1u;
const KIND_LAPLACIAN: u32 = 2u;
const KIND_POLYNOMIAL: u32 = 3u;
const KIND_SIGMOID: u32 = 4u;

const FLAG_ACCUMULATE: u32 = 1u;
const FLAG_APPLY: u32 = 2u;
const FLAG_WEIGHTED: u32 = 4u;

fn kernel_of_statistic(p: Problem, s: T) -> T {
    switch p.kind {
        case KIND_RBF: {
            return texp(-p.gamma * s);
        }
        case KIND_LAPLACIAN: {
            return texp(-p.gamma * tsqrt(max(s, T(0.0))));
        }
        case KIND_POLYNOMIAL: {
            let base = p.gamma * s + p.coef0;
            var r = T(1.0);
            for (var e = 0u; e < p.degree; e++) {
                r = r * base;
            }
            return r;
        }
        case KIND_SIGMOID: {
            return ttanh(p.gamma * s + p.coef0);
        }
        default: {
            return s;
        }
    }
}
