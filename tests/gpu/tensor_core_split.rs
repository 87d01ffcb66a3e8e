//! The arithmetic of the cooperative-matrix (tensor-core) variants (their
//! products, and the sums of the fused kernel matvec), emulated on the host
//! and checked against f64: software Vulkan has no cooperative matrices, so
//! this is where CI sees the scheme work.
//!
//! The scheme (`shaders/coop_tile.wgsl`): row `i` of A is scaled by the
//! power of two `s_i` that brings its largest magnitude into [1/2, 1) (row
//! `j` of B by `t_j`), each scaled f32 value `x` is split into
//! `hi = f16(x)` and `lo = f16(S (x - hi))` with `S = 2^11`, and per
//! 16-deep slice the f32 accumulator takes `hi_a lo_b`, `lo_a hi_b` and
//! `hi_a (S hi_b)` (f16 x f16 products are exact in f32; each slice's sum is
//! rounded once, to nearest or, as some tensor cores do, toward zero). The
//! result is the accumulator over `S s_i t_j`. A device may flush f16
//! subnormals to zero; the emulation does both. The fast opt-in form keeps
//! `hi_a hi_b` alone.
//!
//! Error bound of the split form, with `M_a`, `M_b` the rows' largest
//! magnitudes, `u = 2^-24` and `P = sum_k |a_k b_k|` (`split_bound`):
//!
//! ```text
//! |C - <a, b>| <= 3 2^-22 P                          dropped lo lo, rounding of lo
//!              +  u sum_k (|a_k| M_b + |b_k| M_a)     f16's subnormals (flushed or not), scaled back
//!              +  (3 ceil(d / 16) + 1) 2 u P          one rounding per slice and product
//! ```
//!
//! against `d u P` for a sequential f32 dot product. The tests check the
//! bound on adversarial rows (wide exponent ranges, 10^±30, one dominant
//! entry, near-duplicates far from the origin, depths to 4096) and that the
//! split form stays within 4x of sequential f32's bound where entries share
//! a scale.

use half::f16;
use rand::{rngs::StdRng, Rng, SeedableRng};

/// How the emulated tensor core rounds each slice's sum into the f32 accumulator.
#[derive(Debug, Clone, Copy)]
enum Rounding {
    Nearest,
    TowardZero,
}

fn round_f32(v: f64, mode: Rounding) -> f32 {
    let r = v as f32;
    match mode {
        Rounding::Nearest => r,
        Rounding::TowardZero => {
            if (r as f64).abs() > v.abs() {
                // One step toward zero.
                f32::from_bits(r.to_bits() - 1)
            } else {
                r
            }
        }
    }
}

/// The power of two that brings the row's largest magnitude into [1/2, 1)
/// (1 for a zero row), as `frexp` gives it on the device.
fn row_scale(row: &[f32]) -> f32 {
    let m = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    if m == 0.0 || !m.is_finite() {
        return 1.0;
    }
    let e = m.log2().floor() as i32 + 1;
    let s = 2.0f64.powi(-e) as f32;
    // frexp's exponent: m s in [1/2, 1).
    debug_assert!((0.5..1.0).contains(&(m * s)), "{m} {s}");
    s
}

/// `S`, the scale of the lo parts.
const S: f32 = 2048.0;

/// Rounds to f16 as the device does: to nearest, and with `flush` a
/// subnormal result becomes zero.
fn to_f16(x: f32, flush: bool) -> f16 {
    let h = f16::from_f32(x);
    if flush && h.classify() == std::num::FpCategory::Subnormal {
        f16::ZERO
    } else {
        h
    }
}

/// A device's rounding choices.
#[derive(Debug, Clone, Copy)]
struct Device {
    rounding: Rounding,
    flush_subnormals: bool,
}

const DEVICES: [Device; 4] = [
    Device { rounding: Rounding::Nearest, flush_subnormals: false },
    Device { rounding: Rounding::TowardZero, flush_subnormals: false },
    Device { rounding: Rounding::Nearest, flush_subnormals: true },
    Device { rounding: Rounding::TowardZero, flush_subnormals: true },
];

