//! The device counters ([`gramian::DeviceCounters`]) on small known
//! problems, exactly (the formulas are those of `gramian::gpu::counters`),
//! and per method at two sizes: what grows with n and what does not.
//!
//! The product variant is forced to the default of its precision, so that
//! workgroups and dispatches do not depend on what the tuner picks on the
//! adapter at hand.

use crate::common;

use common::{gpu_device, rng};
use gramian::gpu::{DeviceCounters, ShapeKind};
use gramian::{Device, GpuOptions, Kernel, Precision};
use nalgebra::{DMatrix, DVector};
use rand::Rng;

/// A fresh GPU device with the default variant of each precision forced.
fn device() -> Option<Device> {
    let gpu = gpu_device(GpuOptions::default())?;
    if let Device::Gpu(ctx) = &gpu {
        let name = ctx.product_variants().iter().find(|v| v.precision == Precision::F32).expect("an f32 variant").name;
        ctx.force_variant(Some(name)).unwrap();
    }
    Some(gpu)
}

/// Tile rows and columns of the forced f32 variant.
fn tiles(gpu: &Device) -> (usize, usize) {
    match gpu {
        Device::Gpu(ctx) => {
            let v = ctx.product_variants().into_iter().find(|v| v.precision == Precision::F32).unwrap();
            (v.tile_rows(), v.tile_cols())
        }
        Device::Cpu => unreachable!(),
    }
}

fn uniform(rows: usize, cols: usize) -> DMatrix<f64> {
    let mut r = rng();
    DMatrix::from_fn(rows, cols, |_, _| r.random_range(-1.0..1.0))
}

/// An upload of several MiB (copied into staging memory in parallel parts
/// of 1 MiB and a remainder) arrives whole: the same bits in `f64`, each
/// value rounded once in `f32`; one upload of exactly its bytes, and one
/// release of them.
#[test]
fn a_large_upload_arrives_whole_and_counts_once() {
    let Some(gpu) = device() else { return };
    // 1237 x 331 values: 3.3 MB in f64 (3 whole parts and a remainder),
    // 1.6 MB in f32 (1 part and a remainder).
    let x = uniform(1237, 331);
    for precision in [Precision::F32, Precision::F64] {
        if !gpu.supports(precision) {
            continue;
        }
        let before = gpu.device_counters();
        let on = gpu.upload(&x, precision).unwrap();
        let c = gpu.device_counters().since(&before);
        assert_eq!(c.transfers.host_to_device_bytes, (x.len() * precision.bytes()) as u64, "{precision:?}");
        assert_eq!(c.transfers.uploads, 1, "{precision:?}");
        let back = gpu.to_host(&on).unwrap();
        let expected = match precision {
            Precision::F64 => x.clone(),
            Precision::F32 => x.map(|v| v as f32 as f64),
        };
        assert!(back.iter().zip(expected.iter()).all(|(a, b)| a.to_bits() == b.to_bits()), "{precision:?}: an uploaded value differs");
        // A clone shares the storage: the matrix is released once, with
        // its bytes, when the last handle goes.
        let copy = on.clone();
        let before = gpu.device_counters();
        drop(on);
        assert_eq!(gpu.device_counters().since(&before).releases, 0);
        drop(copy);
        let r = gpu.device_counters().since(&before);
        assert_eq!((r.releases, r.released_bytes), (1, (x.len() * precision.bytes()) as u64), "{precision:?}");
    }
}

#[test]
fn one_kernel_matrix_counts_exactly() {
    let Some(gpu) = device() else { return };
    let (n, m, d) = (300usize, 200usize, 5usize);
    let (x, z) = (uniform(n, d), uniform(m, d));
    let (tr, tc) = tiles(&gpu);
    let run = || {
        let before = gpu.device_counters();
        let xs = gpu.upload(&x, Precision::F32).unwrap();
        let zs = gpu.upload(&z, Precision::F32).unwrap();
        let k = gpu.resident_kernel_matrix(&Kernel::rbf(0.5).unwrap(), &xs, &zs).unwrap();
        let host = gpu.to_host(&k).unwrap();
        assert_eq!(host.shape(), (n, m));
        gpu.device_counters().since(&before)
    };
    gpu.reset_device_counters();
    let first = run();
    let (n64, m64, d64) = (n as u64, m as u64, d as u64);
    let t = first.transfers;
    assert_eq!((t.dispatches, t.uploads, t.submissions), (1, 2, 2), "{first:?}");
    assert_eq!(t.host_to_device_bytes, (n64 + m64) * d64 * 4);
    assert_eq!(t.device_to_host_bytes, n64 * m64 * 4);
    let k = first.class(ShapeKind::KernelMatrix, Precision::F32);
    assert_eq!(k.dispatches, 1);
    assert_eq!(k.kernel_evaluations, n64 * m64);
    assert_eq!(k.flops, 3 * n64 * m64 * d64);
    assert_eq!(k.bytes, 4 * (n64 * d64 + m64 * d64 + n64 * m64));
    assert_eq!(k.workgroups, (n.div_ceil(tr) * m.div_ceil(tc)) as u64);
    // Whole tiles: the rows and columns rounded up to the tile.
    let kc = match &gpu {
        Device::Gpu(ctx) => ctx.product_variants().into_iter().find(|v| v.precision == Precision::F32).unwrap().kc as u64,
        Device::Cpu => unreachable!(),
    };
    let padded = (n.div_ceil(tr) * tr * m.div_ceil(tc) * tc) as u64;
    assert_eq!(k.launched_evaluations, padded);
    let launched = 3.0 * (padded * d64.div_ceil(kc) * kc) as f64;
    assert!((k.launched_flops as f64 - launched).abs() <= 1.0, "{} vs {launched}", k.launched_flops);
    assert_eq!(first.total(), k, "only the kernel matrix ran");
    assert_eq!(first.classes().len(), 1);
    assert_eq!(first.waits, 1, "one read-back");
    assert!(first.blocked_nanos > 0);
    assert_eq!(first.allocations, 3, "x, z and K");
    assert_eq!(first.allocated_bytes, 4 * ((n64 + m64) * d64 + n64 * m64));
    // Three matrices of one block each, and the descriptor and staging
    // scratch buffers created on first use ...
    assert_eq!((first.buffers_created, first.scratch_reuses), (5, 0));
    // ... then reused: the same work again counts the same, less the scratch.
    let second = run();
    assert_eq!((second.buffers_created, second.scratch_reuses), (3, 2));
    assert_eq!(second.total(), first.total());
    assert_eq!(second.transfers, first.transfers);
    assert_eq!(second.waits, first.waits);
    // Reset puts everything to zero.
    gpu.reset_device_counters();
    assert_eq!(gpu.device_counters(), DeviceCounters::default());
}

