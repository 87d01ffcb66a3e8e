//! Every product-shader variant of `gramian::gpu::CATALOGUE` that the adapter
//! can run, forced in turn, against the CPU f64 path on fresh random inputs:
//! kernel matrices of all five kernels, products in the three forms
//! (transposed operands), weighted Grams and accumulation, on awkward shapes
//! (1, primes, non-multiples of every tile size; depths that allow vec4
//! global loads and depths that do not), with and without a forced
//! small binding limit (matrices in many row blocks, products cut at every
//! block boundary); near-duplicate points, where the expanded distance form
//! must fall back to the direct one; and the tuner (cache, modes, forcing).
//!
//! Tolerances, whatever the variant: relative Frobenius error 1e-5 in f32
//! (1e-4 for the polynomial kernel, whose values reach 10) and 1e-12 in f64,
//! and every entry within 2e-5 (f32) / 1e-11 (f64) of the reference times
//! max(1, |reference entry|).

use crate::common;

use common::{gpu_device, random_matrix, rng};
use gramian::gpu::{GpuContext, TuningMode, CATALOGUE};
use gramian::linalg::relative_frobenius_error;
use gramian::{Device, GpuOptions, Kernel, MatrixProduct, Precision};
use nalgebra::{DMatrix, DVector};
use rand::{rngs::StdRng, SeedableRng};
use std::sync::Arc;

const SHAPES: &[(usize, usize, usize)] = &[(1, 1, 1), (7, 13, 5), (129, 67, 17), (131, 257, 3), (67, 129, 24), (33, 5, 300)];

fn kernels() -> Vec<(Kernel, f64)> {
    common::test_kernels()
}

fn tolerances(precision: Precision) -> (f64, f64) {
    match precision {
        Precision::F32 => (1e-5, 2e-5),
        Precision::F64 => (1e-12, 1e-11),
    }
}

fn devices() -> Vec<(Device, Arc<GpuContext>)> {
    let mut out = Vec::new();
    for options in [GpuOptions::default(), GpuOptions { max_tile_bytes: Some(4096), ..Default::default() }] {
        if let Some(d) = gpu_device(options) {
            let Device::Gpu(ctx) = &d else { panic!("gpu_device returned the CPU") };
            let ctx = ctx.clone();
            out.push((d, ctx));
        }
    }
    out
}

fn check(what: &str, got: &DMatrix<f64>, want: &DMatrix<f64>, precision: Precision, scale: f64) {
    let (rel, abs) = tolerances(precision);
    let r = relative_frobenius_error(got, want);
    assert!(r <= rel * scale, "{what}: relative error {r:e} > {:e}", rel * scale);
    for (g, w) in got.iter().zip(want.iter()) {
        assert!((g - w).abs() <= abs * scale * w.abs().max(1.0), "{what}: entry {g} vs {w}");
    }
}

#[test]
fn every_variant_matches_the_cpu_on_kernel_matrices_and_products() {
    let mut rng = rng();
    for (t, (device, ctx)) in devices().into_iter().enumerate() {
        let mut variants = ctx.product_variants();
        assert!(variants.len() >= 8, "{}: only {} variants run", device.describe(), variants.len());
        if t > 0 {
            // Forced small bindings: the cutting is the variants' shared
            // plan, so a default, a double-buffered expanded and a rows-fast
            // variant of each precision cover it.
            variants.retain(|v| v.name.ends_with("-direct") && v.name.contains("128x128") || v.name.contains("64x64-s4x4") && v.name.contains("-db") || v.name.ends_with("-rows"));
        }
        for v in variants {
            ctx.force_variant(Some(v.name)).unwrap();
            let p = v.precision;
            for &(n, m, d) in SHAPES {
                // Rows of norm about 1 (kernel values away from underflow).
                let x = random_matrix(&mut rng, n, d) / (d as f64).sqrt();
                let z = random_matrix(&mut rng, m, d) / (d as f64).sqrt();
                let (xd, zd) = (device.upload(&x, p).unwrap(), device.upload(&z, p).unwrap());
                for (kernel, scale) in kernels() {
                    let got = device.to_host(&device.resident_kernel_matrix(&kernel, &xd, &zd).unwrap()).unwrap();
                    let want = Device::cpu().kernel_matrix(&kernel, &x, &z).unwrap();
                    check(&format!("{} {kernel:?} {n}x{m}x{d}", v.name), &got, &want, p, scale);
                }
                // A B^T (plain), A^T B (both transposed), A B (B transposed).
                let got = device.to_host(&device.resident_matmul(&xd, &zd, MatrixProduct::ABt).unwrap()).unwrap();
                check(&format!("{} ABt {n}x{m}x{d}", v.name), &got, &(&x * z.transpose()), p, 1.0);
                let y = random_matrix(&mut rng, n, m);
                let yd = device.upload(&y, p).unwrap();
                let got = device.to_host(&device.resident_matmul(&xd, &yd, MatrixProduct::AtB).unwrap()).unwrap();
                check(&format!("{} AtB {n}x{m}x{d}", v.name), &got, &(x.transpose() * &y), p, 1.0);
                let got = device.to_host(&device.resident_matmul(&yd, &zd, MatrixProduct::AB).unwrap()).unwrap();
                check(&format!("{} AB {n}x{m}x{d}", v.name), &got, &(&y * &z), p, 1.0);
                // Weighted Gram Phi^T diag(w) Phi, then accumulated once more.
                let w = DVector::from_fn(n, |i, _| 0.5 + (i % 7) as f64 * 0.1);
                let wd = device.upload_vector(&w, p).unwrap();
                let g = device.resident_weighted_gram(&xd, &wd).unwrap();
                let want = x.transpose() * DMatrix::from_diagonal(&w) * &x;
                check(&format!("{} weighted gram {n}x{d}", v.name), &device.to_host(&g).unwrap(), &want, p, 1.0);
                device.resident_weighted_gram_into(&xd, &wd, &g, true).unwrap();
                check(&format!("{} accumulated gram {n}x{d}", v.name), &device.to_host(&g).unwrap(), &(&want * 2.0), p, 1.0);
            }
        }
        ctx.force_variant(None).unwrap();
    }
}

