//! Every accepted input type ([`gramian::input`]) gives the same fit, bit
//! for bit: nalgebra matrices and views, row- and column-major slices and
//! `ndarray` arrays (feature `ndarray`); bad shapes are typed errors.

use gramian::eksvd::FeatureMap;
use gramian::prelude::*;
use nalgebra::{DMatrix, DVector};

use crate::common;

/// `n x d` inputs with a smooth target.
fn regression(n: usize, d: usize) -> (DMatrix<f64>, DVector<f64>) {
    let x = DMatrix::from_fn(n, d, |i, j| (((i * (7 + 3 * j)) % 29) as f64 / 29.0) - 0.5);
    let y = DVector::from_fn(n, |i, _| (3.0 * x[(i, 0)]).sin() + x.row(i).sum());
    (x, y)
}

/// The entries of `m`, row after row.
fn row_major(m: &DMatrix<f64>) -> Vec<f64> {
    m.transpose().as_slice().to_vec()
}

/// `m` inside a larger matrix, so that `padded.view(..)` is a strided view of it.
fn padded(m: &DMatrix<f64>) -> DMatrix<f64> {
    DMatrix::from_fn(m.nrows() + 3, m.ncols() + 2, |i, j| if i >= 2 && j >= 1 && i - 2 < m.nrows() && j - 1 < m.ncols() { m[(i - 2, j - 1)] } else { f64::NAN })
}

#[test]
fn mklaren_fits_and_predicts_the_same_from_every_input_type() {
    let (x, y) = regression(60, 3);
    let device = Device::cpu();
    let params = MklarenParams::new(8).kernels(&[Kernel::rbf(1.0).unwrap(), Kernel::linear()]);
    let reference = params.fit(&device, &Supervised::new(x.clone(), y.clone()).unwrap()).unwrap();
    let expected = reference.predict(&x).unwrap();

    let flat = row_major(&x);
    let big = padded(&x);
    let view = big.view((2, 1), (60, 3));
    let fits = [
        Supervised::new(RowMajor::new(&flat, 60, 3).unwrap(), y.as_slice()).unwrap(),
        Supervised::new(ColMajor::new(x.as_slice(), 60, 3).unwrap(), y.as_slice().to_vec()).unwrap(),
        Supervised::new(view, y.rows(0, 60)).unwrap(),
        Supervised::new(&x, &y).unwrap(),
    ];
    for data in &fits {
        let model = params.fit(&device, data).unwrap();
        assert_eq!(model.predict(&x).unwrap(), expected);
    }
    // Predictions from every input type, through the inherent method and the trait.
    assert_eq!(reference.predict(&RowMajor::new(&flat, 60, 3).unwrap()).unwrap(), expected);
    assert_eq!(reference.predict(&view).unwrap(), expected);
    assert_eq!(Predict::predict(&reference, &RowMajor::new(&flat, 60, 3).unwrap()).unwrap(), expected);
    assert_eq!(Predict::predict(&reference, &x).unwrap(), expected);

    // One input per kernel (fit_inputs, predict_inputs, predict_at_step)
    // from row-major slices, the same as from matrices.
    let x2 = x.map(|v| 0.5 * v + 1.0);
    let flat2 = row_major(&x2);
    let by_matrix = params.fit_inputs(&device, &[&x, &x2], &y).unwrap();
    let (a, b) = (RowMajor::new(&flat, 60, 3).unwrap(), RowMajor::new(&flat2, 60, 3).unwrap());
    let by_slice = params.fit_inputs(&device, &[&a, &b], y.as_slice()).unwrap();
    let want = by_matrix.predict_inputs(&[&x, &x2]).unwrap();
    assert_eq!(by_slice.predict_inputs(&[&a, &b]).unwrap(), want);
    assert_eq!(by_matrix.predict_inputs(&[&a, &b]).unwrap(), want);
    assert_eq!(by_slice.predict_at_step(&[&a, &b], 2).unwrap(), by_matrix.predict_at_step(&[&x, &x2], 2).unwrap());
    let wrong = by_slice.predict_inputs(&[&RowMajor::new(&flat, 36, 5).unwrap(), &b]);
    assert!(matches!(wrong, Err(Error::SampleCountMismatch { .. })), "{wrong:?}");
}

