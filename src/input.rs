//! Matrix and vector inputs: one conversion for every public entry point.
//!
//! The library computes on `nalgebra` matrices (`DMatrix`, column-major).
//! The public fit, predict and transform methods of the estimators (and
//! their density, likelihood and per-source variants), the [`MultiSource`](crate::MultiSource)
//! and [`Supervised`](crate::estimator::Supervised) constructors, and the compute core's kernel-matrix,
//! Gram, product and upload functions on [`Device`](crate::Device) take their matrices as
//! [`AsMatrix`] (and targets as [`AsVector`]), so the caller's own type
//! goes straight in:
//!
//! | input | [`AsMatrix`] / [`AsVector`] | copies |
//! |---|---|---|
//! | `DMatrix<T>` / `DVector<T>` (`T` = `f64` or `f32`) | both | no (borrowed) |
//! | `nalgebra` views (`x.view(..)`, `x.rows(..)`, `x.column(..)`, any strides) | both | one |
//! | [`RowMajor`]: `&[T]` with a shape, row after row (C order, numpy's default) | matrix | one |
//! | [`ColMajor`]: `&[T]` with a shape, column after column (Fortran order) | matrix | one |
//! | `&[T]`, `Vec<T>` | vector | one |
//! | `ndarray::Array2<T>`, `ArrayView2<T>` (feature `ndarray`, any layout) | matrix | one; none for [`AsMatrix::into_matrix`] of an owned Fortran-order array |
//! | `ndarray::Array1<T>`, `ArrayView1<T>` (feature `ndarray`) | vector | one |
//! | `&X` for any of these | as `X` | as `X` |
//!
//! `T` is the element type, [`AsMatrix::Elem`]. The compute core takes
//! either and keeps it (an `f32` input gives an `f32` kernel matrix). The
//! methods compute in `f64` and take `f64` inputs (`AsMatrix<Elem = f64>`:
//! fixing the element type keeps arguments such as `DMatrix::zeros(n, d)`
//! inferable); `f32` data are widened exactly by
//! [`AsMatrix::as_f64_matrix`] / [`AsMatrix::into_f64_matrix`], which
//! never copy an `f64` `DMatrix`.
//!
//! The conversion checks the shape only (a [`RowMajor`] or [`ColMajor`]
//! whose `rows * cols` is not the slice's length is
//! [`Error::DimensionMismatch`]; a `rows * cols` that overflows is
//! [`Error::ShapeOverflow`]; neither ever panics). The values are checked
//! afterwards by each entry point, exactly as for a `DMatrix`: every input
//! type becomes the same `DMatrix` before the method sees it, so the same
//! data in any accepted type gives bit-identical results and the same
//! errors (empty, non-finite, mismatched dimensions).
//!
//! ```
//! use gramian::input::{AsMatrix, RowMajor};
//! use gramian::{Device, Kernel};
//! use nalgebra::DMatrix;
//!
//! // Three samples of two features, row after row.
//! let data = [0.0, 1.0, 0.5, 0.25, 1.0, 0.0];
//! let x = RowMajor::new(&data, 3, 2)?;
//! let k = Device::cpu().kernel_matrix(&Kernel::rbf(0.5)?, &x, &x)?;
//! let m = DMatrix::from_row_slice(3, 2, &data);
//! assert_eq!(k, Device::cpu().kernel_matrix(&Kernel::rbf(0.5)?, &m, &m)?);
//! // A shape that does not match the data is an error, not a panic.
//! assert!(RowMajor::new(&data, 4, 2).is_err());
//! assert!(RowMajor::new(&data, usize::MAX, 2).is_err());
//! assert_eq!(x.shape(), (3, 2));
//! # Ok::<(), gramian::Error>(())
//! ```
//!
//! # Design
//!
//! The traits are by reference and return `Cow<'_, DMatrix<T>>`: a
//! `DMatrix` is borrowed, every other type is converted once. Owned data
//! handed to a constructor that keeps it ([`MultiSource::new`](crate::MultiSource::new),
//! [`Supervised::new`](crate::estimator::Supervised::new)) goes through [`AsMatrix::into_matrix`], which moves
//! an owned `DMatrix` (or a Fortran-order `Array2`) without a copy.
//!
//! The estimator traits stay as they were ([`Fit<D>`](crate::estimator::Fit),
//! [`Predict<X>`](crate::estimator::Predict),
//! [`Transform<X>`](crate::estimator::Transform) are generic over the data
//! type at the trait level, so they remain object safe): the methods
//! implement them for every `X: AsMatrix<Elem = f64>`, and their inherent
//! `fit`, `predict`, `density`, `transform_source`, ... take
//! `&(impl AsMatrix<Elem = f64> + ?Sized)` too, so that
//! `model.predict(&array)` finds the inherent method with any input. The
//! conversion is the first line of each entry point; the code behind it
//! works on `&DMatrix<f64>` as before (one copy of each method's code, not
//! one per input type). `AsMatrix` itself is object safe for a fixed
//! element type (`Box<dyn AsMatrix<Elem = f64>>` is an input too).
//!
//! # Sparse inputs
//!
//! The contract is a shape ([`AsMatrix::shape`], known without converting,
//! so an entry point can check dimensions and memory first) and a dense
//! matrix ([`AsMatrix::as_matrix`]). [`CsrMatrix<T>`](crate::sparse::CsrMatrix)
//! (one sample per row) implements the trait by densifying in `as_matrix`
//! (`OutOfMemory` when the dense copy cannot be allocated), so it is
//! accepted by every entry point. Code paths that use sparsity ask for the
//! sparse rows through [`AsMatrix::as_csr`] (`None` for the dense types,
//! so their code is unchanged) and never densify:
//!
//! - [`MultiSource`](crate::MultiSource) keeps CSR sources sparse;
//! - eKSVD's feature maps ([`FittedFeatureMap`](crate::eksvd::FittedFeatureMap)):
//!   Nystrom features from the sparse kernel of the rows against the
//!   landmarks ([`crate::sparse`]), random Fourier features and projections
//!   from the sparse-times-dense product `X Omega` / `X W`; the linear map's
//!   features are the rows themselves, densified;
//! - eKSVD's kernel-function coupling ([`CouplingMatrix::from_kernel`](crate::eksvd::CouplingMatrix::from_kernel))
//!   with any sparse source: blocks and products `K_pq V` from the sparse
//!   kernel matrices and matvecs;
//! - eKSVD's `fit`, `transform_source` and `transform_paired`;
//! - mklaren ([`MklarenParams::fit_inputs`](crate::mklaren::MklarenParams::fit_inputs)),
//!   incomplete Cholesky ([`IcdParams::fit`](crate::mklaren::IcdParams::fit))
//!   and the stacked low-rank baselines ([`LowRankRidgeParams::fit_inputs`](crate::mklaren::LowRankRidgeParams::fit_inputs):
//!   ICD, Nystrom, CSI): kernel columns and diagonals from the sparse rows'
//!   inner products and squared norms, the pivots' rows kept dense in the
//!   fitted transforms; their predictions and transforms of sparse rows
//!   ([`FactorTransform::apply`](crate::mklaren::FactorTransform::apply)).
//!
//! The sparse kernels and the coupling run on the CPU on every
//! [`Device`](crate::Device); eKSVD's feature maps of sparse rows run on the
//! GPU when the device is one (the CSR arrays go up,
//! [`crate::gpu::GpuContext::upload_csr`]) and on the CPU otherwise; the
//! dense features they produce go to the solver as any dense features do.