#[test]
fn every_variant_runs_the_fused_kernel_matvec() {
    fused_kernel_matvecs_match_the_cpu(|_| true);
}

/// The cooperative (tensor-core) variants' fused matvec alone: a short run
/// for a card that has them (software Vulkan has none, and runs nothing here).
#[test]
fn the_cooperative_variants_run_the_fused_kernel_matvec() {
    fused_kernel_matvecs_match_the_cpu(|v| v.is_cooperative());
}

/// Y = K(X, Z) V with one, five and eight columns (fused shader) and eleven
/// (the tiled path), and the pair form, for the variants `keep` takes,
/// against the CPU; signed sums over m terms cancel, so the Frobenius
/// tolerance is 10x the entry tolerance.
fn fused_kernel_matvecs_match_the_cpu(keep: impl Fn(&gramian::gpu::ProductVariant) -> bool) {
    let mut rng = rng();
    for (t, (device, ctx)) in devices().into_iter().enumerate() {
        let mut variants = ctx.product_variants();
        variants.retain(|v| keep(v));
        if t > 0 {
            variants.retain(|v| v.is_cooperative() || v.name.contains("64x64-s4x4") && v.name.contains("-db") || v.name.ends_with("-direct") && v.name.contains("128x128"));
        }
        for v in variants {
            ctx.force_variant(Some(v.name)).unwrap();
            let p = v.precision;
            for &(n, m, d) in SHAPES {
                let x = random_matrix(&mut rng, n, d) / (d as f64).sqrt();
                let z = random_matrix(&mut rng, m, d) / (d as f64).sqrt();
                let (xd, zd) = (device.upload(&x, p).unwrap(), device.upload(&z, p).unwrap());
                let widths: &[usize] = if t == 0 { &[1, 5] } else { &[8, 11] };
                for &c in widths {
                    let vm = random_matrix(&mut rng, m, c);
                    let vd = device.upload(&vm, p).unwrap();
                    for (kernel, scale) in kernels() {
                        let want = Device::cpu().kernel_matrix(&kernel, &x, &z).unwrap() * &vm;
                        let got = device.to_host(&device.resident_kernel_matvec(&kernel, &xd, &zd, &vd).unwrap()).unwrap();
                        let (rel, _) = tolerances(p);
                        let err = relative_frobenius_error(&got, &want);
                        assert!(err <= 10.0 * rel * scale, "{} {kernel:?} {n}x{m}x{d} c={c}: error {err:e}", v.name);
                        if !matches!(kernel, Kernel::Rbf { .. } | Kernel::Laplacian { .. }) {
                            continue;
                        }
                        // The pair form: K V and K^T W, V and W rows of one matrix.
                        let wm = random_matrix(&mut rng, n, c);
                        let vw = device.upload(&DMatrix::from_fn(m + n, c, |i, j| if i < m { vm[(i, j)] } else { wm[(i - m, j)] }), p).unwrap();
                        let out = device.zeros(n + m, c, p).unwrap();
                        device.resident_kernel_matvec_pair_into(&kernel, &xd, &zd, &vw.rows(0, m).unwrap(), &vw.rows(m, n).unwrap(), &out.rows(0, n).unwrap(), &out.rows(n, m).unwrap(), false).unwrap();
                        let both = device.to_host(&out).unwrap();
                        let want_t = Device::cpu().kernel_matrix(&kernel, &x, &z).unwrap().transpose() * &wm;
                        for (got, want, what) in [(both.rows(0, n).into_owned(), &want, "K V"), (both.rows(n, m).into_owned(), &want_t, "K^T W")] {
                            let err = relative_frobenius_error(&got, want);
                            assert!(err <= 10.0 * rel * scale, "{} {kernel:?} {n}x{m}x{d} c={c} pair {what}: error {err:e}", v.name);
                        }
                        if !matches!(kernel, Kernel::Rbf { .. }) {
                            continue;
                        }
                        // Accumulating adds the same again.
                        let acc = device.upload(&want, p).unwrap();
                        device.resident_kernel_matvec_into(&kernel, &xd, &zd, &vd, &acc, true).unwrap();
                        let err = relative_frobenius_error(&device.to_host(&acc).unwrap(), &(&want * 2.0));
                        assert!(err <= 10.0 * rel * scale, "{} {kernel:?} accumulate c={c}: error {err:e}", v.name);
                    }
                }
            }
        }
        ctx.force_variant(None).unwrap();
    }
}

