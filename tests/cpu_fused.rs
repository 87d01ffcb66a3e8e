//! The fused, blocked CPU kernel matrix and kernel matvec against
//! the pointwise reference `Kernel::eval` (direct sum over features, libm
//! `exp`/`tanh`/`powi`), on awkward shapes: 1, primes, and sizes that are not
//! multiples of the tile sizes (256 x 128 for the matrix, 256 x 256 for the
//! matvec), in f64 and f32. Seeded; no timings.
//!
//! Tolerances: f64 kernel values within `1e-11` absolute of the reference
//! (values are at most 1 in magnitude for RBF/Laplacian/sigmoid; polynomial
//! and linear relative to the largest entry), the matvec within `1e-12`
//! relative Frobenius error of the dense product; f32 within `2e-5` (matrix)
//! and `2e-4` (matvec, whose random-sign sums cancel; norms floored at
//! 1e-30, below which f32 has flushed the kernel values to 0).

use gramian::kernel::{kernel_matrix_cpu, kernel_matvec_cpu};
use gramian::linalg::{convert, exp_nonpositive_f32, exp_nonpositive_f32_block, exp_nonpositive_f32_table, exp_nonpositive_f64, exp_nonpositive_f64_block, exp_nonpositive_f64_table, relative_frobenius_error, table_exp_available, Real};
use gramian::{Error, Device, Kernel};
use nalgebra::DMatrix;
use rand::{rngs::StdRng, Rng, SeedableRng};

fn random(rng: &mut StdRng, r: usize, c: usize) -> DMatrix<f64> {
    DMatrix::from_fn(r, c, |_, _| rng.random_range(-1.0..1.0))
}

fn kernels(d: usize) -> Vec<Kernel> {
    let g = 1.0 / d as f64;
    vec![
        Kernel::rbf(g).unwrap(),
        Kernel::rbf(7.0).unwrap(),
        Kernel::laplacian(0.8).unwrap(),
        Kernel::linear(),
        Kernel::polynomial(g, 1.0, 3).unwrap(),
        Kernel::sigmoid(g, -0.2).unwrap(),
    ]
}

fn reference(kernel: &Kernel, x: &DMatrix<f64>, z: &DMatrix<f64>) -> DMatrix<f64> {
    DMatrix::from_fn(x.nrows(), z.nrows(), |i, j| {
        let xi: Vec<f64> = x.row(i).iter().copied().collect();
        let zj: Vec<f64> = z.row(j).iter().copied().collect();
        kernel.eval(&xi, &zj).unwrap()
    })
}

/// (n, m, d): single entries, primes, one past and one short of the tiles.
const SHAPES: [(usize, usize, usize); 8] =
    [(1, 1, 1), (1, 300, 3), (300, 1, 5), (7, 13, 67), (257, 129, 17), (131, 383, 2), (255, 127, 64), (513, 257, 11)];

#[test]
fn fused_kernel_matrix_matches_pointwise_reference() {
    let mut rng = StdRng::seed_from_u64(17);
    for (n, m, d) in SHAPES {
        let x = random(&mut rng, n, d);
        let mut z = random(&mut rng, m, d);
        // Near-duplicate pairs exercise the cancellation fix-up.
        for i in 0..n.min(m).min(5) {
            for c in 0..d {
                z[(i, c)] = x[(i, c)] + 1e-9 * (c as f64 + 1.0);
            }
        }
        for kernel in kernels(d) {
            let want = reference(&kernel, &x, &z);
            let scale = want.amax().max(1.0);
            let got = kernel_matrix_cpu(&kernel, &x, &z).unwrap();
            let err = (&got - &want).amax() / scale;
            assert!(err < 1e-11, "f64 {kernel:?} n {n} m {m} d {d}: {err:e}");
            let got32 = kernel_matrix_cpu(&kernel, &convert::<f64, f32>(&x), &convert::<f64, f32>(&z)).unwrap();
            let err32 = (&convert::<f32, f64>(&got32) - &want).amax() / scale;
            assert!(err32 < 2e-5, "f32 {kernel:?} n {n} m {m} d {d}: {err32:e}");
        }
    }
}