use std::any::Any;
use std::borrow::Cow;

use nalgebra::{DMatrix, DVector, Dim, Dyn, Matrix, ViewStorage};

use crate::error::{Error, Result};
use crate::linalg::Real;
use crate::sparse::CsrMatrix;

/// A matrix input (`rows x cols`, one sample per row): anything the library
/// can read as a dense `DMatrix<Self::Elem>` (see the [module](self) for
/// the implementations).
pub trait AsMatrix {
    /// The element type (`f64` or `f32`).
    type Elem: Real;

    /// `(rows, cols)`, without converting.
    fn shape(&self) -> (usize, usize);

    /// The input as a dense matrix: borrowed where it already is one,
    /// otherwise converted once.
    ///
    /// Errors: a shape that does not match the data
    /// ([`Error::DimensionMismatch`], [`Error::ShapeOverflow`]).
    fn as_matrix(&self) -> Result<Cow<'_, DMatrix<Self::Elem>>>;

    /// The input as an owned dense matrix, moving the buffer where the
    /// layouts agree (an owned `DMatrix`) instead of copying it.
    ///
    /// Errors: those of [`AsMatrix::as_matrix`].
    fn into_matrix(self) -> Result<DMatrix<Self::Elem>>
    where
        Self: Sized,
    {
        self.as_matrix().map(Cow::into_owned)
    }