#[test]
fn psd_density_fits_the_same_from_every_input_type() {
    let x = DMatrix::from_fn(50, 1, |i, _| ((i * 37) % 50) as f64 / 25.0 - 1.0);
    let device = Device::cpu();
    let params = DensityParams::new(Kernel::gaussian_with_width(0.5).unwrap()).unwrap();
    let reference = params.fit(&device, &x).unwrap();
    let expected = reference.predict(&x).unwrap();
    let flat = row_major(&x);
    let rows = RowMajor::new(&flat, 50, 1).unwrap();
    let big = padded(&x);
    let view = big.view((2, 1), (50, 1));
    for model in [params.fit(&device, &rows).unwrap(), params.fit(&device, &view).unwrap(), Fit::fit(&params, &device, &rows).unwrap()] {
        assert_eq!(model.predict(&x).unwrap(), expected);
        assert_eq!(model.density(&rows).unwrap(), expected);
        assert_eq!(model.mean_log_likelihood(&view).unwrap(), reference.mean_log_likelihood(&x).unwrap());
    }
}

#[test]
fn eksvd_fits_the_same_from_every_input_type() {
    let n = 40;
    let sources: Vec<DMatrix<f64>> = [2, 4, 3].iter().map(|&d| DMatrix::from_fn(n, d, |i, j| (((i * (5 + j)) % 17) as f64 / 17.0) + 0.1 * (i as f64 * 0.3 + j as f64).sin())).collect();
    let device = Device::cpu();
    let params = EksvdParams::new(2).feature_maps(vec![FeatureMap::random_fourier(0.5, 16).unwrap(); 3]).seed(3);
    let reference = params.fit(&device, &MultiSource::paired(sources.clone()).unwrap()).unwrap();
    let expected = reference.transform(&MultiSource::paired(sources.clone()).unwrap()).unwrap();

    let flats: Vec<Vec<f64>> = sources.iter().map(row_major).collect();
    let from_slices = MultiSource::paired(flats.iter().zip(&sources).map(|(f, s)| RowMajor::new(f, n, s.ncols()).unwrap()).collect()).unwrap();
    let from_views = MultiSource::paired(sources.iter().map(|s| s.view((0, 0), (n, s.ncols()))).collect()).unwrap();
    let from_refs = MultiSource::paired(sources.iter().collect()).unwrap();
    let mixed: Vec<Box<dyn AsMatrix<Elem = f64>>> = vec![Box::new(RowMajor::new(&flats[0], n, 2).unwrap()), Box::new(sources[1].columns(0, 4)), Box::new(&sources[2])];
    let mixed = MultiSource::paired(mixed).unwrap();
    for data in [from_slices, from_views, from_refs, mixed] {
        assert_eq!(data.sources(), &sources[..]);
        let model = params.fit(&device, &data).unwrap();
        assert_eq!(model.transform(&data).unwrap(), expected);
    }
    assert_eq!(reference.transform_source(1, &RowMajor::new(&flats[1], n, 4).unwrap()).unwrap(), reference.transform_source(1, &sources[1]).unwrap());
}