#[test]
fn fused_kernel_matrix_of_duplicates_has_unit_diagonal() {
    let mut rng = StdRng::seed_from_u64(3);
    let x = random(&mut rng, 301, 40).map(|v| v * 50.0);
    let k = kernel_matrix_cpu(&Kernel::rbf(0.3).unwrap(), &x, &x).unwrap();
    for i in 0..301 {
        assert_eq!(k[(i, i)], 1.0);
    }
    assert!((&k - k.transpose()).amax() < 1e-15);
}

#[test]
fn fused_kernel_matvec_matches_dense_product() {
    let mut rng = StdRng::seed_from_u64(29);
    // Besides SHAPES: few row blocks and many column blocks (the columns are
    // split between tasks and the partial outputs summed).
    let mut shapes = SHAPES.to_vec();
    shapes.extend([(5, 1031, 4), (600, 769, 9)]);
    for (n, m, d) in shapes {
        let x = random(&mut rng, n, d);
        let z = random(&mut rng, m, d);
        for c in [1usize, 3] {
            let v = random(&mut rng, m, c);
            for kernel in kernels(d) {
                let want = reference(&kernel, &x, &z) * &v;
                let got = kernel_matvec_cpu(&kernel, &x, &z, &v).unwrap();
                let err = relative_frobenius_error(&got, &want);
                assert!(err < 1e-12, "f64 {kernel:?} n {n} m {m} d {d} c {c}: {err:e}");
                let got32 = kernel_matvec_cpu(&kernel, &convert::<f64, f32>(&x), &convert::<f64, f32>(&z), &convert::<f64, f32>(&v)).unwrap();
                // Floor 1e-30: f32 underflows exp(s) below e^-87 to 0.
                let err32 = (&convert::<f32, f64>(&got32) - &want).norm() / (want.norm() + 1e-30);
                assert!(err32 < 2e-4, "f32 {kernel:?} n {n} m {m} d {d} c {c}: {err32:e}");
            }
        }
    }
}

/// The exponential of every slice pass: the AVX-512 table method where the
/// CPU has AVX-512F (bit for bit its scalar form), the portable blocked one
/// elsewhere (bit for bit the scalar `exp_nonpositive_*`); every slice
/// length, so that full vectors, blocks and tails are all covered.
#[test]
fn dispatched_exp_is_bit_identical_to_its_scalar_form() {
    let table = table_exp_available();
    let mut rng = StdRng::seed_from_u64(53);
    let mut xs: Vec<f64> = (0..10_007).map(|i| -(i as f64) * 0.0711).collect();
    xs.extend((0..3000).map(|_| -rng.random_range(0.0..720.0)));
    xs.extend([0.0, -0.0, -708.0, -708.0000001, -707.9999999, -1e300, f64::NEG_INFINITY]);
    let scalar64 = |x: f64| if table { exp_nonpositive_f64_table(x) } else { exp_nonpositive_f64(x) };
    let scalar32 = |x: f32| if table { exp_nonpositive_f32_table(x) } else { exp_nonpositive_f32(x) };
    let mut v = xs.clone();
    f64::exp_nonpositive_in_place(&mut v);
    for (x, y) in xs.iter().zip(&v) {
        assert_eq!(y.to_bits(), scalar64(*x).to_bits(), "exp({x})");
    }
    let xs32: Vec<f32> = xs.iter().map(|&x| x as f32).collect();
    let mut v32 = xs32.clone();
    f32::exp_nonpositive_in_place(&mut v32);
    for (x, y) in xs32.iter().zip(&v32) {
        assert_eq!(y.to_bits(), scalar32(*x).to_bits(), "exp({x})");
    }
    // Every length up to two portable blocks, at every offset parity.
    for len in 0..=130 {
        let start = len % 3;
        let mut w = xs[start..start + len].to_vec();
        f64::exp_nonpositive_in_place(&mut w);
        assert!(w.iter().zip(&xs[start..]).all(|(y, &x)| y.to_bits() == scalar64(x).to_bits()), "f64 length {len}");
        let mut w32 = xs32[start..start + len].to_vec();
        f32::exp_nonpositive_in_place(&mut w32);
        assert!(w32.iter().zip(&xs32[start..]).all(|(y, &x)| y.to_bits() == scalar32(x).to_bits()), "f32 length {len}");
    }
}

