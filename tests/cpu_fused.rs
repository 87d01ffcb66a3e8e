//! The fused, blocked CPU kernel matrix and kernel matvec (issue 17) against
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
use gramian::linalg::{convert, exp_nonpositive_f32, exp_nonpositive_f64, relative_frobenius_error, Real};
use gramian::Kernel;
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
        kernel.eval(&xi, &zj)
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

#[test]
fn dispatched_exp_is_bit_identical_to_the_scalar_one() {
    let xs: Vec<f64> = (0..10_007).map(|i| -(i as f64) * 0.0711).collect();
    let mut v = xs.clone();
    f64::exp_nonpositive_in_place(&mut v);
    for (x, y) in xs.iter().zip(&v) {
        assert_eq!(y.to_bits(), exp_nonpositive_f64(*x).to_bits(), "exp({x})");
    }
    let xs32: Vec<f32> = xs.iter().map(|&x| x as f32).collect();
    let mut v32 = xs32.clone();
    f32::exp_nonpositive_in_place(&mut v32);
    for (x, y) in xs32.iter().zip(&v32) {
        assert_eq!(y.to_bits(), exp_nonpositive_f32(*x).to_bits(), "exp({x})");
    }
}