#[test]
fn a_fused_matvec_counts_its_kernel_evaluations_and_the_reduction() {
    let Some(gpu) = device() else { return };
    let (n, m, d) = (256usize, 192usize, 4usize);
    let (x, z) = (uniform(n, d), uniform(m, d));
    let v = DMatrix::from_fn(m, 1, |i, _| i as f64 / m as f64);
    let xs = gpu.upload(&x, Precision::F32).unwrap();
    let zs = gpu.upload(&z, Precision::F32).unwrap();
    let vs = gpu.upload(&v, Precision::F32).unwrap();
    gpu.reset_device_counters();
    let out = gpu.resident_kernel_matvec(&Kernel::rbf(0.5).unwrap(), &xs, &zs, &vs).unwrap();
    let c = gpu.device_counters();
    let (n64, m64, d64) = (n as u64, m as u64, d as u64);
    let mv = c.class(ShapeKind::Matvec, Precision::F32);
    assert_eq!(mv.dispatches, 1, "{c:?}");
    assert_eq!(mv.kernel_evaluations, n64 * m64);
    assert_eq!(mv.flops, 3 * n64 * m64 * d64 + 2 * n64 * m64);
    let reduce = c.class(ShapeKind::RowReduce, Precision::F32);
    assert_eq!(reduce.dispatches, 1);
    // The reduction sums the partial slots of every output element.
    assert_eq!(reduce.flops % n64, 0);
    assert_eq!(c.total().kernel_evaluations, n64 * m64);
    assert_eq!(c.waits, 0, "nothing read back");
    assert_eq!(c.transfers.host_to_device_bytes, 0);
    assert_eq!(c.allocations, 2, "the output and the partial sums");
    let y = gpu.to_host(&out).unwrap();
    assert_eq!(y.shape(), (n, 1));
}

#[test]
fn a_pair_matvec_evaluates_each_kernel_entry_once() {
    let Some(gpu) = device() else { return };
    let (n, m, d, c) = (256usize, 192usize, 4usize, 3usize);
    let (x, z) = (uniform(n, d), uniform(m, d));
    let vw = uniform(m + n, c);
    let xs = gpu.upload(&x, Precision::F32).unwrap();
    let zs = gpu.upload(&z, Precision::F32).unwrap();
    let vws = gpu.upload(&vw, Precision::F32).unwrap();
    let out = gpu.zeros(n + m, c, Precision::F32).unwrap();
    gpu.reset_device_counters();
    let (v, w) = (vws.rows(0, m).unwrap(), vws.rows(m, n).unwrap());
    gpu.resident_kernel_matvec_pair_into(&Kernel::rbf(0.5).unwrap(), &xs, &zs, &v, &w, &out.rows(0, n).unwrap(), &out.rows(n, m).unwrap(), false).unwrap();
    let counts = gpu.device_counters();
    let (n64, m64, d64, c64) = (n as u64, m as u64, d as u64, c as u64);
    let mv = counts.class(ShapeKind::Matvec, Precision::F32);
    assert_eq!(mv.dispatches, 1, "{counts:?}");
    assert_eq!(mv.kernel_evaluations, n64 * m64, "each entry once for both directions");
    assert_eq!(mv.flops, 3 * n64 * m64 * d64 + 4 * n64 * m64 * c64);
    assert_eq!(counts.class(ShapeKind::RowReduce, Precision::F32).dispatches, 2, "one reduction per direction");
    assert_eq!(counts.total().kernel_evaluations, n64 * m64);
    assert_eq!((counts.waits, counts.transfers.host_to_device_bytes), (0, 0));
    assert_eq!(counts.allocations, 1, "the partial sums");
}