/// The table method (its scalar form, which the vector code equals bit for
/// bit) against libm: f64 within 4e-16 relative on [-708, 0], f32 within
/// 3.6e-7 (3 ulp) of the exact exponential of the f32 argument on [-87, 0];
/// 0 below the cut-offs, 1 at 0, NaN stays NaN.
#[test]
fn table_exp_is_accurate() {
    let (mut worst64, mut worst32) = (0.0f64, 0.0f64);
    let mut rng = StdRng::seed_from_u64(59);
    let mut xs: Vec<f64> = (0..400_001).map(|i| -(i as f64) * 708.0 / 400_000.0).collect();
    xs.extend((0..100_000).map(|_| -rng.random_range(0.0..708.0)));
    xs.extend((0..100_000).map(|_| -rng.random_range(0.0..1.0)));
    for x in xs {
        let exact = x.exp();
        worst64 = worst64.max(((exp_nonpositive_f64_table(x) - exact) / exact).abs());
        if x >= -87.0 {
            let x32 = x as f32;
            let e32 = (x32 as f64).exp();
            worst32 = worst32.max(((exp_nonpositive_f32_table(x32) as f64 - e32) / e32).abs());
        }
    }
    assert!(worst64 < 4e-16, "f64 relative error {worst64:e}");
    assert!(worst32 < 3.6e-7, "f32 relative error {worst32:e}");
    assert_eq!((exp_nonpositive_f64_table(0.0), exp_nonpositive_f64_table(-0.0)), (1.0, 1.0));
    assert_eq!((exp_nonpositive_f64_table(-708.5), exp_nonpositive_f64_table(f64::NEG_INFINITY)), (0.0, 0.0));
    assert_eq!((exp_nonpositive_f32_table(0.0), exp_nonpositive_f32_table(-87.5)), (1.0, 0.0));
    assert!(exp_nonpositive_f64_table(f64::NAN).is_nan() && exp_nonpositive_f32_table(f32::NAN).is_nan());
    let mut v = vec![f64::NAN; 9];
    f64::exp_nonpositive_in_place(&mut v);
    assert!(v.iter().all(|y| y.is_nan()));
    println!("table exp: f64 worst {worst64:e}, f32 worst {worst32:e}");
}

#[test]
fn block_exp_is_bit_identical_to_the_scalar_one() {
    // Fresh random arguments over the whole range, and the edges: 0, -0,
    // the underflow cut-offs and beyond, -inf.
    let mut rng = StdRng::seed_from_u64(41);
    for round in 0..200 {
        let mut v: [f64; 32] = std::array::from_fn(|_| -rng.random_range(0.0..750.0));
        if round == 0 {
            v[..8].copy_from_slice(&[0.0, -0.0, -708.0, -708.0000001, -707.9999999, -745.2, -1e300, f64::NEG_INFINITY]);
        }
        let want: Vec<u64> = v.iter().map(|&x| exp_nonpositive_f64(x).to_bits()).collect();
        exp_nonpositive_f64_block(&mut v);
        assert_eq!(v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), want);
        let mut w: [f32; 64] = std::array::from_fn(|_| -rng.random_range(0.0f32..95.0));
        if round == 0 {
            w[..7].copy_from_slice(&[0.0, -0.0, -87.0, -87.00001, -86.99999, -1e30, f32::NEG_INFINITY]);
        }
        let want: Vec<u32> = w.iter().map(|&x| exp_nonpositive_f32(x).to_bits()).collect();
        exp_nonpositive_f32_block(&mut w);
        assert_eq!(w.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), want);
    }
}