    /// The input as a dense `f64` matrix: an `f64` input as
    /// [`AsMatrix::as_matrix`] gives it (a `DMatrix<f64>` borrowed), an
    /// `f32` input widened exactly.
    ///
    /// Errors: those of [`AsMatrix::as_matrix`].
    fn as_f64_matrix(&self) -> Result<Cow<'_, DMatrix<f64>>> {
        Ok(widen_matrix(self.as_matrix()?))
    }

    /// The input as an owned dense `f64` matrix ([`AsMatrix::into_matrix`],
    /// widened exactly from `f32`).
    ///
    /// Errors: those of [`AsMatrix::as_matrix`].
    fn into_f64_matrix(self) -> Result<DMatrix<f64>>
    where
        Self: Sized,
    {
        Ok(widen_matrix(Cow::Owned(self.into_matrix()?)).into_owned())
    }

    /// The input's sparse rows when it is a CSR matrix (`None` for the dense
    /// types), for the code paths that compute on sparse rows (see the
    /// [module](self#sparse-inputs)).
    fn as_csr(&self) -> Option<&CsrMatrix<Self::Elem>> {
        None
    }
}

/// A vector input (targets, one per sample): anything the library can read
/// as a `DVector<Self::Elem>`.
pub trait AsVector {
    /// The element type (`f64` or `f32`).
    type Elem: Real;

    /// Number of entries, without converting.
    fn len(&self) -> usize;

    /// True when there are no entries.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The input as a vector: borrowed where it already is a `DVector`,
    /// otherwise copied once.
    fn as_vector(&self) -> Result<Cow<'_, DVector<Self::Elem>>>;

    /// The input as an owned vector, moving the buffer of an owned
    /// `DVector` (or a contiguous `Array1`).
    fn into_vector(self) -> Result<DVector<Self::Elem>>
    where
        Self: Sized,
    {
        self.as_vector().map(Cow::into_owned)
    }

    /// The input as an `f64` vector (an `f32` input widened exactly).
    fn as_f64_vector(&self) -> Result<Cow<'_, DVector<f64>>> {
        Ok(widen_vector(self.as_vector()?))
    }

    /// The input as an owned `f64` vector.
    fn into_f64_vector(self) -> Result<DVector<f64>>
    where
        Self: Sized,
    {
        Ok(widen_vector(Cow::Owned(self.into_vector()?)).into_owned())
    }
}

/// `m` as `f64`: the same value when the element type is `f64` (no copy),
/// otherwise each entry widened exactly. For `DMatrix` and `DVector`.
macro_rules! widen_fn {
    ($name:ident, $ty:ident) => {
        fn $name<T: Real + 'static>(m: Cow<'_, $ty<T>>) -> Cow<'_, $ty<f64>> {
            match m {
                Cow::Borrowed(b) => match (b as &dyn Any).downcast_ref::<$ty<f64>>() {
                    Some(same) => Cow::Borrowed(same),
                    None => Cow::Owned(b.map(|v| v.to_f64_exact())),
                },
                Cow::Owned(o) => {
                    let mut slot = Some(o);
                    if let Some(same) = (&mut slot as &mut dyn Any).downcast_mut::<Option<$ty<f64>>>() {
                        if let Some(m) = same.take() {
                            return Cow::Owned(m);
                        }
                    }
                    match slot {
                        Some(o) => Cow::Owned(o.map(|v| v.to_f64_exact())),
                        None => unreachable!("the slot is emptied only when it already holds f64"),
                    }
                }
            }
        }
    };
}
widen_fn!(widen_matrix, DMatrix);
widen_fn!(widen_vector, DVector);