/// Repeated pair matvecs into the same outputs allocate nothing after the
/// first: the partial sums are reused, grown once for a larger product in
/// between; what the larger one left in them changes no bit of the
/// smaller one's result, which matches the CPU's f64 pair matvec (to
/// `1e-12` relative in f64: sums of a few hundred products of kernel values
/// in `[0, 1]` and entries in `[-1, 1]`; `1e-4` in f32).
#[test]
fn repeated_pair_matvecs_allocate_nothing_after_the_first() {
    let Some(gpu) = device() else { return };
    let precision = gpu.best_precision();
    let kernel = Kernel::rbf(0.5).unwrap();
    let (d, c) = (3usize, 8usize);
    let pair = |n: usize, m: usize, x: &DMatrix<f64>, z: &DMatrix<f64>, vw: &DMatrix<f64>| {
        let (xs, zs, vws) = (gpu.upload(x, precision).unwrap(), gpu.upload(z, precision).unwrap(), gpu.upload(vw, precision).unwrap());
        let out = gpu.zeros(n + m, c, precision).unwrap();
        let (v, w) = (vws.rows(0, m).unwrap(), vws.rows(m, n).unwrap());
        let (o, ot) = (out.rows(0, n).unwrap(), out.rows(n, m).unwrap());
        move |gpu: &Device| {
            gpu.resident_kernel_matvec_pair_into(&kernel, &xs, &zs, &v, &w, &o, &ot, false).unwrap();
            gpu.to_host(&out).unwrap()
        }
    };
    let (n, m) = (150usize, 110usize);
    let (x, z, vw) = (uniform(n, d), uniform(m, d), uniform(m + n, c));
    let small = pair(n, m, &x, &z, &vw);
    let large = pair(4 * n, 3 * m, &uniform(4 * n, d), &uniform(3 * m, d), &uniform(3 * m + 4 * n, c));
    let first = counted(&gpu, || drop(small(&gpu)));
    assert_eq!(first.allocations, 1, "the partial sums, once: {first:?}");
    let fresh = small(&gpu);
    large(&gpu);
    for _ in 0..3 {
        let mut again = None;
        let counts = counted(&gpu, || again = Some(small(&gpu)));
        assert_eq!(counts.allocations, 0, "nothing allocated: {counts:?}");
        assert!(counts.scratch_reuses >= 1, "the partial sums reused: {counts:?}");
        assert_eq!(counts.transfers.host_to_device_bytes, 0);
        assert_eq!(again.unwrap(), fresh, "the same bits as before");
    }
    let (kv, ktw) = gramian::kernel::kernel_matvec_pair_cpu(&kernel, &x, &z, &vw.rows(0, m).into_owned(), &vw.rows(m, n).into_owned()).unwrap();
    let tolerance = if precision == Precision::F64 { 1e-12 } else { 1e-4 };
    for (got, want) in [(fresh.rows(0, n), &kv), (fresh.rows(n, m), &ktw)] {
        let error = (got - want).amax() / want.amax();
        assert!(error <= tolerance, "relative error {error:e}");
    }
}

#[test]
fn products_reductions_and_maps_count_by_their_formulas() {
    let Some(gpu) = device() else { return };
    let (r, k, c) = (70usize, 30usize, 50usize);
    let a = gpu.upload(&uniform(r, k), Precision::F32).unwrap();
    let b = gpu.upload(&uniform(k, c), Precision::F32).unwrap();
    gpu.reset_device_counters();
    gpu.resident_matmul(&a, &b, gramian::MatrixProduct::AB).unwrap();
    let p = gpu.device_counters().class(ShapeKind::Product, Precision::F32);
    let (r64, k64, c64) = (r as u64, k as u64, c as u64);
    assert_eq!((p.dispatches, p.flops, p.bytes, p.kernel_evaluations), (1, 2 * r64 * c64 * k64, 4 * (r64 * k64 + c64 * k64 + r64 * c64), 0));
    gpu.reset_device_counters();
    gpu.resident_row_sums(&a).unwrap();
    let s = gpu.device_counters().class(ShapeKind::RowReduce, Precision::F32);
    assert_eq!((s.dispatches, s.flops, s.bytes, s.workgroups), (1, r64 * k64, 4 * (r64 * k64 + r64), r.div_ceil(64) as u64));
    let a2 = gpu.upload(&uniform(r, k), Precision::F32).unwrap();
    gpu.reset_device_counters();
    gpu.resident_hadamard(&a, &a2).unwrap();
    let h = gpu.device_counters().class(ShapeKind::Elementwise, Precision::F32);
    assert_eq!((h.dispatches, h.flops, h.bytes), (1, r64 * k64, 4 * 3 * r64 * k64));
    // Weighted Gram Phi^T diag(w) Phi of Phi n x q: 3 q q n flops.
    let (ns, q) = (90usize, 6usize);
    let phi = gpu.upload(&uniform(ns, q), Precision::F32).unwrap();
    let w = gpu.upload(&DMatrix::from_element(ns, 1, 0.5), Precision::F32).unwrap();
    gpu.reset_device_counters();
    gpu.resident_weighted_gram(&phi, &w).unwrap();
    let g = gpu.device_counters().class(ShapeKind::WeightedGram, Precision::F32);
    assert_eq!((g.dispatches, g.flops), (1, 3 * (q * q * ns) as u64), "{:?}", gpu.device_counters());
}

/// A method's counters over one fit.
fn counted(gpu: &Device, fit: impl FnOnce()) -> DeviceCounters {
    gpu.reset_device_counters();
    fit();
    gpu.device_counters()
}

fn print(what: &str, n: usize, c: &DeviceCounters) {
    let t = c.total();
    eprintln!(
        "{what} n={n}: waits {} dispatches {} submissions {} up {} down {} allocations {} ({} B) buffers {} reuses {} flops {} bytes {} evaluations {}",
        c.waits, c.transfers.dispatches, c.transfers.submissions, c.transfers.host_to_device_bytes, c.transfers.device_to_host_bytes, c.allocations, c.allocated_bytes, c.buffers_created, c.scratch_reuses, t.flops, t.bytes, t.kernel_evaluations
    );
}

