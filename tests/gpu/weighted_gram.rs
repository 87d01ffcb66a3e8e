//! The weighted Gram `Phi^T diag(w) Phi` on a GPU runs as a triangle: only
//! the output tiles on and below the diagonal, each element written at both
//! of its places. Checked against a CPU f64 reference on fresh random inputs
//! (r = 1, r not a multiple of the tile, r spanning several tiles, a depth
//! long enough for split-K, features cut into several buffers by a small
//! binding limit), for exact symmetry, and by the counters: the flops are
//! those of the triangle's tiles, about half of the full product's.
//!
//! Tolerance: every entry within `1e-12` of the sum of the absolute values
//! of its terms (`sum_k |phi_ki w_k phi_kj|`): f64 sums of at most 5000
//! terms, in blocks and chunks, stay within `n eps ~ 5.6e-13` of it.

use crate::common;

use common::{gpu_device, rng};
use gramian::gpu::ShapeKind;
use gramian::{Device, GpuOptions, Precision};
use nalgebra::{DMatrix, DVector};
use rand::Rng;

/// `(Phi^T diag(w) Phi, |Phi|^T diag(|w|) |Phi|)` summed in f64 over the samples.
fn reference(phi: &DMatrix<f64>, w: &DVector<f64>) -> (DMatrix<f64>, DMatrix<f64>) {
    let r = phi.ncols();
    let (mut g, mut bound) = (DMatrix::zeros(r, r), DMatrix::zeros(r, r));
    for k in 0..phi.nrows() {
        let row = phi.row(k);
        g += row.transpose() * row * w[k];
        let a = row.abs();
        bound += a.transpose() * a * w[k].abs();
    }
    (g, bound)
}

/// Tile rows and columns of the product variant forced for f64.
fn f64_tiles(gpu: &Device) -> (usize, usize) {
    let Device::Gpu(ctx) = gpu else { unreachable!() };
    let v = ctx.product_variants().into_iter().find(|v| v.precision == Precision::F64).expect("an f64 variant");
    ctx.force_variant(Some(v.name)).unwrap();
    (v.tile_rows(), v.tile_cols())
}

/// Elements of the tiles on and below the diagonal of an `r x r` output in
/// `tr x tc` tiles, and the number of those tiles.
fn triangle(r: usize, tr: usize, tc: usize) -> (u64, u64) {
    let columns = r.div_ceil(tc);
    let (mut elements, mut tiles) = (0, 0);
    for b in 0..r.div_ceil(tr) {
        let here = ((b + 1) * tr).div_ceil(tc).min(columns);
        tiles += here as u64;
        elements += ((r - b * tr).min(tr) * (here * tc).min(r)) as u64;
    }
    (elements, tiles)
}

/// `symmetric`: the triangle ran (the output in one buffer), so the result is exactly symmetric.
fn check(gpu: &Device, n: usize, r: usize, symmetric: bool, what: &str) {
    let mut rng = rng();
    let phi = DMatrix::from_fn(n, r, |_, _| rng.random_range(-1.0..1.0));
    let w = DVector::from_fn(n, |_, _| rng.random_range(-1.0..2.0));
    let (want, bound) = reference(&phi, &w);
    let (pd, wd) = (gpu.upload(&phi, Precision::F64).unwrap(), gpu.upload_vector(&w, Precision::F64).unwrap());
    let got = gpu.to_host(&gpu.resident_weighted_gram(&pd, &wd).unwrap()).unwrap();
    for j in 0..r {
        for i in 0..r {
            let err = (got[(i, j)] - want[(i, j)]).abs();
            assert!(err <= 1e-12 * bound[(i, j)], "{what} n = {n}, r = {r}: entry ({i}, {j}) {} against {} (bound {:e})", got[(i, j)], want[(i, j)], bound[(i, j)]);
            assert!(!symmetric || got[(i, j)] == got[(j, i)], "{what} n = {n}, r = {r}: not exactly symmetric at ({i}, {j})");
        }
    }
    // Accumulating into a matrix that is not symmetric adds the Gram to each entry.
    let start = DMatrix::from_fn(r, r, |_, _| rng.random_range(-1.0..1.0));
    let out = gpu.upload(&start, Precision::F64).unwrap();
    gpu.resident_weighted_gram_into(&pd, &wd, &out, true).unwrap();
    let acc = gpu.to_host(&out).unwrap();
    for j in 0..r {
        for i in 0..r {
            let err = (acc[(i, j)] - start[(i, j)] - want[(i, j)]).abs();
            assert!(err <= 1e-12 * (bound[(i, j)] + start[(i, j)].abs()), "{what} accumulated n = {n}, r = {r}: entry ({i}, {j})");
        }
    }
}