#[test]
fn the_compute_core_gives_the_same_kernel_matrices_from_every_input_type() {
    let (x, _) = regression(30, 4);
    let z = x.rows(5, 12).into_owned();
    let kernel = Kernel::rbf(0.7).unwrap();
    let mut devices = vec![Device::cpu()];
    devices.extend(common::gpu_device(Default::default()));
    for device in &devices {
        let expected = device.kernel_matrix(&kernel, &x, &z).unwrap();
        let (fx, fz) = (row_major(&x), row_major(&z));
        let (rx, rz) = (RowMajor::new(&fx, 30, 4).unwrap(), RowMajor::new(&fz, 12, 4).unwrap());
        assert_eq!(device.kernel_matrix(&kernel, &rx, &rz).unwrap(), expected);
        assert_eq!(device.kernel_matrix(&kernel, &x, &x.rows(5, 12)).unwrap(), expected);
        assert_eq!(device.kernel_matrix(&kernel, &ColMajor::new(x.as_slice(), 30, 4).unwrap(), &z).unwrap(), expected);
        assert_eq!(device.kernel_matrix_symmetric(&kernel, &rx).unwrap(), device.kernel_matrix_symmetric(&kernel, &x).unwrap());
        assert_eq!(device.kernel_matvec(&kernel, &rx, &rz, &DMatrix::from_element(12, 1, 1.0)).unwrap(), device.kernel_matvec(&kernel, &x, &z, &DMatrix::from_element(12, 1, 1.0)).unwrap());
        assert_eq!(device.gram(&rx).unwrap(), device.gram(&x).unwrap());
        assert_eq!(device.matmul(&rx, &rz, MatrixProduct::ABt).unwrap(), device.matmul(&x, &z, MatrixProduct::ABt).unwrap());
        let up = device.to_host(&device.upload(&rx, Precision::F32).unwrap()).unwrap();
        assert_eq!(up, device.to_host(&device.upload(&x, Precision::F32).unwrap()).unwrap());
        // f32 inputs keep the f32 path, whatever their type.
        let x32 = x.map(|v| v as f32);
        let f32_flat: Vec<f32> = fx.iter().map(|&v| v as f32).collect();
        assert_eq!(device.kernel_matrix(&kernel, &RowMajor::new(&f32_flat, 30, 4).unwrap(), &x32).unwrap(), device.kernel_matrix(&kernel, &x32, &x32).unwrap());
    }
}

#[test]
fn wrong_shapes_are_typed_errors_never_panics() {
    let data = [1.0; 12];
    let dims = |r: Result<RowMajor<'_>, Error>| matches!(r, Err(Error::DimensionMismatch { .. }));
    assert!(dims(RowMajor::new(&data, 5, 3)));
    assert!(dims(RowMajor::new(&data, 0, 3)));
    assert!(matches!(ColMajor::new(&data, 4, 4), Err(Error::DimensionMismatch { expected: 16, found: 12, .. })));
    for (rows, cols) in [(usize::MAX, 2), (2, usize::MAX), (1 << 33, 1 << 33), (usize::MAX, usize::MAX)] {
        let e = RowMajor::new(&data, rows, cols).unwrap_err();
        assert!(matches!(e, Error::ShapeOverflow { .. }), "{e}");
        assert!(e.is_invalid_input());
        assert!(matches!(ColMajor::new(&data, rows, cols), Err(Error::ShapeOverflow { .. })));
    }
    // The methods' own checks hold for every input type, with the same errors.
    let device = Device::cpu();
    let kernel = Kernel::rbf(1.0).unwrap();
    let x = RowMajor::new(&data, 4, 3).unwrap();
    let narrow = RowMajor::new(&data, 6, 2).unwrap();
    assert!(matches!(device.kernel_matrix(&kernel, &x, &narrow), Err(Error::DimensionMismatch { .. })));
    let empty = RowMajor::new(&[], 0, 3).unwrap();
    assert!(matches!(device.kernel_matrix(&kernel, &empty, &x), Err(Error::Empty { .. })));
    let mut with_nan = data;
    with_nan[7] = f64::NAN; // row 2, column 1
    let nan = RowMajor::new(&with_nan, 4, 3).unwrap();
    assert!(matches!(device.kernel_matrix(&kernel, &nan, &x), Err(Error::NonFinite { row: 2, col: 1, .. })));
    assert!(matches!(Supervised::new(x, &[1.0, 2.0, 3.0][..]), Err(Error::TargetLength { expected: 4, found: 3 })));
    assert!(matches!(Supervised::new(nan, &[1.0, 2.0, 3.0, 4.0][..]), Err(Error::NonFinite { .. })));
    let density = DensityParams::new(Kernel::gaussian_with_width(0.5).unwrap()).unwrap();
    assert_eq!(density.fit(&device, &nan).unwrap_err(), density.fit(&device, &DMatrix::from_row_slice(4, 3, &with_nan)).unwrap_err());
    assert!(matches!(MultiSource::paired(vec![x, narrow]), Err(Error::ShapeMismatch { .. })));
    assert!(matches!(MultiSource::new(vec![x]), Err(Error::TooFewSources(1))));
    assert!(matches!(MultiSource::new(vec![x, empty]), Err(Error::EmptySource { source_index: 1, .. })));
}