/// A whole mklaren fit on a GPU with `f64` at n = 200 and 400: one wait per
/// pivot step and the reads at the end (Eq. 18's sums, the kernel weights,
/// the fit, each used kernel's G at its pivots); the numbers each way of
/// `methods::mklaren_traffic`; kernel columns: the look-ahead's delta per
/// refreshed kernel and one exact column per kernel per step (the exact
/// step runs on every kernel, predicated on the device's choice); the same
/// dispatches, submissions and allocations at both sizes.
#[test]
fn mklaren_counters_at_two_sizes() {
    use gramian::mklaren::MklarenParams;
    let Some(gpu) = device() else { return };
    if !gpu.supports(Precision::F64) {
        return;
    }
    let (d, rank, lookahead, p) = (3usize, 8usize, 3usize, 2usize);
    let fit = |n: usize| {
        let x = uniform(n, d);
        let y = DVector::from_fn(n, |i, _| (2.0 * x[(i, 0)]).sin() + x[(i, 1)]);
        let kernels = [Kernel::rbf(0.3).unwrap(), Kernel::rbf(3.0).unwrap()];
        let mut used = 0;
        let c = counted(&gpu, || {
            let m = MklarenParams::new(rank).lookahead(lookahead).kernels(&kernels).fit_inputs(&gpu, &[&x, &x], &y).unwrap();
            used = (0..p).filter(|&q| m.order().iter().any(|s| s.kernel == q)).count();
        });
        print("mklaren", n, &c);
        (c, used)
    };
    let ((small, used_small), (large, used_large)) = (fit(200), fit(400));
    for (n, c, used) in [(200usize, &small, used_small), (400usize, &large, used_large)] {
        assert_eq!(c.waits as usize, rank + 3 + used, "{c:?}");
        let (up, down) = super::methods::mklaren_traffic(n, d, rank, lookahead, p);
        assert_eq!(c.transfers.host_to_device_bytes as usize, 8 * up, "{c:?}");
        assert_eq!(c.transfers.uploads, 4, "X, the residual, R1^(-1) and the coefficients: {c:?}");
        assert_eq!(c.transfers.device_to_host_bytes as usize, 8 * down, "{c:?}");
        let columns = p * lookahead + (rank - 1) * lookahead + rank * p;
        assert_eq!(c.total().kernel_evaluations as usize, n * columns, "{c:?}");
    }
    if used_small == used_large {
        assert_eq!(small.transfers.dispatches, large.transfers.dispatches);
        assert_eq!(small.transfers.submissions, large.transfers.submissions);
        assert_eq!(small.allocations, large.allocations, "buffers sized once per fit");
    }
}

/// One pivot step of a GPU incomplete Cholesky fit with `G` and `d`
/// resident, exactly: a fit of rank K + 1 less one of rank K, at n = 2000
/// and n = 16000. The step is one blocking wait for the arg-max (3 numbers
/// per block, at most 1008 bytes), no upload and no allocation; the only
/// n-sized difference is the one more column of `G` read back at the end of
/// the fit (and allocated with it). The arg-max's partials are allocated
/// at the first fit of an n and reused after it. Both fits match the CPU's: the same
/// pivots, `G` within 1e-10 (kernel values in [0, 1]).
#[test]
fn icd_counters_per_pivot_step_at_two_sizes() {
    use gramian::mklaren::IcdParams;
    let Some(gpu) = device() else { return };
    let (d, rank) = (3usize, 7usize);
    let kernel = Kernel::rbf(0.5).unwrap();
    let step = |n: usize| {
        let x = uniform(n, d);
        let fit = |k: usize| {
            let mut factor = None;
            let c = counted(&gpu, || factor = Some(IcdParams::new(k).fit(&gpu, &kernel, &x).unwrap()));
            let (factor, cpu) = (factor.unwrap(), IcdParams::new(k).fit(&Device::Cpu, &kernel, &x).unwrap());
            assert_eq!(factor.pivots(), cpu.pivots(), "n = {n}, rank {k}");
            let error = (factor.factor() - cpu.factor()).abs().max();
            assert!(error <= 1e-10, "n = {n}, rank {k}: G differs by {error:e}");
            let residual = (factor.residual_diagonal() - cpu.residual_diagonal()).abs().max();
            assert!(residual <= 1e-10, "n = {n}, rank {k}: d differs by {residual:e}");
            c
        };
        fit(1);
        let (before, after) = (fit(rank), fit(rank + 1));
        let c = after.since(&before);
        print("icd step", n, &c);
        c
    };
    for n in [2000usize, 16000] {
        let c = step(n);
        let (t, n) = (c.transfers, n as u64);
        let blocks = n.div_ceil(n.div_ceil(42));
        assert_eq!(c.waits, 1, "one wait per step: {c:?}");
        assert_eq!(t.device_to_host_bytes, 3 * 8 * blocks + 8 * n, "the arg-max's partials, and one more column of G at the end: {c:?}");
        assert!(3 * 8 * blocks <= 1024);
        assert_eq!((t.uploads, t.host_to_device_bytes), (0, 0), "nothing goes up: {c:?}");
        assert_eq!((c.allocations, c.allocated_bytes), (0, 8 * n), "G one column wider, nothing else: {c:?}");
        assert_eq!(c.total().kernel_evaluations, n, "one kernel column: {c:?}");
    }
}

