//! Property tests: symmetry, transposition and positive semi-definiteness.

use gramian::linalg::symmetric_eigenvalues;
use gramian::{Device, Kernel};
use nalgebra::DMatrix;
use proptest::prelude::*;

fn matrix(rows: std::ops::Range<usize>, cols: usize) -> impl Strategy<Value = DMatrix<f64>> {
    rows.prop_flat_map(move |n| proptest::collection::vec(-3.0f64..3.0, n * cols).prop_map(move |v| DMatrix::from_vec(n, cols, v)))
}

fn kernel() -> impl Strategy<Value = Kernel> {
    prop_oneof![
        (0.01f64..5.0).prop_map(|g| Kernel::rbf(g).unwrap()),
        (0.01f64..5.0).prop_map(|g| Kernel::laplacian(g).unwrap()),
        Just(Kernel::linear()),
        (0.01f64..1.0, 0.0f64..2.0, 1u32..4).prop_map(|(g, c, d)| Kernel::polynomial(g, c, d).unwrap()),
        (0.01f64..1.0, -1.0f64..1.0).prop_map(|(g, c)| Kernel::sigmoid(g, c).unwrap()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn kernel_matrix_is_symmetric(x in (1usize..5).prop_flat_map(|d| matrix(1..40, d)), k in kernel()) {
        let km = Device::Cpu.kernel_matrix(&k, &x, &x).unwrap();
        let scale = km.amax().max(1.0);
        prop_assert!((&km - km.transpose()).amax() <= 1e-12 * scale);
    }

    #[test]
    fn cross_kernel_is_transpose_of_swapped((x, z) in (1usize..5).prop_flat_map(|d| (matrix(1..30, d), matrix(1..30, d))), k in kernel()) {
        let kxz = Device::Cpu.kernel_matrix(&k, &x, &z).unwrap();
        let kzx = Device::Cpu.kernel_matrix(&k, &z, &x).unwrap();
        let scale = kxz.amax().max(1.0);
        prop_assert!((&kxz - kzx.transpose()).amax() <= 1e-12 * scale);
    }

    #[test]
    fn rbf_gram_is_positive_semidefinite(x in (1usize..5).prop_flat_map(|d| matrix(1..60, d)), gamma in 0.01f64..10.0) {
        let km = Device::Cpu.kernel_matrix_symmetric(&Kernel::rbf(gamma).unwrap(), &x).unwrap();
        let smallest = symmetric_eigenvalues(&km).unwrap()[0];
        prop_assert!(smallest >= -1e-10 * x.nrows() as f64, "smallest eigenvalue {smallest}");
    }
}