/// The device's inner product of `a` and `b` (f32 rows) by the split
/// (`three = true`) or the single f16 form.
fn emulated(a: &[f32], b: &[f32], three: bool, device: Device) -> f64 {
    let (sa, sb) = (row_scale(a), row_scale(b));
    let flush = device.flush_subnormals;
    // (hi, S lo) of A; (hi, S hi, S lo) of B.
    let pa: Vec<(f16, f16)> = a.iter().map(|&x| {
        let x = x * sa;
        let hi = to_f16(x, flush);
        (hi, to_f16(S * (x - hi.to_f32()), flush))
    }).collect();
    let pb: Vec<(f16, f16, f16)> = b.iter().map(|&x| {
        let x = x * sb;
        let hi = to_f16(x, flush);
        (hi, to_f16(S * hi.to_f32(), flush), to_f16(S * (x - hi.to_f32()), flush))
    }).collect();
    let mut acc = 0.0f32;
    for (ca, cb) in pa.chunks(16).zip(pb.chunks(16)) {
        let sum = |f: &dyn Fn(&(f16, f16), &(f16, f16, f16)) -> f64| ca.iter().zip(cb).map(|(x, y)| f(x, y)).sum::<f64>();
        if three {
            acc = round_f32(acc as f64 + sum(&|x, y| x.0.to_f64() * y.2.to_f64()), device.rounding);
            acc = round_f32(acc as f64 + sum(&|x, y| x.1.to_f64() * y.0.to_f64()), device.rounding);
            acc = round_f32(acc as f64 + sum(&|x, y| x.0.to_f64() * y.1.to_f64()), device.rounding);
        } else {
            acc = round_f32(acc as f64 + sum(&|x, y| x.0.to_f64() * y.0.to_f64()), device.rounding);
        }
    }
    let unscale = if three { S as f64 } else { 1.0 };
    acc as f64 / unscale / (sa as f64 * sb as f64)
}

/// The bound of the module header for the split form.
fn split_bound(a: &[f32], b: &[f32]) -> f64 {
    let d = a.len() as f64;
    let ma = a.iter().fold(0.0f64, |m, &v| m.max(v.abs() as f64));
    let mb = b.iter().fold(0.0f64, |m, &v| m.max(v.abs() as f64));
    let abs_products: f64 = a.iter().zip(b).map(|(&x, &y)| (x as f64 * y as f64).abs()).sum();
    let spacing: f64 = a.iter().zip(b).map(|(&x, &y)| x.abs() as f64 * mb + y.abs() as f64 * ma).sum();
    let u = 2f64.powi(-24);
    3.0 * 2f64.powi(-22) * abs_products + u * spacing + (3.0 * (d / 16.0).ceil() + 1.0) * 2.0 * u * abs_products * 1.01
}

fn exact(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum()
}

fn sequential_f32(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).fold(0.0f32, |s, (&x, &y)| x.mul_add(y, s)) as f64
}

/// Adversarial row pairs of depth `d`.
fn cases(rng: &mut StdRng, d: usize) -> Vec<(&'static str, Vec<f32>, Vec<f32>)> {
    let uniform = |rng: &mut StdRng| -> Vec<f32> { (0..d).map(|_| rng.random_range(-1.0f32..1.0)).collect() };
    let wide = |rng: &mut StdRng| -> Vec<f32> { (0..d).map(|_| rng.random_range(-1.0f32..1.0).signum() * 2f32.powf(rng.random_range(-20.0f32..20.0))).collect() };
    let scaled = |rng: &mut StdRng, s: f32| -> Vec<f32> { (0..d).map(|_| rng.random_range(-1.0f32..1.0) * s).collect() };
    let far = |rng: &mut StdRng| -> Vec<f32> { (0..d).map(|_| 1000.0 + rng.random_range(-1e-3f32..1e-3)).collect() };
    let dominant = |rng: &mut StdRng| -> Vec<f32> {
        let mut v: Vec<f32> = (0..d).map(|_| rng.random_range(-1e-6f32..1e-6)).collect();
        v[d / 2] = 3.0e4;
        v
    };
    vec![
        ("uniform", uniform(rng), uniform(rng)),
        ("wide exponents", wide(rng), wide(rng)),
        ("1e30 by 1e-30", scaled(rng, 1e30), scaled(rng, 1e-30)),
        ("1e5 (beyond f16's range)", scaled(rng, 1e5), scaled(rng, 1e5)),
        ("far from the origin", far(rng), far(rng)),
        ("one dominant entry", dominant(rng), uniform(rng)),
        ("zero row", vec![0.0; d], uniform(rng)),
    ]
}