/// One mklaren pivot step on a GPU with `f64` (rank K+1 minus rank K, two
/// RBF kernels, n = 2000 and 16000): exactly one blocking wait; down, the
/// step's state and `H^T h`, `H^T r` (8 (16 + 2K) bytes, under 1 KiB) and,
/// at the end, one more row and column of the sums of Eq. 18 (`Q1^T Q1`,
/// `Q1^T mu`) and of the pivots' rows of G: nothing of length n more; up,
/// the weights (K + 1 numbers a step), two more rows of the starting
/// residual, and at the end one more row and column of `R1^{-1}` and one
/// more row of the coefficients per kernel; no allocation more; one plan
/// and one read (two submissions); delta + p kernel columns. The fits
/// choose the CPU's columns. (The dispatches grow with n only where the
/// product engine splits a sum over the rows into more chunks, within the
/// same submission.)
#[test]
fn mklaren_counters_per_pivot_step_at_two_sizes() {
    use gramian::mklaren::MklarenParams;
    let Some(gpu) = device() else { return };
    if !gpu.supports(Precision::F64) {
        return;
    }
    let (d, rank, delta) = (3usize, 7usize, 4usize);
    let kernels = [Kernel::rbf(0.4).unwrap(), Kernel::rbf(3.0).unwrap()];
    let step = |n: usize| {
        let x = uniform(n, d);
        let y = DVector::from_fn(n, |i, _| (2.0 * x[(i, 0)]).sin() + x[(i, 1)] * x[(i, 2)]);
        let fit = |k: usize| {
            let params = MklarenParams::new(k).lookahead(delta).kernels(&kernels);
            let mut model = None;
            let c = counted(&gpu, || model = Some(params.fit_inputs(&gpu, &[&x, &x], &y).unwrap()));
            let (model, cpu) = (model.unwrap(), params.fit_inputs(&Device::Cpu, &[&x, &x], &y).unwrap());
            let order = |m: &gramian::mklaren::Mklaren| m.order().iter().map(|s| (s.kernel, s.pivot)).collect::<Vec<_>>();
            assert_eq!(order(&model), order(&cpu), "n = {n}, rank {k}");
            let used = (0..kernels.len()).filter(|&q| model.order().iter().any(|s| s.kernel == q)).count();
            (c, used)
        };
        // The first step K >= rank that brings in no kernel new to the fit:
        // at the end, each kernel with pivots gathers its pivots' rows of G
        // (one allocation and one wait more per kernel). Two kernels enter
        // at most twice, so one of four steps is plain.
        let mut before = fit(rank);
        for k in rank..rank + 4 {
            let after = fit(k + 1);
            if before.1 == after.1 {
                let c = after.0.since(&before.0);
                print("mklaren step", n, &c);
                return (c, k);
            }
            before = after;
        }
        panic!("n = {n}: a kernel entered at each of four steps, with two kernels");
    };
    for n in [2000usize, 16000] {
        let (c, k) = step(n);
        let (t, k) = (c.transfers, k as u64);
        assert_eq!(c.waits, 1, "one wait per step: {c:?}");
        // Every step reads 16 + 2K numbers: K steps of 2 more, and one step
        // of 16 + 2(K + 1); then the K (K + 1) sums of Eq. 18 one row and
        // one column larger (2K + 2), and one more row of G at the pivots
        // (C = delta + 1 + K columns), each row one column wider; the fit
        // and the p kernel weights as long as before.
        let head = 8 * (16 + 2 * (k + 1));
        assert!(head <= 1024);
        let end = 8 * ((2 * k + 2) + (delta as u64 + 2 + 2 * k));
        assert_eq!(t.device_to_host_bytes, 8 * 2 * k + head + end, "n = {n}: {c:?}");
        // Up: the weights and the active correlation of the step (K + 2
        // numbers now, every earlier step's one more), and the starting
        // residual and direction two numbers longer; at the end the last
        // weights one longer, R1^{-1} (2K + 1 more) and one more row of the
        // p coefficients per kernel.
        let p = kernels.len() as u64;
        assert_eq!(t.host_to_device_bytes, 8 * ((k + 2) + (k - 1) + 2 + 1 + (2 * k + 1) + p), "n = {n}: {c:?}");
        assert_eq!(t.uploads, 0, "n = {n}: {c:?}");
        assert_eq!(c.allocations, 0, "buffers sized once per fit: {c:?}");
        // One plan and one read: two submissions. The look-ahead of the
        // kernel that took step K and the exact column on each kernel.
        assert_eq!(t.submissions, 2, "n = {n}: {c:?}");
        assert_eq!(c.total().kernel_evaluations, n as u64 * (delta + kernels.len()) as u64, "n = {n}: {c:?}");
    }
}