/// Outputs of at least 8 MiB take the huge-page allocation; their entries
/// (checked against the pointwise reference on a strided sample, every tile
/// represented) must be as in the small shapes.
#[test]
fn fused_kernel_matrix_on_huge_page_outputs_matches_pointwise_reference() {
    let mut rng = StdRng::seed_from_u64(43);
    let (n, m, d) = (1601, 803, 9); // 10.3 MB in f64, 5.1 MB in f32 (not advised)
    let x = random(&mut rng, n, d);
    let z = random(&mut rng, m, d);
    let (x32, z32) = (convert::<f64, f32>(&x), convert::<f64, f32>(&z));
    let big_x32 = convert::<f64, f32>(&random(&mut rng, 2 * n, d)); // 10.3 MB in f32
    for kernel in [Kernel::rbf(1.0 / d as f64).unwrap(), Kernel::laplacian(0.8).unwrap(), Kernel::polynomial(0.5, 1.0, 2).unwrap()] {
        let got = kernel_matrix_cpu(&kernel, &x, &z).unwrap();
        let got32 = kernel_matrix_cpu(&kernel, &x32, &z32).unwrap();
        let big32 = kernel_matrix_cpu(&kernel, &big_x32, &z32).unwrap();
        for i in (0..n).step_by(7) {
            for j in (0..m).step_by(5) {
                let xi: Vec<f64> = x.row(i).iter().copied().collect();
                let zj: Vec<f64> = z.row(j).iter().copied().collect();
                let want = kernel.eval(&xi, &zj).unwrap();
                let scale = want.abs().max(1.0);
                assert!((got[(i, j)] - want).abs() / scale < 1e-11, "f64 {kernel:?} ({i}, {j})");
                assert!((got32[(i, j)] as f64 - want).abs() / scale < 2e-5, "f32 {kernel:?} ({i}, {j})");
                let bi: Vec<f32> = big_x32.row(2 * i + 1).iter().copied().collect();
                let zj32: Vec<f32> = z32.row(j).iter().copied().collect();
                let want32 = kernel.eval(&bi, &zj32).unwrap();
                assert!((big32[(2 * i + 1, j)] - want32).abs() / want32.abs().max(1.0) < 2e-5, "big f32 {kernel:?} ({i}, {j})");
            }
        }
    }
}

/// Finite inputs whose kernel overflows give `Overflow` (for the linear
/// kernel at the first non-finite entry in column-major order), found by
/// the per-tile check, in the matrix (both CPU entry points) and the
/// matvec, for bad tiles anywhere.
#[test]
fn overflowing_kernel_matrix_is_a_typed_error_at_the_first_entry() {
    let mut rng = StdRng::seed_from_u64(47);
    for (n, m, bad) in [(9, 7, [(4, 2), (8, 6)]), (700, 450, [(650, 300), (3, 449)])] {
        let mut x = random(&mut rng, n, 3);
        let mut z = random(&mut rng, m, 3);
        for &(i, j) in &bad {
            x[(i, 0)] = 1e200;
            z[(j, 0)] = 1e200;
        }
        // <x_i, z_j> = 1e400 exactly where both are large: four entries
        // (the two bad rows against the two bad columns); the first in
        // column-major order is at the smaller column.
        let (col, rows): (usize, Vec<usize>) = (bad.iter().map(|b| b.1).min().unwrap(), bad.iter().map(|b| b.0).collect());
        let want = Error::Overflow { what: "kernel matrix", row: *rows.iter().min().unwrap(), col };
        let linear = Kernel::linear();
        assert_eq!(kernel_matrix_cpu(&linear, &x, &z).unwrap_err(), want, "{n} x {m}");
        assert_eq!(Device::Cpu.kernel_matrix(&linear, &x, &z).unwrap_err(), want, "{n} x {m}");
        // Squared, whole bad rows and columns overflow: some Overflow.
        let square = Kernel::polynomial(1.0, 1.0, 2).unwrap();
        assert!(matches!(kernel_matrix_cpu(&square, &x, &z), Err(Error::Overflow { what: "kernel matrix", .. })), "{n} x {m}");
        let v = random(&mut rng, m, 1);
        for kernel in [linear, square] {
            assert!(matches!(kernel_matvec_cpu(&kernel, &x, &z, &v), Err(Error::Overflow { .. })), "{kernel:?} {n} x {m}");
        }
        // The distance-based kernels stay finite (the squared distance is
        // at most infinite, and exp(-inf) = 0).
        let k = kernel_matrix_cpu(&Kernel::rbf(0.5).unwrap(), &x, &z).unwrap();
        assert!(k.iter().all(|v| v.is_finite()));
    }
}