#[test]
fn the_split_form_meets_its_bound_on_adversarial_rows() {
    let mut rng = StdRng::seed_from_u64(47);
    for d in [1, 5, 16, 33, 256, 4096] {
        for (name, a, b) in cases(&mut rng, d) {
            for device in DEVICES {
                let got = emulated(&a, &b, true, device);
                let want = exact(&a, &b);
                assert!(got.is_finite(), "{name}, d = {d}, {device:?}: {got}");
                let err = (got - want).abs();
                let bound = split_bound(&a, &b);
                assert!(err <= bound, "{name}, d = {d}, {device:?}: error {err:e} above the bound {bound:e}");
            }
        }
    }
}

#[test]
fn the_split_form_is_as_accurate_as_f32_where_entries_share_a_scale() {
    let mut rng = StdRng::seed_from_u64(48);
    let mut worst = 0.0f64;
    for d in [16, 64, 256, 1024, 4096] {
        for _ in 0..20 {
            let a: Vec<f32> = (0..d).map(|_| rng.random_range(-1.0f32..1.0)).collect();
            let b: Vec<f32> = (0..d).map(|_| rng.random_range(-1.0f32..1.0)).collect();
            let want = exact(&a, &b);
            let abs_products: f64 = a.iter().zip(&b).map(|(&x, &y)| (x as f64 * y as f64).abs()).sum();
            // Sequential f32's bound, d u sum |a_k b_k|.
            let f32_bound = d as f64 * 2f64.powi(-24) * abs_products;
            let split_err = DEVICES.iter().map(|&device| (emulated(&a, &b, true, device) - want).abs()).fold(0.0, f64::max);
            assert!(split_err <= 4.0 * f32_bound, "d = {d}: split error {split_err:e} against f32's bound {f32_bound:e}");
            // The same inputs through sequential f32 stay inside that bound,
            // and the split form is within an order of magnitude of it.
            let f32_err = (sequential_f32(&a, &b) - want).abs();
            assert!(f32_err <= f32_bound);
            worst = worst.max(split_err / abs_products);
        }
    }
    // Relative to sum |a_k b_k|, a few f32 units at most.
    assert!(worst < 2e-6, "worst relative error {worst:e}");
}

#[test]
fn one_f16_product_is_only_tf32_accurate_and_the_split_recovers_f32() {
    // The opt-in fast form: about 2^-11 relative per entry, far above f32;
    // the split form on the same data about 2^-22 or better.
    let mut rng = StdRng::seed_from_u64(49);
    let d = 256;
    let (mut fast, mut split_worst) = (0.0f64, 0.0f64);
    for _ in 0..50 {
        let a: Vec<f32> = (0..d).map(|_| rng.random_range(0.0f32..1.0)).collect();
        let b: Vec<f32> = (0..d).map(|_| rng.random_range(0.0f32..1.0)).collect();
        let want = exact(&a, &b);
        fast = fast.max((emulated(&a, &b, false, DEVICES[0]) - want).abs() / want);
        split_worst = split_worst.max((emulated(&a, &b, true, DEVICES[0]) - want).abs() / want);
    }
    assert!(fast > 1e-5 && fast < 2e-3, "single f16 product: {fast:e}");
    assert!(split_worst < 1e-6, "split: {split_worst:e}");
    assert!(fast > 50.0 * split_worst);
}