/// A matrix-free Dual eKSVD fit on the GPU in f64 (the Krylov basis
/// resident there) at N = 300 and N = 600 rows per source (order 3 N, k = 3,
/// blocks of 40 as for every kernel function's coupling, a basis of 243
/// columns; the products go through tiles of K, kept for the solve). With a
/// tolerance no basis meets (a narrow RBF: a flat spectrum), a fit takes
/// the same steps at both sizes: the first basis (the start block and 5
/// block products) with no restart allowed, and with one restart allowed,
/// the restart and the 2 block products that refill its basis. Then:
/// - after the sources and the start block (sent up once), nothing of
///   length N crosses: the bytes moved each way less those are the same at
///   both sizes, and so are the waits;
/// - one restart and its 2 block products (the second fit less the first)
///   allocate nothing, wait twice per block (the Gram-Schmidt coefficients
///   with the block's Gram matrix, then CholQR2's second Gram matrix), move
///   the same basis-sized coefficients at both sizes, and evaluate each
///   kernel entry of the three pairs once per block product: 2 x 3 N^2
///   evaluations.
#[test]
fn dual_eksvd_counters_at_two_sizes() {
    use gramian::eksvd::{solve_dual, CouplingMatrix, Eigensolver};
    let Some(gpu) = device() else { return };
    if !gpu.supports(Precision::F64) {
        eprintln!("SKIPPED: no f64 on this adapter (the host Krylov basis applies)");
        return;
    }
    let d = 3usize;
    let sizes = [300usize, 600];
    let runs: Vec<(DeviceCounters, DeviceCounters)> = sizes
        .iter()
        .map(|&n| {
            let mut r = rng();
            let shared = DMatrix::from_fn(n, d, |_, _| r.random_range(-1.0..1.0));
            let sources: Vec<DMatrix<f64>> = (0..3).map(|_| &shared + DMatrix::from_fn(n, d, |_, _| 0.3 * r.random_range(-1.0..1.0))).collect();
            let data = gramian::MultiSource::paired(sources).unwrap();
            let coupling = CouplingMatrix::from_kernel(Kernel::rbf(30.0).unwrap(), &data).unwrap();
            let fit = |restarts: usize| {
                counted(&gpu, || {
                    let err = solve_dual(&gpu, &coupling, 3, &Eigensolver::Lanczos { tolerance: 1e-15, max_restarts: restarts }, 7).unwrap_err();
                    assert!(matches!(err, gramian::Error::EigenNotConverged { restarts: r, .. } if r == restarts), "N = {n}: {err:?}");
                })
            };
            // A first fit tunes and grows the reused scratch buffers.
            fit(0);
            let (first, second) = (fit(0), fit(1));
            print("eksvd basis", n, &first);
            print("eksvd restart and product", n, &second.since(&first));
            (first, second)
        })
        .collect();
    let length_n = |n: usize| ((3 * n * d + 3 * n * 40) * 8) as u64;
    for (i, (first, _)) in runs.iter().enumerate() {
        let t = first.transfers;
        assert!(t.host_to_device_bytes >= length_n(sizes[i]), "{first:?}");
    }
    let (small, large) = (&runs[0], &runs[1]);
    for (a, b) in [(&small.0, &large.0), (&small.1, &large.1)] {
        assert_eq!(a.transfers.host_to_device_bytes - length_n(sizes[0]), b.transfers.host_to_device_bytes - length_n(sizes[1]), "up, less the sources and the start block");
        assert_eq!(a.transfers.device_to_host_bytes, b.transfers.device_to_host_bytes, "down");
        assert_eq!(a.waits, b.waits);
        assert_eq!(a.allocations, b.allocations, "the solver's buffers, allocated once per solve");
    }
    let (step_small, step_large) = (small.1.since(&small.0), large.1.since(&large.0));
    for (n, step) in [(sizes[0] as u64, &step_small), (sizes[1] as u64, &step_large)] {
        assert_eq!(step.allocations, 0, "N = {n}: {step:?}");
        assert_eq!(step.waits, 2 * 2, "N = {n}: {step:?}");
        assert_eq!(step.total().kernel_evaluations, 2 * 3 * n * n, "two block products: {step:?}");
        // Coefficients against the basis: at most 2 blocks x 2 passes x
        // (290 basis columns x 40), whatever N.
        assert!(step.transfers.device_to_host_bytes < 8 * 2 * 2 * 290 * 40, "{step:?}");
    }
    assert_eq!(step_small.transfers.host_to_device_bytes, step_large.transfers.host_to_device_bytes);
    assert_eq!(step_small.transfers.device_to_host_bytes, step_large.transfers.device_to_host_bytes);
}

#[test]
fn psd_density_counters_at_two_sizes() {
    use gramian::psd::{BaseMeasure, DensityParams, PositivePartRoute, Regularisation, SolverOptions};
    let Some(gpu) = device() else { return };
    let (d, m) = (3usize, 30usize);
    let fit = |x: &DMatrix<f64>, route: PositivePartRoute| {
        let n = x.nrows();
        let params = DensityParams::new(Kernel::gaussian_with_width(0.8).unwrap()).unwrap()
            .regularisation(Regularisation::new().trace(1e-3).quadratic(1e-4))
            .base_measure(BaseMeasure::isotropic_gaussian(d, 2.0).unwrap())
            .nystrom(m, 3)
            .positive_part(route)
            .solver(SolverOptions { tolerance: 1e-6, max_iterations: 3000, check_every: 2 });
        let mut fitted = None;
        let c = counted(&gpu, || fitted = Some(params.fit(&gpu, x).unwrap()));
        let fitted = fitted.unwrap();
        eprintln!("{route:?}: {} iterations, {:?}", fitted.report().iterations, fitted.eigen_stats());
        print("psd", n, &c);
        (c, fitted)
    };
    for n in [200usize, 400] {
        let x = uniform(n, d) * 0.5;
        let (polar, polar_fit) = fit(&x, PositivePartRoute::Polar);
        let (eigen, eigen_fit) = fit(&x, PositivePartRoute::Eigen);
        let stats = polar_fit.eigen_stats();
        // Both routes certified on the same data: primal objectives within
        // the sum of the two gaps; the polar fit PSD and normalised.
        let (pp, pe) = (polar_fit.report().primal, eigen_fit.report().primal);
        assert!((pp - pe).abs() <= polar_fit.report().gap + eigen_fit.report().gap + 1e-12 * pe.abs(), "primal polar {pp} eigen {pe}");
        assert!((polar_fit.integral().unwrap() - 1.0).abs() < 1e-9, "integral {}", polar_fit.integral().unwrap());
        // The n x m Nystrom features are evaluated once (n m kernel evaluations).
        assert_eq!(polar.total().kernel_evaluations, (n * m) as u64, "{polar:?}");
        assert_eq!(eigen.total().kernel_evaluations, (n * m) as u64, "{eigen:?}");
        // On a GPU with f64 the polar route keeps M and [M]_+ on the device:
        // every read-back is a vector of at most max(n, r) numbers (model
        // values, norms, traces) but the fitted r x r matrix, once. The
        // eigendecomposition route brings every M down (r^2 = 900 numbers,
        // more than n).
        assert!(stats.polar > 0 && stats.full == 0, "{stats:?}");
        let (r, vector) = (m as u64, 8 * n.max(m) as u64);
        let c = &polar.transfers;
        assert!(c.device_to_host_bytes <= polar.waits * vector + 8 * r * r, "{} bytes down in {} waits", c.device_to_host_bytes, polar.waits);
        assert!(eigen.transfers.device_to_host_bytes > eigen.waits * vector, "the eigendecomposition route: {} bytes down in {} waits", eigen.transfers.device_to_host_bytes, eigen.waits);
    }
}