#[cfg(feature = "ndarray")]
#[test]
fn ndarray_inputs_fit_the_same_as_nalgebra() {
    use ndarray::{Array1, Array2, ShapeBuilder};
    let (x, y) = regression(60, 3);
    let device = Device::cpu();
    let params = MklarenParams::new(8).kernels(&[Kernel::rbf(1.0).unwrap()]);
    let expected = params.fit(&device, &Supervised::new(x.clone(), y.clone()).unwrap()).unwrap().predict(&x).unwrap();
    let c_order = Array2::from_shape_vec((60, 3), row_major(&x)).unwrap();
    let f_order = Array2::from_shape_vec((60, 3).f(), x.as_slice().to_vec()).unwrap();
    let targets = Array1::from_vec(y.as_slice().to_vec());
    for data in [
        Supervised::new(c_order.view(), targets.view()).unwrap(),
        Supervised::new(f_order.clone(), targets.clone()).unwrap(),
        Supervised::new(&c_order, &targets).unwrap(),
    ] {
        let model = params.fit(&device, &data).unwrap();
        assert_eq!(model.predict(&x).unwrap(), expected);
        assert_eq!(model.predict(&c_order).unwrap(), expected);
        assert_eq!(model.predict(&f_order.view()).unwrap(), expected);
    }
    let kernel = Kernel::rbf(0.5).unwrap();
    assert_eq!(device.kernel_matrix(&kernel, &c_order, &f_order).unwrap(), device.kernel_matrix(&kernel, &x, &x).unwrap());
    let sources = MultiSource::paired(vec![c_order.view(), f_order.view()]).unwrap();
    assert_eq!(sources.source(0), &x);
    assert_eq!(sources.source(1), &x);
}

/// A CSR matrix is a matrix input: [`Supervised`] (a dense container)
/// densifies it at the boundary, so the fit is that of the dense copy bit
/// for bit; mklaren's predictions of CSR rows take its sparse path (the
/// same kernel values up to the summation order of the inner products, so
/// within `1e-12` relative here), and a stored NaN is the same typed error
/// as in a dense matrix.
#[test]
fn csr_inputs_densify_at_the_boundary() {
    use gramian::sparse::CsrMatrix;
    let (x, y) = regression(60, 3);
    let x = x.map(|v| if v.abs() < 0.3 { 0.0 } else { v });
    let sparse = CsrMatrix::from(&x);
    assert!(sparse.nnz() < 60 * 3);
    let device = Device::cpu();
    let params = MklarenParams::new(8).kernels(&[Kernel::rbf(1.0).unwrap(), Kernel::linear()]);
    let reference = params.fit(&device, &Supervised::new(x.clone(), y.clone()).unwrap()).unwrap();
    let expected = reference.predict(&x).unwrap();
    let model = params.fit(&device, &Supervised::new(&sparse, &y).unwrap()).unwrap();
    assert_eq!(model.predict(&x).unwrap(), expected);
    let scale = expected.amax();
    assert!((model.predict(&sparse).unwrap() - &expected).amax() <= 1e-12 * scale);
    assert!((reference.predict(&sparse).unwrap() - &expected).amax() <= 1e-12 * scale);
    let nan = CsrMatrix::try_from_csr_data(2, 3, vec![0, 1, 1], vec![2], vec![f64::NAN]).unwrap();
    let dense_nan = DMatrix::from_row_slice(2, 3, &[0.0, 0.0, f64::NAN, 0.0, 0.0, 0.0]);
    assert_eq!(format!("{:?}", reference.predict(&nan).unwrap_err()), format!("{:?}", reference.predict(&dense_nan).unwrap_err()));
}