// The fused kernel matvec on cooperative matrices
// (`shaders/kernel_matvec_coop.wgsl`) takes each inner product exactly as
// the product above does (the same tiles and slices), and then orders its
// own sums: squared norms per row (lanes of a subgroup striding the depth,
// then a tree), the expanded distance with its direct fallback, the RBF
// kernel, and per row and column half h of each split s an f32 sum of
// k_ij v_j over columns s 64 + h, s 64 + h + 2, ..., s 64 + 62 + h, then
// (s + S) 64 + h, ... (S splits); the 2 S slots are summed by the row
// reduction. `emulated_matvec` follows that order; its error against f64
// is bounded (`matvec_bound`, per output entry) by
//
//     sum_j |v_j| (gamma (ds_j + u s_j) + 4 u) k_j  +  (L + 2) u sum_j |k_j v_j|
//
// with ds_j = 2 split_bound(a, b_j) + (2 d + 6) u (|a|^2 + |b_j|^2) (the
// inner product's error doubled, the norms' and the subtraction's rounding,
// or the direct recomputation's), 4 u for the f32 exp and L the longest
// chain of f32 additions (terms per slot plus slots). The test also holds
// the error within the f32 variants' tolerance, 1e-5 of sum_j |k_j v_j|.

/// f32 squared norm as the device's first pass forms it: 32 lanes striding
/// the depth with fused multiply-adds, then a pairwise tree.
fn device_norm2(row: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 32];
    for (k, &v) in row.iter().enumerate() {
        lanes[k % 32] = v.mul_add(v, lanes[k % 32]);
    }
    let mut width = 32;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            lanes[l] += lanes[l + width];
        }
    }
    lanes[0]
}

/// The squared distance as the cooperative variants form it (f32), and
/// whether the expanded form was kept.
fn device_distance(a: &[f32], b: &[f32], device: Device) -> (f32, bool) {
    let dot = emulated(a, b, true, device) as f32;
    let scale = device_norm2(a) + device_norm2(b);
    let s = (scale - 2.0 * dot).max(0.0);
    if s <= 0.125 * scale {
        (a.iter().zip(b).fold(0.0f32, |s, (&x, &y)| (x - y).mul_add(x - y, s)), false)
    } else {
        (s, true)
    }
}

/// The coop matvec's Y = K(X, Z) V (RBF, gamma) for row `a`, in the
/// device's order with `splits` splits of the column tiles.
fn emulated_matvec(a: &[f32], z: &[Vec<f32>], v: &[Vec<f32>], gamma: f32, splits: usize, device: Device) -> Vec<f64> {
    let (m, c) = (z.len(), v[0].len());
    let mut slots = vec![vec![0.0f32; c]; 2 * splits];
    for s in 0..splits {
        for h in 0..2 {
            let y = &mut slots[2 * s + h];
            for col0 in (s * 64..m).step_by(splits * 64) {
                for j in (col0 + h..(col0 + 64).min(m)).step_by(2) {
                    let k = (-gamma * device_distance(a, &z[j], device).0).exp();
                    for t in 0..c {
                        y[t] = k.mul_add(v[j][t], y[t]);
                    }
                }
            }
        }
    }
    (0..c).map(|t| slots.iter().fold(0.0f32, |acc, y| acc + y[t]) as f64).collect()
}

