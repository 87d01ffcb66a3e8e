//! Kernel matrices and kernel matvecs of sparse CSR inputs against the
//! dense CPU path on the dense copies, for every kernel, on seeded random
//! data of several densities (0, 4 %, 30 %, 100 %) with empty rows, and the
//! typed errors of bad sparse inputs.
//!
//! Tolerances: `f64` within `1e-12` relative Frobenius error of the dense
//! result (the two differ only in the summation order of the inner
//! products), `f32` within `1e-5`.

use gramian::linalg::relative_frobenius_error;
use gramian::sparse::{kernel_matrix_sparse_cpu, CsrMatrix};
use gramian::{Device, Error, Kernel};
use nalgebra::DMatrix;
use rand::{rngs::StdRng, Rng};

use crate::common;

/// n x d with each entry non-zero (uniform in [-1, 1)) with probability
/// `density`, and every fifth row all zero.
fn random_sparse(rng: &mut StdRng, n: usize, d: usize, density: f64) -> DMatrix<f64> {
    DMatrix::from_fn(n, d, |i, _| if i % 5 != 3 && rng.random::<f64>() < density { rng.random_range(-1.0..1.0) } else { 0.0 })
}

fn kernels(d: usize) -> Vec<Kernel> {
    let g = 1.0 / d as f64;
    vec![
        Kernel::rbf(g).unwrap(),
        Kernel::rbf(5.0).unwrap(),
        Kernel::laplacian(0.8).unwrap(),
        Kernel::linear(),
        Kernel::polynomial(g, 1.0, 3).unwrap(),
        Kernel::sigmoid(g, -0.2).unwrap(),
    ]
}

/// `|a - b|_F <= tol |b|_F`, also for an all-zero `b`.
fn assert_close(a: &DMatrix<f64>, b: &DMatrix<f64>, tol: f64, what: &str) {
    let diff = (a - b).norm();
    assert!(diff <= tol * b.norm(), "{what}: |a - b| = {diff:e}, |b| = {:e}", b.norm());
}

#[test]
fn sparse_kernel_matrix_equals_dense_for_every_kernel() {
    let mut rng = common::rng();
    let device = Device::cpu();
    // 300 rows of X: two row blocks of the matvec; 70 rows of Z: two column
    // blocks of the matrix.
    for &(n, m, d) in &[(300usize, 70usize, 400usize), (1, 1, 1), (7, 3, 2)] {
        for &density in &[0.0, 0.04, 0.3, 1.0] {
            let (xd, zd) = (random_sparse(&mut rng, n, d, density), random_sparse(&mut rng, m, d, density));
            let (xs, zs) = (CsrMatrix::from(&xd), CsrMatrix::from(&zd));
            for kernel in kernels(d) {
                let what = format!("{kernel:?}, {n} x {m} x {d}, density {density}");
                let dense = device.kernel_matrix(&kernel, &xd, &zd).unwrap();
                let sparse = device.kernel_matrix_sparse(&kernel, &xs, &zs).unwrap();
                assert_close(&sparse, &dense, 1e-12, &what);
                let sym = device.kernel_matrix_sparse(&kernel, &xs, &xs).unwrap();
                assert_close(&sym, &device.kernel_matrix(&kernel, &xd, &xd).unwrap(), 1e-12, &what);
            }
        }
    }
}

#[test]
fn sparse_kernel_matrix_equals_dense_in_f32() {
    let mut rng = common::rng();
    let (xd, zd) = (random_sparse(&mut rng, 40, 120, 0.1), random_sparse(&mut rng, 30, 120, 0.1));
    let (xf, zf): (DMatrix<f32>, DMatrix<f32>) = (xd.map(|v| v as f32), zd.map(|v| v as f32));
    for kernel in kernels(120) {
        let dense = gramian::kernel::kernel_matrix_cpu(&kernel, &xf, &zf).unwrap();
        let sparse = kernel_matrix_sparse_cpu(&kernel, &CsrMatrix::from(&xf), &CsrMatrix::from(&zf)).unwrap();
        let err = relative_frobenius_error(&sparse, &dense);
        assert!(err < 1e-5 || dense.norm() == 0.0, "{kernel:?}: {err:e}");
    }
}

#[test]
fn sparse_near_duplicates_keep_their_small_distances() {
    // z = x + 1e-9 e_0: the expanded squared distance cancels, the merged
    // one keeps 1e-18.
    let xd = DMatrix::<f64>::from_row_slice(1, 4, &[3.0, 0.0, -2.0, 0.0]);
    let zd = DMatrix::<f64>::from_row_slice(1, 4, &[3.0 + 1e-9, 0.0, -2.0, 0.0]);
    let kernel = Kernel::laplacian(1e6).unwrap();
    let sparse = kernel_matrix_sparse_cpu(&kernel, &CsrMatrix::from(&xd), &CsrMatrix::from(&zd)).unwrap();
    let dense = Device::cpu().kernel_matrix(&kernel, &xd, &zd).unwrap();
    assert!((sparse[(0, 0)] - dense[(0, 0)]).abs() < 1e-12, "{} vs {}", sparse[(0, 0)], dense[(0, 0)]);
    assert!(sparse[(0, 0)] < 1.0 - 1e-4);
}