#[test]
fn expanded_distances_stay_accurate_for_near_duplicates_and_far_data() {
    // Rows in pairs 1e-4 apart, and the same data shifted far from the
    // origin: |a|^2 + |b|^2 - 2 <a, b> cancels almost completely, so the
    // expanded variants must recompute these pairs directly.
    let mut rng = rng();
    for (device, ctx) in devices().into_iter().take(1) {
        for v in ctx.product_variants() {
            ctx.force_variant(Some(v.name)).unwrap();
            let p = v.precision;
            let base = random_matrix(&mut rng, 40, 9);
            let x = DMatrix::from_fn(80, 9, |i, j| base[(i / 2, j)] + if i % 2 == 1 { 1e-4 } else { 0.0 });
            let far = x.map(|t| t + 30.0);
            for data in [&x, &far] {
                let xd = device.upload(data, p).unwrap();
                for (kernel, _) in kernels().into_iter().take(2) {
                    let got = device.to_host(&device.resident_kernel_matrix(&kernel, &xd, &xd).unwrap()).unwrap();
                    let want = Device::cpu().kernel_matrix(&kernel, data, data).unwrap();
                    // The Laplacian's sqrt amplifies an error of s near 0:
                    // f32 is held to 1e-3 there (direct form: the same).
                    let scale = if p == Precision::F32 && matches!(kernel, Kernel::Laplacian { .. }) { 50.0 } else { 1.0 };
                    check(&format!("{} {kernel:?} near-duplicates", v.name), &got, &want, p, scale);
                    for i in 0..data.nrows() {
                        assert!((got[(i, i)] - 1.0).abs() < 1e-6, "{} {kernel:?}: diagonal {} != 1", v.name, got[(i, i)]);
                    }
                }
            }
        }
        ctx.force_variant(None).unwrap();
    }
}

#[test]
fn the_tuner_chooses_caches_and_can_be_forced_or_switched_off() {
    let Some((device, ctx)) = devices().into_iter().next() else { return };
    let mut rng = rng();
    assert!(ctx.force_variant(Some("no-such-variant")).is_err());
    ctx.set_tuning_mode(TuningMode::Retune).unwrap();
    ctx.set_tuning_mode(TuningMode::On).unwrap();
    let x = random_matrix(&mut rng, 300, 40);
    let xd = device.upload(&x, Precision::F32).unwrap();
    let before = device.transfer_stats();
    let counted = device.device_counters();
    let k = device.resident_kernel_matrix(&Kernel::rbf(0.1).unwrap(), &xd, &xd).unwrap();
    let after = device.transfer_stats();
    // The tuner's synthetic operands and runs are not the caller's traffic;
    // its time is counted apart, as first use.
    assert_eq!(after.uploads, before.uploads);
    assert_eq!(after.dispatches - before.dispatches, 1, "one kernel-matrix dispatch");
    let first = device.device_counters().since(&counted);
    assert_eq!(first.tunings, 1, "{first:?}");
    assert!(first.tuning_nanos > 0 && first.first_use_seconds() >= first.tuning_nanos as f64 * 1e-9);
    assert_eq!((first.waits, first.transfers.dispatches), (0, 1), "the tuner's waits and dispatches are not the caller's");
    // The same class again: no tuning, no compilation.
    let counted = device.device_counters();
    device.resident_kernel_matrix(&Kernel::rbf(0.1).unwrap(), &xd, &xd).unwrap();
    let again = device.device_counters().since(&counted);
    assert_eq!((again.tunings, again.tuning_nanos, again.compilations, again.compile_nanos), (0, 0, 0, 0), "{again:?}");
    check("tuned", &device.to_host(&k).unwrap(), &Device::cpu().kernel_matrix(&Kernel::rbf(0.1).unwrap(), &x, &x).unwrap(), Precision::F32, 1.0);
    let choices = ctx.tuned_choices();
    let c = choices.iter().find(|c| c.class.starts_with("product/f32/distance/NN")).expect("a choice for the class");
    assert!(c.timings.len() >= 2, "several variants timed: {:?}", c.timings);
    assert!(c.timings.iter().all(|(_, t)| t.is_finite() && *t > 0.0));
    assert!(CATALOGUE.iter().any(|v| v.name == c.variant));
    // Off: the default variant, no timing; the result is the same.
    ctx.set_tuning_mode(TuningMode::Off).unwrap();
    let k2 = device.to_host(&device.resident_kernel_matrix(&Kernel::rbf(0.1).unwrap(), &xd, &xd).unwrap()).unwrap();
    check("tuning off", &k2, &device.to_host(&k).unwrap(), Precision::F32, 1.0);
    ctx.set_tuning_mode(TuningMode::On).unwrap();
}