/// What crosses between host and device per iteration of the GPU density
/// fit on the polar route, where `M`, `[M]_+` and FISTA's state (the dual
/// point, the momentum point, the gradient, the metric) are resident,
/// exactly: the counters of a fit stopped after K2 iterations less those of
/// the same fit stopped after K1 < K2 (both `NotConverged`: the set-up, the
/// uploads of X, the centres, W, the metric and the dual start, and the
/// final read-back of z, are the same in both and cancel), at two sizes:
///
/// - up: nothing (no upload, no byte);
/// - down: every wait is one read-back of `2 r` numbers (the polar route's
///   row sums for `||M||_F` and `||M^2||_F`, or for `tr P` and `||P||_F`)
///   or of at most 5 scalars (FISTA's inner products with the remainder
///   bound and the restart criterion, the loss sums of an objective or a
///   gap check), nothing of length `n`: at most `16 r` bytes per wait. The waits themselves follow the polar route's products,
///   which depend on the spectrum of `M` (the data), not on `n`;
/// - the weighted Grams are r x r over n, one dispatch each, exactly one
///   per iteration (the candidate's `M`; the extrapolated point's is a
///   combination of cached ones), their weights resident;
/// - allocations: none at either size (every output and scratch of an
///   iteration is a matrix of the resident solve's workspace pool, which
///   has filled by iteration K1);
/// - submissions: every one is the work recorded before a read-back or the
///   read-back's copy, two per wait, whatever `n`; the waits per iteration
///   are at most [`PSD_WAITS_PER_ITERATION`] (they depend on the data, which
///   decide where the remainder bound fails, not on `n`).
#[test]
fn psd_density_counters_per_iteration_at_two_sizes() {
    use gramian::psd::{BaseMeasure, DensityParams, PositivePartRoute, Regularisation, SolverOptions};
    let Some(gpu) = device() else { return };
    let (d, m, (k1, k2)) = (3usize, 30usize, (6usize, 12usize));
    for n in [211usize, 409] {
        let x = uniform(n, d) * 0.5;
        let fit = |iterations: usize| {
            let params = DensityParams::new(Kernel::gaussian_with_width(0.8).unwrap()).unwrap()
                .regularisation(Regularisation::new().trace(1e-3).quadratic(1e-4))
                .base_measure(BaseMeasure::isotropic_gaussian(d, 2.0).unwrap())
                .nystrom(m, 3)
                .positive_part(PositivePartRoute::Polar)
                .solver(SolverOptions { tolerance: 1e-14, max_iterations: iterations, check_every: 2 });
            counted(&gpu, || assert!(matches!(params.fit(&gpu, &x), Err(gramian::Error::NotConverged { .. }))))
        };
        let c = fit(k2).since(&fit(k1));
        print("psd per iteration", n, &c);
        let (n64, r, per) = (n as u64, m as u64, (k2 - k1) as f64);
        let t = c.transfers;
        let grams = c.class(ShapeKind::WeightedGram, Precision::F64);
        eprintln!(
            "per iteration (n = {n}, r = {r}): {:.2} waits, {:.1} bytes up, {:.1} bytes down, {:.2} weighted Grams, {:.2} dispatches",
            c.waits as f64 / per, t.host_to_device_bytes as f64 / per, t.device_to_host_bytes as f64 / per, grams.dispatches as f64 / per, t.dispatches as f64 / per
        );
        assert_eq!(grams.dispatches, (k2 - k1) as u64, "{c:?}");
        assert_eq!(grams.flops, 3 * n64 * r * r * grams.dispatches, "{c:?}");
        assert_eq!((t.uploads, t.host_to_device_bytes), (0, 0), "{c:?}");
        assert!(c.waits > 0 && t.device_to_host_bytes <= 16 * r * c.waits, "{c:?}");
        eprintln!("per iteration (n = {n}): {:.2} allocations, {:.2} submissions, {:.2} waits", c.allocations as f64 / per, t.submissions as f64 / per, c.waits as f64 / per);
        assert_eq!(c.allocations, 0, "{c:?}");
        assert_eq!(t.submissions, 2 * c.waits, "{c:?}");
        assert!(c.waits <= PSD_WAITS_PER_ITERATION * (k2 - k1) as u64, "{c:?}");
    }
}