#[test]
fn the_weighted_gram_triangle_matches_the_cpu_f64_reference() {
    let Some(gpu) = gpu_device(GpuOptions::default()) else { return };
    if !gpu.supports(Precision::F64) {
        return;
    }
    f64_tiles(&gpu);
    // r = 1; r below, at and past the tile (64 for the f64 default); a
    // depth past 2 x 2048 (split-K).
    for (n, r) in [(1, 1), (300, 1), (97, 13), (130, 64), (200, 65), (150, 129), (5000, 70)] {
        check(&gpu, n, r, true, "one buffer");
    }
    // Features cut into several buffers (64 KiB bindings): the depth is cut
    // at their boundaries; an output over several buffers (r = 100: 80 KB)
    // takes the full product.
    let Some(small) = gpu_device(GpuOptions { max_tile_bytes: Some(1 << 16), ..GpuOptions::default() }) else { return };
    f64_tiles(&small);
    for (n, r, symmetric) in [(2000, 30, true), (5000, 70, true), (900, 100, false)] {
        check(&small, n, r, symmetric, "64 KiB bindings");
    }
}

/// The counters of one weighted Gram of `Phi` n x r: the triangle's tiles
/// as workgroups, `3 n E` flops for the `E` elements of those tiles, about
/// half the `3 n r^2` of the full product (`E / r^2 = 1/2 + t / (2 r)` for
/// tiles of side `t` dividing `r`).
#[test]
fn the_weighted_gram_counts_half_the_flops_of_the_full_product() {
    let Some(gpu) = gpu_device(GpuOptions::default()) else { return };
    if !gpu.supports(Precision::F64) {
        return;
    }
    let (tr, tc) = f64_tiles(&gpu);
    let mut rng = rng();
    for (n, r) in [(60usize, 1usize), (40, 200), (30, 1000)] {
        let phi = DMatrix::from_fn(n, r, |_, _| rng.random_range(-1.0..1.0));
        let w = DVector::from_fn(n, |_, _| rng.random_range(0.0..1.0));
        let (pd, wd) = (gpu.upload(&phi, Precision::F64).unwrap(), gpu.upload_vector(&w, Precision::F64).unwrap());
        gpu.reset_device_counters();
        gpu.resident_weighted_gram(&pd, &wd).unwrap();
        let c = gpu.device_counters();
        let g = c.class(ShapeKind::WeightedGram, Precision::F64);
        let (elements, tiles) = triangle(r, tr, tc);
        assert_eq!((g.dispatches, g.workgroups, g.flops), (1, tiles, 3 * n as u64 * elements), "n = {n}, r = {r}: {c:?}");
        let full = 3.0 * (n * r * r) as f64;
        let ratio = g.flops as f64 / full;
        eprintln!("weighted Gram {r} x {n}: {} flops, {ratio:.3} of the full product's; {tiles} workgroups (full: {})", g.flops, r.div_ceil(tr) * r.div_ceil(tc));
        if r >= 4 * tr {
            assert!(ratio >= 0.5 && ratio <= 0.5 + tr as f64 / r as f64, "r = {r}: {ratio}");
        }
    }
}

/// A weighted Gram over a long depth is split over it (split-K) while its
/// triangle has fewer workgroups than the fill target of 8 per SM of a
/// 132-SM card: r = 130 in tiles of 64 is a triangle of 6 tiles, and
/// n = 8192 = 4 x 2048 samples give 4 chunks of at least 2048, so 4
/// dispatches of 6 workgroups and one reduction of the 4 partials; the flops
/// are the triangle's, the result the CPU's.
#[test]
fn a_long_weighted_gram_is_split_over_the_depth_and_counted() {
    let Some(gpu) = gpu_device(GpuOptions::default()) else { return };
    if !gpu.supports(Precision::F64) {
        return;
    }
    let (tr, tc) = f64_tiles(&gpu);
    let (n, r) = (8192usize, 130usize);
    let (elements, tiles) = triangle(r, tr, tc);
    let mut rng = rng();
    let phi = DMatrix::from_fn(n, r, |_, _| rng.random_range(-1.0..1.0));
    let w = DVector::from_fn(n, |_, _| rng.random_range(0.0..1.0));
    let (pd, wd) = (gpu.upload(&phi, Precision::F64).unwrap(), gpu.upload_vector(&w, Precision::F64).unwrap());
    gpu.reset_device_counters();
    let got = gpu.to_host(&gpu.resident_weighted_gram(&pd, &wd).unwrap()).unwrap();
    let c = gpu.device_counters();
    let g = c.class(ShapeKind::WeightedGram, Precision::F64);
    let chunks = ((8 * 132) / tiles as usize).min(n / 2048) as u64;
    assert_eq!((g.dispatches, g.workgroups, g.flops), (chunks, chunks * tiles, 3 * n as u64 * elements), "{c:?}");
    assert_eq!(c.class(ShapeKind::RowReduce, Precision::F64).dispatches, 1, "{c:?}");
    let (want, bound) = reference(&phi, &w);
    for j in 0..r {
        for i in 0..r {
            assert!((got[(i, j)] - want[(i, j)]).abs() <= 1e-12 * bound[(i, j)], "entry ({i}, {j})");
            assert_eq!(got[(i, j)], got[(j, i)]);
        }
    }
}