/// The product variants run without runtime bounds checks (their indices
/// are in range by construction, each problem's reach checked on the host).
/// Built with wgpu's checks (every index clamped) they must give the same
/// bits: a clamped index would change a result. Shapes at the edges of the
/// tiles (one entry, one past a tile, exact tiles) and of small bindings.
#[test]
fn every_variant_gives_the_same_bits_with_and_without_bounds_checks() {
    let mut rng = rng();
    for max_tile_bytes in [None, Some(4096)] {
        let (Some(fast), Some(checked)) = (gpu_device(GpuOptions { max_tile_bytes, ..Default::default() }), gpu_device(GpuOptions { max_tile_bytes, checked_shaders: true, ..Default::default() })) else { return };
        let (Device::Gpu(fast_ctx), Device::Gpu(checked_ctx)) = (&fast, &checked) else { panic!("gpu_device returned the CPU") };
        for v in fast_ctx.product_variants() {
            fast_ctx.force_variant(Some(v.name)).unwrap();
            checked_ctx.force_variant(Some(v.name)).unwrap();
            let (tr, tc) = (v.tile_rows(), v.tile_cols());
            for (n, m, d) in [(1, 1, 1), (tr + 1, tc + 1, v.kc as usize + 1), (tr, 2 * tc, 2 * v.kc as usize)] {
                let x = random_matrix(&mut rng, n, d) / (d as f64).sqrt();
                let z = random_matrix(&mut rng, m, d) / (d as f64).sqrt();
                let w = DVector::from_fn(n, |i, _| 0.5 + (i % 7) as f64 * 0.1);
                let run = |device: &Device| -> Vec<DMatrix<f64>> {
                    let (xd, zd) = (device.upload(&x, v.precision).unwrap(), device.upload(&z, v.precision).unwrap());
                    let wd = device.upload_vector(&w, v.precision).unwrap();
                    let mut out = Vec::new();
                    for (kernel, _) in kernels() {
                        out.push(device.to_host(&device.resident_kernel_matrix(&kernel, &xd, &zd).unwrap()).unwrap());
                    }
                    out.push(device.to_host(&device.resident_matmul(&xd, &zd, MatrixProduct::ABt).unwrap()).unwrap());
                    out.push(device.to_host(&device.resident_weighted_gram(&xd, &wd).unwrap()).unwrap());
                    let vm = random_matrix(&mut StdRng::seed_from_u64(5), m, 3);
                    let vd = device.upload(&vm, v.precision).unwrap();
                    out.push(device.to_host(&device.resident_kernel_matvec(&Kernel::rbf(0.3).unwrap(), &xd, &zd, &vd).unwrap()).unwrap());
                    let vw = device.upload(&random_matrix(&mut StdRng::seed_from_u64(6), m + n, 3), v.precision).unwrap();
                    let both = device.zeros(n + m, 3, v.precision).unwrap();
                    device.resident_kernel_matvec_pair_into(&Kernel::rbf(0.3).unwrap(), &xd, &zd, &vw.rows(0, m).unwrap(), &vw.rows(m, n).unwrap(), &both.rows(0, n).unwrap(), &both.rows(n, m).unwrap(), false).unwrap();
                    out.push(device.to_host(&both).unwrap());
                    out
                };
                for (a, b) in run(&fast).iter().zip(&run(&checked)) {
                    assert!(a.iter().zip(b.iter()).all(|(p, q)| p.to_bits() == q.to_bits()), "{} {n}x{m}x{d}: the checked build differs", v.name);
                }
            }
        }
        fast_ctx.force_variant(None).unwrap();
        checked_ctx.force_variant(None).unwrap();
    }
}