/// `rows * cols` with overflow as [`Error::ShapeOverflow`].
fn entries(what: &'static str, rows: usize, cols: usize) -> Result<usize> {
    rows.checked_mul(cols).ok_or(Error::ShapeOverflow { what, rows, cols })
}

/// Checks that a `rows x cols` shape describes `len` entries.
fn check_len(what: &'static str, rows: usize, cols: usize, len: usize) -> Result<()> {
    let expected = entries(what, rows, cols)?;
    if expected != len {
        return Err(Error::DimensionMismatch { what, expected, found: len });
    }
    Ok(())
}

impl<T: Real> AsMatrix for DMatrix<T> {
    type Elem = T;
    fn shape(&self) -> (usize, usize) {
        self.shape()
    }
    fn as_matrix(&self) -> Result<Cow<'_, DMatrix<T>>> {
        Ok(Cow::Borrowed(self))
    }
    fn into_matrix(self) -> Result<DMatrix<T>> {
        Ok(self)
    }
}

/// `nalgebra` matrix views of any strides (`x.view(..)`, `x.rows(..)`,
/// `x.columns(..)`): one copy.
impl<T: Real, RStride: Dim, CStride: Dim> AsMatrix for Matrix<T, Dyn, Dyn, ViewStorage<'_, T, Dyn, Dyn, RStride, CStride>> {
    type Elem = T;
    fn shape(&self) -> (usize, usize) {
        self.shape()
    }
    fn as_matrix(&self) -> Result<Cow<'_, DMatrix<T>>> {
        Ok(Cow::Owned(self.clone_owned()))
    }
}

impl<X: AsMatrix + ?Sized> AsMatrix for &X {
    type Elem = X::Elem;
    fn shape(&self) -> (usize, usize) {
        (**self).shape()
    }
    fn as_matrix(&self) -> Result<Cow<'_, DMatrix<X::Elem>>> {
        (**self).as_matrix()
    }
    fn as_csr(&self) -> Option<&CsrMatrix<X::Elem>> {
        (**self).as_csr()
    }
}

/// Boxed inputs, e.g. `Box<dyn AsMatrix<Elem = f64>>` to mix input types in
/// one [`MultiSource`](crate::MultiSource).
impl<X: AsMatrix + ?Sized> AsMatrix for Box<X> {
    type Elem = X::Elem;
    fn shape(&self) -> (usize, usize) {
        (**self).shape()
    }
    fn as_matrix(&self) -> Result<Cow<'_, DMatrix<X::Elem>>> {
        (**self).as_matrix()
    }
    fn as_csr(&self) -> Option<&CsrMatrix<X::Elem>> {
        (**self).as_csr()
    }
}

/// CSR sparse matrices (one sample per row): densified by `as_matrix`
/// (one copy, `OutOfMemory` when it cannot be allocated), the sparse rows
/// themselves by [`AsMatrix::as_csr`].
impl<T: Real> AsMatrix for CsrMatrix<T> {
    type Elem = T;
    fn shape(&self) -> (usize, usize) {
        (self.nrows(), self.ncols())
    }
    fn as_matrix(&self) -> Result<Cow<'_, DMatrix<T>>> {
        crate::sparse::densify(self).map(Cow::Owned)
    }
    fn as_csr(&self) -> Option<&CsrMatrix<T>> {
        Some(self)
    }
}

/// A row-major (C order) matrix in a slice: row `i` is
/// `data[i * cols..(i + 1) * cols]`, the layout of a numpy array by default
/// and of most plain buffers. Built by [`RowMajor::new`], which checks the
/// shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowMajor<'a, T = f64> {
    data: &'a [T],
    rows: usize,
    cols: usize,
}

impl<'a, T: Real> RowMajor<'a, T> {
    /// `data` as a `rows x cols` matrix, row after row.
    ///
    /// Errors: `rows * cols` overflowing ([`Error::ShapeOverflow`]) or other
    /// than `data.len()` ([`Error::DimensionMismatch`]).
    pub fn new(data: &'a [T], rows: usize, cols: usize) -> Result<Self> {
        check_len("entries of a row-major input (rows * cols)", rows, cols, data.len())?;
        Ok(RowMajor { data, rows, cols })
    }

    /// The entries, row after row.
    pub fn data(&self) -> &'a [T] {
        self.data
    }
}