/// The bound of the comment above for output entry t of row `a`.
fn matvec_bound(a: &[f32], z: &[Vec<f32>], v: &[Vec<f32>], gamma: f64, splits: usize, t: usize, device: Device) -> f64 {
    let u = 2f64.powi(-24);
    let d = a.len() as f64;
    let m = z.len();
    let chain = (m.div_ceil(2 * splits) + 2 * splits) as f64;
    let norm2 = |r: &[f32]| r.iter().map(|&x| x as f64 * x as f64).sum::<f64>();
    let na = norm2(a);
    let (mut entries, mut sums) = (0.0, 0.0);
    for (b, vj) in z.iter().zip(v) {
        let s: f64 = a.iter().zip(b).map(|(&x, &y)| (x as f64 - y as f64).powi(2)).sum();
        let k = (-gamma * s).exp();
        let ds = if device_distance(a, b, device).1 { 2.0 * split_bound(a, b) + (d + 5.0) * u * (na + norm2(b)) } else { (d + 3.0) * u * s };
        entries += (vj[t] as f64).abs() * (gamma * (ds + u * s) + 4.0 * u) * k;
        sums += (k * vj[t] as f64).abs();
    }
    1.01 * (entries + (chain + 2.0) * u * sums)
}

#[test]
fn the_cooperative_matvec_meets_its_bound() {
    let mut rng = StdRng::seed_from_u64(50);
    let (m, c) = (300, 3);
    for d in [5, 33, 256] {
        let uniform = |rng: &mut StdRng, s: f32| -> Vec<f32> { (0..d).map(|_| rng.random_range(-1.0f32..1.0) * s).collect() };
        let scale = 1.0 / (d as f32).sqrt();
        let v: Vec<Vec<f32>> = (0..m).map(|_| (0..c).map(|_| rng.random_range(-1.0f32..1.0)).collect()).collect();
        let x = uniform(&mut rng, scale);
        // Points spread as the data, near-duplicates of x (the expansion
        // cancels: the direct fallback), and points far from the origin.
        let spread: Vec<Vec<f32>> = (0..m).map(|_| uniform(&mut rng, scale)).collect();
        let near: Vec<Vec<f32>> = (0..m).map(|_| x.iter().map(|&xi| xi + rng.random_range(-1e-3f32..1e-3) * scale).collect()).collect();
        let far_x: Vec<f32> = (0..d).map(|_| 1000.0 + rng.random_range(-1e-2f32..1e-2)).collect();
        let far: Vec<Vec<f32>> = (0..m).map(|_| (0..d).map(|_| 1000.0 + rng.random_range(-1e-2f32..1e-2)).collect()).collect();
        for (name, a, z, gamma) in [("spread", &x, &spread, 1.0f32), ("near-duplicates", &x, &near, 1.0), ("far from the origin", &far_x, &far, 1.0 / (d as f32 * 1e-4))] {
            for splits in [1, 2] {
                for device in DEVICES {
                    let got = emulated_matvec(a, z, &v, gamma, splits, device);
                    for (t, &g) in got.iter().enumerate() {
                        let want: f64 = z.iter().zip(&v).map(|(b, vj)| {
                            let s: f64 = a.iter().zip(b).map(|(&p, &q)| (p as f64 - q as f64).powi(2)).sum();
                            (-(gamma as f64) * s).exp() * vj[t] as f64
                        }).sum();
                        let bound = matvec_bound(a, z, &v, gamma as f64, splits, t, device);
                        let err = (g - want).abs();
                        assert!(err <= bound, "{name}, d = {d}, {splits} splits, {device:?}, column {t}: error {err:e} above the bound {bound:e}");
                        // And within the f32 variants' tolerance, relative
                        // to sum_j |k_j v_j| (the direct fallback keeps the
                        // cancelling cases there).
                        let scale: f64 = z.iter().zip(&v).map(|(b, vj)| {
                            let s: f64 = a.iter().zip(b).map(|(&p, &q)| (p as f64 - q as f64).powi(2)).sum();
                            ((-(gamma as f64) * s).exp() * vj[t] as f64).abs()
                        }).sum();
                        assert!(err <= 1e-5 * scale, "{name}, d = {d}, {splits} splits, {device:?}, column {t}: error {err:e} against sum |k v| = {scale:e}");
                    }
                }
            }
        }
    }
}
