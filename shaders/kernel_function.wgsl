// The kernel function applied to its statistic s (compiled after a
// precision prelude that defines T, texp, ttanh, tsqrt): s is the squared
// distance ||x - z||^2 for the distance kernels (RBF, Laplacian) and the
// inner product x^T z for the others. Shared by the product shaders
// (through `problem.wgsl`) and mklaren's kernel column (`mklaren_step.wgsl`).

const KIND_LINEAR: u32 = 0u;
const KIND_RBF: u32 = 1u;
const KIND_LAPLACIAN: u32 = 2u;
const KIND_POLYNOMIAL: u32 = 3u;
const KIND_SIGMOID: u32 = 4u;

fn kernel_value(kind: u32, gamma: T, coef0: T, degree: u32, s: T) -> T {
    switch kind {
        case KIND_RBF: {
            return texp(-gamma * s);
        }
        case KIND_LAPLACIAN: {
            return texp(-gamma * tsqrt(max(s, T(0.0))));
        }
        case KIND_POLYNOMIAL: {
            // base^degree by squaring: at most 32 passes of the loop,
            // whatever the degree (see LOOP_BUDGET in src/gpu/mod.rs).
            var base = gamma * s + coef0;
            var r = T(1.0);
            for (var e = degree; e != 0u; e = e >> 1u) {
                if ((e & 1u) != 0u) {
                    r = r * base;
                }
                base = base * base;
            }
            return r;
        }
        case KIND_SIGMOID: {
            return ttanh(gamma * s + coef0);
        }
        default: {
            return s;
        }
    }
}