impl<T: Real> AsMatrix for RowMajor<'_, T> {
    type Elem = T;
    fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }
    fn as_matrix(&self) -> Result<Cow<'_, DMatrix<T>>> {
        Ok(Cow::Owned(DMatrix::from_row_slice(self.rows, self.cols, self.data)))
    }
}

/// A column-major (Fortran order) matrix in a slice: column `j` is
/// `data[j * rows..(j + 1) * rows]`, the layout of a `DMatrix` and of a
/// Fortran-order numpy array. Built by [`ColMajor::new`], which checks the
/// shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ColMajor<'a, T = f64> {
    data: &'a [T],
    rows: usize,
    cols: usize,
}

impl<'a, T: Real> ColMajor<'a, T> {
    /// `data` as a `rows x cols` matrix, column after column.
    ///
    /// Errors: `rows * cols` overflowing ([`Error::ShapeOverflow`]) or other
    /// than `data.len()` ([`Error::DimensionMismatch`]).
    pub fn new(data: &'a [T], rows: usize, cols: usize) -> Result<Self> {
        check_len("entries of a column-major input (rows * cols)", rows, cols, data.len())?;
        Ok(ColMajor { data, rows, cols })
    }

    /// The entries, column after column.
    pub fn data(&self) -> &'a [T] {
        self.data
    }
}

impl<T: Real> AsMatrix for ColMajor<'_, T> {
    type Elem = T;
    fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }
    fn as_matrix(&self) -> Result<Cow<'_, DMatrix<T>>> {
        Ok(Cow::Owned(DMatrix::from_column_slice(self.rows, self.cols, self.data)))
    }
}

impl<T: Real> AsVector for DVector<T> {
    type Elem = T;
    fn len(&self) -> usize {
        self.len()
    }
    fn as_vector(&self) -> Result<Cow<'_, DVector<T>>> {
        Ok(Cow::Borrowed(self))
    }
    fn into_vector(self) -> Result<DVector<T>> {
        Ok(self)
    }
}

/// `nalgebra` column views of any strides (`x.column(j)`, `v.rows(..)`).
impl<T: Real, RStride: Dim, CStride: Dim> AsVector for Matrix<T, Dyn, nalgebra::U1, ViewStorage<'_, T, Dyn, nalgebra::U1, RStride, CStride>> {
    type Elem = T;
    fn len(&self) -> usize {
        self.nrows()
    }
    fn as_vector(&self) -> Result<Cow<'_, DVector<T>>> {
        Ok(Cow::Owned(self.clone_owned()))
    }
}

impl<T: Real> AsVector for [T] {
    type Elem = T;
    fn len(&self) -> usize {
        <[T]>::len(self)
    }
    fn as_vector(&self) -> Result<Cow<'_, DVector<T>>> {
        Ok(Cow::Owned(DVector::from_column_slice(self)))
    }
}

impl<T: Real> AsVector for Vec<T> {
    type Elem = T;
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn as_vector(&self) -> Result<Cow<'_, DVector<T>>> {
        Ok(Cow::Owned(DVector::from_column_slice(self)))
    }
    fn into_vector(self) -> Result<DVector<T>> {
        Ok(DVector::from_vec(self))
    }
}

impl<V: AsVector + ?Sized> AsVector for &V {
    type Elem = V::Elem;
    fn len(&self) -> usize {
        (**self).len()
    }
    fn as_vector(&self) -> Result<Cow<'_, DVector<V::Elem>>> {
        (**self).as_vector()
    }
}

#[cfg(feature = "ndarray")]
pub(crate) use ndarray_inputs::{copy_matrix, copy_vector};

#[cfg(feature = "ndarray")]
mod ndarray_inputs {
    use std::borrow::Cow;

    use nalgebra::{DMatrix, DVector};
    use ndarray::{Array1, Array2, ArrayBase, ArrayView1, ArrayView2, Data, Ix1, Ix2};

    use super::{AsMatrix, AsVector};
    use crate::error::Result;
    use crate::linalg::Real;