/// What crosses per iteration of the quantile regression's dual on a GPU
/// with `f64` on the polar route, where `M_q`, `[M_q]_+` and FISTA's state
/// (three blocks as the columns of `n x 3` matrices, two PSD parts with
/// couplings `-1` and `+1`, the linear part on all levels) are resident:
/// the counters of a fit stopped after K2 iterations less those of the same
/// fit stopped after K1 < K2 (as for the density above), at two sizes
/// whose problems are the same: the samples of the smaller one each taken
/// twice (the mean pinball loss is the same function of the curves, the
/// dual point at `2n` is the one at `n` halved and duplicated, the step
/// halved, so FISTA takes the same decisions, on the same centres):
///
/// - up: nothing at either size;
/// - down: the same bytes per iteration at both sizes (every wait reads
///   `O(r)` numbers: the polar route's norms and traces, FISTA's inner
///   products with the two parts' and the linear part's remainder terms,
///   the linear energy, the loss sums of an objective or a gap check),
///   at most `16 r` bytes per wait, and the same waits;
/// - weighted Grams: one per PSD part and candidate, the same at both sizes;
/// - allocations: none (the workspace's pool has filled by iteration K1 =
///   20; before that, a shape first needed late, such as the scratch of a
///   sum over more vectors, still allocates); submissions: two per wait;
/// - waits: at most [`PSD_QUANTILE_WAITS_PER_CANDIDATE`] per candidate (one
///   per iteration, more where backtracking shortens the step) and one gap
///   check per iteration.
#[test]
fn psd_quantile_counters_per_iteration_at_two_sizes() {
    use gramian::psd::engine::{EngineProblem, LinearPart};
    use gramian::psd::features::{EmpiricalFeatures, Features};
    use gramian::psd::positive_part::PositivePartSolver;
    use gramian::psd::regression::PinballLoss;
    use gramian::psd::SolverOptions;
    let Some(gpu) = device() else { return };
    let (m, (k1, k2), parts) = (30usize, (20usize, 26usize), 2u64);
    let small = uniform(211, 1) * 0.5;
    let centres = small.rows(0, m).into_owned();
    let features = EmpiricalFeatures::new(&centres, 0.3).unwrap();
    let mut per_size = Vec::new();
    for copies in [1usize, 2] {
        let n = copies * small.nrows();
        let x = DMatrix::from_fn(n, 1, |i, _| small[(i % small.nrows(), 0)]);
        let y = DVector::from_fn(n, |i, _| (3.0 * x[(i, 0)]).sin() + 0.3 * x[(i, 0)] * x[(i, 0)]);
        let loss = PinballLoss { targets: y, levels: vec![0.2, 0.5, 0.8] };
        let phi = features.resident_features(&gpu, &gpu.upload(&x, Precision::F64).unwrap()).unwrap();
        let fit = |iterations: usize| {
            let problem = EngineProblem {
                features: Features::Resident { device: &gpu, phi: &phi },
                parts: vec![vec![-1.0, 0.0, 0.0], vec![0.0, 0.0, 1.0]],
                linear: Some(LinearPart { coupling: vec![1.0; 3], lambda0: 1e-2 }),
                integral: None,
                loss: &loss,
                lambda1: 1e-3,
                lambda2: 1e-4,
            };
            let options = SolverOptions { tolerance: 1e-14, max_iterations: iterations, check_every: 2 };
            counted(&gpu, || assert!(matches!(problem.solve_with(&options, PositivePartSolver::polar()), Err(gramian::Error::NotConverged { .. }))))
        };
        let c = fit(k2).since(&fit(k1));
        print("quantile per iteration", n, &c);
        let (r, per) = (m as u64, (k2 - k1) as f64);
        let t = c.transfers;
        let grams = c.class(ShapeKind::WeightedGram, Precision::F64);
        eprintln!(
            "quantile per iteration (n = {n}, r = {r}): {:.2} waits, {:.1} bytes up, {:.1} bytes down, {:.2} weighted Grams, {:.2} dispatches, {:.2} allocations",
            c.waits as f64 / per, t.host_to_device_bytes as f64 / per, t.device_to_host_bytes as f64 / per, grams.dispatches as f64 / per, t.dispatches as f64 / per, c.allocations as f64 / per
        );
        assert_eq!((t.uploads, t.host_to_device_bytes), (0, 0), "{c:?}");
        assert!(c.waits > 0 && t.device_to_host_bytes <= 16 * r * c.waits, "{c:?}");
        assert!(grams.dispatches >= parts * (k2 - k1) as u64 && grams.dispatches % parts == 0, "{c:?}");
        assert_eq!(c.allocations, 0, "{c:?}");
        assert_eq!(t.submissions, 2 * c.waits, "{c:?}");
        // One candidate per iteration but where backtracking shortened the step.
        let candidates = grams.dispatches / parts;
        assert!(c.waits <= PSD_QUANTILE_WAITS_PER_CANDIDATE * candidates + (k2 - k1) as u64, "{c:?}");
        per_size.push((c.waits, t.device_to_host_bytes, grams.dispatches));
    }
    assert_eq!(per_size[0], per_size[1], "(waits, bytes down, weighted Grams) at n and 2n");
}

/// Read-backs (waits) per candidate of the resident quantile fit, for its
/// two PSD parts and the linear part, at most: the polar route's two per
/// part at the extrapolated point (`||M||_F` with `||M^2||_F`, then `tr P`
/// with `||P||_F`), the linear energy's one there and the step's one; where
/// the remainder bound fails, the polar route's two per part at the
/// candidate, the linear energy's and the loss sums' one (the objective of
/// an accepted candidate). A gap check adds one per iteration at most.
/// Independent of `n`.
const PSD_QUANTILE_WAITS_PER_CANDIDATE: u64 = 2 * 2 + 1 + 1 + 2 * 2 + 1 + 1;

/// Read-backs (waits) of an iteration of the resident density fit with one
/// candidate (one weighted Gram per iteration, asserted above), at most:
/// the polar route's two at the extrapolated point (`||M||_F` with
/// `||M^2||_F`, then `tr P` with `||P||_F`) and the step's one; where the
/// remainder bound fails, the polar route's two at the candidate and the
/// loss sums' one (its objective); a gap check one. Independent of `n` and
/// of the polar route's number of steps.
const PSD_WAITS_PER_ITERATION: u64 = 2 + 1 + 2 + 1 + 1;
