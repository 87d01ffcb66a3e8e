// Precision prelude for the generic shaders: T = f64 (adapter feature
// SHADER_F64). Vulkan's GLSL.std.450 has no 64-bit exp, so `texp` is ours:
// x = k ln 2 + r_hi - t with ln 2 split in a high part (k LN2_HI and
// x - k LN2_HI exact, Cody-Waite) and a low part t = k LN2_LO; exp(r_hi)
// by its Taylor series to r^13 (|r_hi| <= ln 2 / 2 + 3e-7, truncation below
// 4e-18 relative), times exp(-t) = 1 - t + t^2 / 2 (|t| < 2.1e-7), scaled
// by 2^k with ldexp. Arguments below -745 give 0, the f64 underflow;
// arguments are clamped at 709 (kernels only take exp of <= 0 values,
// tanh of |y| < 354).

alias T = f64;

fn texp(x: f64) -> f64 {
    if (x < -745.0lf) {
        return 0.0lf;
    }
    let xc = min(x, 709.0lf);
    let k = floor(xc * 1.4426950408889634lf + 0.5lf);
    // The low part of ln 2 enters as the factor exp(-t), not as a second
    // subtraction (x - k LN2_HI) - k LN2_LO: a shader compiler that
    // reassociates that into x - k (LN2_HI + LN2_LO) would fold ln 2 back
    // into one rounded constant, an error of up to 6e-14 relative near
    // |x| = 745. Some Vulkan drivers are known to simplify compensated sums
    // away; an H200 failed the whole-range test (1e-14) for a cause not yet
    // seen, and this is the first suspect.
    let r = xc - k * 0.6931471803691238lf;
    let t = k * 1.9082149292705877e-10lf;
    var p = 1.0lf / 6227020800.0lf;
    p = p * r + 1.0lf / 479001600.0lf;
    p = p * r + 1.0lf / 39916800.0lf;
    p = p * r + 1.0lf / 3628800.0lf;
    p = p * r + 1.0lf / 362880.0lf;
    p = p * r + 1.0lf / 40320.0lf;
    p = p * r + 1.0lf / 5040.0lf;
    p = p * r + 1.0lf / 720.0lf;
    p = p * r + 1.0lf / 120.0lf;
    p = p * r + 1.0lf / 24.0lf;
    p = p * r + 1.0lf / 6.0lf;
    p = p * r + 0.5lf;
    p = p * r + 1.0lf;
    p = p * r + 1.0lf;
    p = p * (1.0lf - t * (1.0lf - 0.5lf * t));
    // Two steps keep 2^k representable when k is below the normal range.
    let k1 = i32(k) / 2;
    return ldexp(ldexp(p, k1), i32(k) - k1);
}

// tanh(y) = sign(y) (1 - e) / (1 + e), e = exp(-2 |y|); 1 - e by its series
// for small |y| so that tiny arguments keep their relative accuracy.
fn ttanh(y: f64) -> f64 {
    let a = abs(y);
    var t: f64;
    if (a < 0.01lf) {
        let a2 = a * a;
        t = a * (1.0lf - a2 * (1.0lf / 3.0lf - a2 * (2.0lf / 15.0lf - a2 * (17.0lf / 315.0lf))));
    } else {
        let e = texp(-2.0lf * a);
        t = (1.0lf - e) / (1.0lf + e);
    }
    return select(t, -t, y < 0.0lf);
}

fn tsqrt(x: f64) -> f64 {
    return sqrt(x);
}

// cos(x) in f64: x = k pi/2 + r_hi - d with pi/2 in three parts (k PIO2_HI
// and x - k PIO2_HI exact for |k| < 2^20, i.e. |x| < 1.6e6; larger
// arguments lose digits) and d = k (PIO2_MID + PIO2_LO), |d| < 1e-4; the
// Taylor series of sin and cos on r_hi to r^17 / r^18 (|r_hi| <= pi/4 +
// 1e-4, truncation below 1e-17), then cos(r_hi - d) and sin(r_hi - d) by
// the angle difference with cos d = 1 - d^2/2, sin d = d - d^3/6 (the next
// terms below 5e-18). As in `texp`, the low parts never meet the high part
// in a chain of subtractions that a reassociating compiler could fold.
fn tcos(x: f64) -> f64 {
    let k = floor(x * 0.6366197723675814lf + 0.5lf);
    let r = x - k * 1.5707963267341256lf;
    let d = k * 6.077100506303966e-11lf + k * 2.0222662487111665e-21lf;
    let r2 = r * r;
    var c = -1.0lf / 6402373705728000.0lf;
    c = 1.0lf / 20922789888000.0lf + r2 * c;
    c = -1.0lf / 87178291200.0lf + r2 * c;
    c = 1.0lf / 479001600.0lf + r2 * c;
    c = -1.0lf / 3628800.0lf + r2 * c;
    c = 1.0lf / 40320.0lf + r2 * c;
    c = -1.0lf / 720.0lf + r2 * c;
    c = 1.0lf / 24.0lf + r2 * c;
    c = -0.5lf + r2 * c;
    c = 1.0lf + r2 * c;
    var s = 1.0lf / 355687428096000.0lf;
    s = -1.0lf / 1307674368000.0lf + r2 * s;
    s = 1.0lf / 6227020800.0lf + r2 * s;
    s = -1.0lf / 39916800.0lf + r2 * s;
    s = 1.0lf / 362880.0lf + r2 * s;
    s = -1.0lf / 5040.0lf + r2 * s;
    s = 1.0lf / 120.0lf + r2 * s;
    s = -1.0lf / 6.0lf + r2 * s;
    s = r + r * r2 * s;
    // cos and sin of r - d.
    let d2 = d * d;
    let cos_d = 1.0lf - 0.5lf * d2;
    let sin_d = d - d * d2 * (1.0lf / 6.0lf);
    let cr = c * cos_d + s * sin_d;
    let sr = s * cos_d - c * sin_d;
    // cos(k pi/2 + r - d) by the quadrant k mod 4.
    let q = i32(k - 4.0lf * floor(k * 0.25lf));
    switch q {
        case 0: { return cr; }
        case 1: { return -sr; }
        case 2: { return -cr; }
        default: { return sr; }
    }
}

// ln(x) in f64 for x > 0 (Vulkan has no 64-bit log either): x is brought
// into [1e-30, 1e30] by factors 2^-100 / 2^100 (exact; at most 11 of each
// for finite x), the f32 log of that (absolute error below 1e-6) is refined
// by one Halley step y + 2 (x - e^y) / (x + e^y) with `texp` (error cubed,
// below 1e-17 beyond texp's own), and k 100 ln 2 is added back (rounding
// of that below 2e-14 at the ends of the f64 range).
fn tlog(x: f64) -> f64 {
    var v = x;
    var k = 0.0lf;
    for (var i = 0; i < 12 && v > 1e30lf; i++) {
        v = v * 7.888609052210118e-31lf;
        k = k + 1.0lf;
    }
    for (var i = 0; i < 12 && v < 1e-30lf; i++) {
        v = v * 1.2676506002282294e30lf;
        k = k - 1.0lf;
    }
    let y0 = f64(log(f32(v)));
    let e = texp(y0);
    let y = y0 + 2.0lf * (v - e) / (v + e);
    return y + k * 69.31471805599453lf;
}