    /// A copy of a 2-D array of any layout and strides as a matrix.
    pub(crate) fn copy_matrix<T: Real, S: Data<Elem = T>>(a: &ArrayBase<S, Ix2>) -> DMatrix<T> {
        let (rows, cols) = a.dim();
        if let Some(row_major) = a.as_slice() {
            return DMatrix::from_row_slice(rows, cols, row_major);
        }
        if let Some(col_major) = a.t().as_slice() {
            return DMatrix::from_column_slice(rows, cols, col_major);
        }
        DMatrix::from_fn(rows, cols, |i, j| a[(i, j)])
    }

    /// A copy of a 1-D array of any stride as a vector.
    pub(crate) fn copy_vector<T: Real, S: Data<Elem = T>>(a: &ArrayBase<S, Ix1>) -> DVector<T> {
        DVector::from_iterator(a.len(), a.iter().copied())
    }

    /// Owned arrays: [`AsMatrix::into_matrix`] moves the buffer of an array
    /// contiguous in Fortran order (as [`crate::interop::into_array`] gives
    /// them; a leading offset of a sliced array is removed in place).
    impl<T: Real> AsMatrix for Array2<T> {
        type Elem = T;
        fn shape(&self) -> (usize, usize) {
            self.dim()
        }
        fn as_matrix(&self) -> Result<Cow<'_, DMatrix<T>>> {
            Ok(Cow::Owned(copy_matrix(self)))
        }
        fn into_matrix(self) -> Result<DMatrix<T>> {
            let (rows, cols) = self.dim();
            if self.t().is_standard_layout() {
                // Contiguous in Fortran order: the elements are `rows * cols`
                // consecutive entries of the buffer, from `offset` on.
                let (mut data, offset) = self.into_raw_vec_and_offset();
                let offset = offset.unwrap_or(0);
                if offset > 0 {
                    data.drain(..offset.min(data.len()));
                }
                data.truncate(rows * cols);
                return Ok(DMatrix::from_vec(rows, cols, data));
            }
            Ok(copy_matrix(&self))
        }
    }

    impl<T: Real> AsMatrix for ArrayView2<'_, T> {
        type Elem = T;
        fn shape(&self) -> (usize, usize) {
            self.dim()
        }
        fn as_matrix(&self) -> Result<Cow<'_, DMatrix<T>>> {
            Ok(Cow::Owned(copy_matrix(self)))
        }
    }

    /// Owned arrays: [`AsVector::into_vector`] moves the buffer of a
    /// contiguous array.
    impl<T: Real> AsVector for Array1<T> {
        type Elem = T;
        fn len(&self) -> usize {
            ArrayBase::len(self)
        }
        fn as_vector(&self) -> Result<Cow<'_, DVector<T>>> {
            Ok(Cow::Owned(copy_vector(self)))
        }
        fn into_vector(self) -> Result<DVector<T>> {
            let n = self.len();
            if self.is_standard_layout() {
                let (data, offset) = self.into_raw_vec_and_offset();
                let offset = offset.unwrap_or(0);
                if offset == 0 && data.len() == n {
                    return Ok(DVector::from_vec(data));
                }
                return Ok(DVector::from_iterator(n, data.into_iter().skip(offset).take(n)));
            }
            Ok(copy_vector(&self))
        }
    }

    impl<T: Real> AsVector for ArrayView1<'_, T> {
        type Elem = T;
        fn len(&self) -> usize {
            ArrayBase::len(self)
        }
        fn as_vector(&self) -> Result<Cow<'_, DVector<T>>> {
            Ok(Cow::Owned(copy_vector(self)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_f64_inputs_are_borrowed_and_others_copied_once() {
        let m = DMatrix::from_fn(4, 3, |i, j| (i * 3 + j) as f64);
        assert!(matches!(m.as_matrix().unwrap(), Cow::Borrowed(b) if std::ptr::eq(b, &m)));
        assert!(matches!(m.as_f64_matrix().unwrap(), Cow::Borrowed(b) if std::ptr::eq(b, &m)));
        let ptr = m.as_ptr();
        assert_eq!(m.clone().into_matrix().unwrap(), m);
        let moved = m.clone();
        let moved_ptr = moved.as_ptr();
        assert_eq!(moved.into_f64_matrix().unwrap().as_ptr(), moved_ptr);
        assert_eq!((&m).as_matrix().unwrap().as_ptr(), ptr);
        let data: Vec<f64> = (0..12).map(|v| v as f64).collect();
        assert_eq!(RowMajor::new(&data, 4, 3).unwrap().as_matrix().unwrap().into_owned(), m);
        assert_eq!(ColMajor::new(m.as_slice(), 4, 3).unwrap().as_matrix().unwrap().into_owned(), m);
        assert_eq!(m.view((1, 1), (2, 2)).as_matrix().unwrap().into_owned(), DMatrix::from_row_slice(2, 2, &[4.0, 5.0, 7.0, 8.0]));
        assert_eq!(m.rows(1, 2).shape(), (2, 3));
        let f = m.map(|v| v as f32);
        assert_eq!(f.as_f64_matrix().unwrap().into_owned(), m);
        assert_eq!(f.into_f64_matrix().unwrap(), m);
    }

    #[test]
    fn bad_shapes_are_typed_errors() {
        let data = [1.0, 2.0, 3.0];
        assert!(matches!(RowMajor::new(&data, 2, 2), Err(Error::DimensionMismatch { expected: 4, found: 3, .. })));
        assert!(matches!(ColMajor::new(&data, 3, 0), Err(Error::DimensionMismatch { expected: 0, found: 3, .. })));
        assert!(matches!(RowMajor::new(&data, usize::MAX, 3), Err(Error::ShapeOverflow { rows: usize::MAX, cols: 3, .. })));
        assert!(matches!(ColMajor::new(&data, 2, usize::MAX / 2 + 1), Err(Error::ShapeOverflow { .. })));
        assert!(RowMajor::new(&data, 1, 3).is_ok() && RowMajor::new(&data, 3, 1).is_ok());
        assert!(RowMajor::new(&[] as &[f64], 0, 5).is_ok());
        assert!(Error::ShapeOverflow { what: "x", rows: 1, cols: 1 }.is_invalid_input());
    }

    #[test]
    fn vectors_convert_from_every_type() {
        let v = DVector::from_vec(vec![1.0, 2.0, 3.0]);
        assert!(matches!(v.as_vector().unwrap(), Cow::Borrowed(_)));
        let s: &[f64] = &[1.0, 2.0, 3.0];
        assert_eq!(s.as_vector().unwrap().into_owned(), v);
        assert_eq!(AsVector::len(s), 3);
        assert_eq!(vec![1.0, 2.0, 3.0].into_vector().unwrap(), v);
        let m = DMatrix::from_column_slice(3, 2, &[0.0, 0.0, 0.0, 1.0, 2.0, 3.0]);
        assert_eq!(m.column(1).as_vector().unwrap().into_owned(), v);
        assert_eq!(vec![1.0f32, 2.0, 3.0].as_f64_vector().unwrap().into_owned(), v);
    }

    #[cfg(feature = "ndarray")]
    #[test]
    fn ndarray_inputs_in_every_layout() {
        use ndarray::{s, Array1, Array2, ShapeBuilder};
        let c = Array2::from_shape_fn((5, 3), |(i, j)| (i * 10 + j) as f64);
        let m = DMatrix::from_fn(5, 3, |i, j| (i * 10 + j) as f64);
        assert_eq!(c.as_matrix().unwrap().into_owned(), m);
        assert_eq!(c.view().as_matrix().unwrap().into_owned(), m);
        assert_eq!(c.t().as_matrix().unwrap().into_owned(), m.transpose());
        let f = Array2::from_shape_vec((5, 3).f(), m.as_slice().to_vec()).unwrap();
        let ptr = f.as_ptr();
        let moved = f.into_matrix().unwrap();
        assert_eq!(moved.as_ptr(), ptr);
        assert_eq!(moved, m);
        let strided = c.slice(s![..;2, ..]);
        assert_eq!(strided.as_matrix().unwrap().into_owned(), m.select_rows(&[0, 2, 4]));
        let v = Array1::from_vec(vec![1.0, 2.0, 3.0]);
        assert_eq!(v.as_vector().unwrap().as_slice(), &[1.0, 2.0, 3.0]);
        assert_eq!(c.column(1).as_vector().unwrap().as_slice(), &[1.0, 11.0, 21.0, 31.0, 41.0]);
        assert_eq!(v.into_vector().unwrap().as_slice(), &[1.0, 2.0, 3.0]);
    }
}