#[test]
fn sparse_kernel_matvec_equals_dense() {
    let mut rng = common::rng();
    let device = Device::cpu();
    for &(n, m, d, density) in &[(300usize, 270usize, 500usize, 0.04), (5, 9, 3, 0.5), (20, 11, 30, 0.0)] {
        let (xd, zd) = (random_sparse(&mut rng, n, d, density), random_sparse(&mut rng, m, d, density));
        let v = DMatrix::from_fn(m, 3, |_, _| rng.random_range(-1.0..1.0));
        let (xs, zs) = (CsrMatrix::from(&xd), CsrMatrix::from(&zd));
        for kernel in kernels(d) {
            let dense = device.kernel_matvec(&kernel, &xd, &zd, &v).unwrap();
            let sparse = device.kernel_matvec_sparse(&kernel, &xs, &zs, &v).unwrap();
            assert_close(&sparse, &dense, 1e-12, &format!("{kernel:?}, {n} x {m} x {d}, density {density}"));
        }
    }
}

#[test]
fn sparse_inputs_give_typed_errors() {
    let device = Device::cpu();
    let kernel = Kernel::rbf(0.5).unwrap();
    let x = CsrMatrix::from(&DMatrix::from_row_slice(2, 3, &[1.0, 0.0, 2.0, 0.0, 0.0, 0.0]));
    let z4 = CsrMatrix::from(&DMatrix::from_row_slice(1, 4, &[1.0, 0.0, 0.0, 1.0]));
    assert!(matches!(device.kernel_matrix_sparse(&kernel, &x, &z4), Err(Error::DimensionMismatch { expected: 3, found: 4, .. })));
    assert!(matches!(device.kernel_matvec_sparse(&kernel, &x, &z4, &DMatrix::<f64>::zeros(1, 1)), Err(Error::DimensionMismatch { .. })));

    // A stored NaN at row 1, column 2.
    let nan = CsrMatrix::try_from_csr_data(2, 3, vec![0, 1, 2], vec![0, 2], vec![1.0, f64::NAN]).unwrap();
    assert!(matches!(device.kernel_matrix_sparse(&kernel, &x, &nan), Err(Error::NonFinite { what: "z", row: 1, col: 2 })));
    assert!(matches!(device.kernel_matrix_sparse(&kernel, &nan, &x), Err(Error::NonFinite { what: "x", row: 1, col: 2 })));
    let inf = CsrMatrix::try_from_csr_data(1, 3, vec![0, 1], vec![1], vec![f64::INFINITY]).unwrap();
    assert!(matches!(device.kernel_matvec_sparse(&kernel, &inf, &x, &DMatrix::<f64>::zeros(2, 1)), Err(Error::NonFinite { what: "x", row: 0, col: 1 })));

    // No rows, no columns.
    let no_rows = CsrMatrix::<f64>::zeros(0, 3);
    let no_cols = CsrMatrix::<f64>::zeros(2, 0);
    assert!(matches!(device.kernel_matrix_sparse(&kernel, &no_rows, &x), Err(Error::Empty { what: "x", .. })));
    assert!(matches!(device.kernel_matrix_sparse(&kernel, &x, &no_rows), Err(Error::Empty { what: "z", .. })));
    assert!(matches!(device.kernel_matrix_sparse(&kernel, &no_cols, &no_cols), Err(Error::Empty { .. })));

    // V: rows vs Z, non-finite entries.
    assert!(matches!(device.kernel_matvec_sparse(&kernel, &x, &x, &DMatrix::<f64>::zeros(3, 1)), Err(Error::DimensionMismatch { expected: 2, found: 3, .. })));
    let mut v = DMatrix::<f64>::zeros(2, 1);
    v[(1, 0)] = f64::NAN;
    assert!(matches!(device.kernel_matvec_sparse(&kernel, &x, &x, &v), Err(Error::NonFinite { .. })));

    // A kernel literal with invalid parameters.
    assert!(matches!(device.kernel_matrix_sparse(&Kernel::Rbf { gamma: -1.0 }, &x, &x), Err(Error::InvalidParameter { .. })));

    // Finite inputs whose linear kernel overflows.
    let big = CsrMatrix::from(&DMatrix::from_row_slice(1, 2, &[1e200, 1e200]));
    assert!(matches!(device.kernel_matrix_sparse(&Kernel::linear(), &big, &big), Err(Error::Overflow { .. })));
    assert!(matches!(device.kernel_matvec_sparse(&Kernel::linear(), &big, &big, &DMatrix::<f64>::from_element(1, 1, 1.0)), Err(Error::Overflow { .. })));
}
