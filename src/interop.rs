//! `ndarray` inputs and outputs (feature `ndarray`).
//!
//! The library's matrices are `nalgebra` (column-major). Arrays are
//! accepted as inputs everywhere directly ([`crate::input`]: `Array2`,
//! `ArrayView2`, `Array1`, `ArrayView1`); the functions here convert
//! explicitly, both ways, and move buffers instead of copying them wherever
//! the memory layouts agree:
//!
//! | conversion | copies |
//! |---|---|
//! | [`into_matrix`] of an owned `Array2` in column-major (Fortran) order | no (the buffer moves) |
//! | [`into_matrix`] of any other `Array2`, [`to_matrix`] of a view | one copy |
//! | [`into_array`] of a `DMatrix` | no (the buffer moves; the array is in Fortran order) |
//! | [`as_array_view`] of a `&DMatrix` | no (a strided view) |
//! | [`into_vector`] / [`into_array1`] | no for contiguous arrays |
//!
//! ```
//! use gramian::interop::{into_array, into_matrix};
//! use gramian::{Device, Kernel};
//! use ndarray::Array2;
//!
//! let x = Array2::from_shape_fn((20, 3), |(i, j)| (i * 3 + j) as f64 * 0.01);
//! let k = Device::cpu().kernel_matrix(&Kernel::rbf(0.5)?, &x, &into_matrix(x.clone()))?;
//! let k: Array2<f64> = into_array(k); // 20 x 20, no copy
//! assert_eq!(k.dim(), (20, 20));
//! # Ok::<(), gramian::Error>(())
//! ```

use nalgebra::{DMatrix, DVector};
use ndarray::{Array1, Array2, ArrayView1, ArrayView2, ShapeBuilder};

use crate::input::{AsMatrix, AsVector};

/// An owned 2-D array as a matrix; the buffer moves without a copy when the
/// array is contiguous in column-major (Fortran) order, as [`into_array`]
/// returns them (a leading offset of a sliced array is removed in place);
/// otherwise one copy. The same conversion as
/// [`AsMatrix::into_matrix`], which
/// every entry point applies to an `Array2` it is given.
pub fn into_matrix(a: Array2<f64>) -> DMatrix<f64> {
    a.into_matrix().expect("an Array2 always has a valid shape")
}

/// A copy of a 2-D array view as a matrix (any layout and strides); the
/// conversion of [`AsMatrix::as_matrix`].
pub fn to_matrix(a: ArrayView2<'_, f64>) -> DMatrix<f64> {
    crate::input::copy_matrix(&a)
}

/// A matrix as an owned 2-D array in column-major (Fortran) order; the
/// buffer moves, nothing is copied.
pub fn into_array(m: DMatrix<f64>) -> Array2<f64> {
    let (rows, cols) = m.shape();
    let data: Vec<f64> = m.data.into();
    Array2::from_shape_vec((rows, cols).f(), data).expect("a DMatrix holds rows * cols entries in column-major order")
}

/// A view of a matrix as a 2-D array view (column-major strides), no copy.
pub fn as_array_view(m: &DMatrix<f64>) -> ArrayView2<'_, f64> {
    ArrayView2::from_shape(m.shape().f(), m.as_slice()).expect("a DMatrix holds rows * cols entries in column-major order")
}

/// An owned 1-D array as a vector; no copy when it is contiguous (the
/// conversion of [`AsVector::into_vector`]).
pub fn into_vector(a: Array1<f64>) -> DVector<f64> {
    a.into_vector().expect("an Array1 always has a valid shape")
}

/// A copy of a 1-D array view as a vector.
pub fn to_vector(a: ArrayView1<'_, f64>) -> DVector<f64> {
    crate::input::copy_vector(&a)
}

/// A vector as an owned 1-D array; the buffer moves, nothing is copied.
pub fn into_array1(v: DVector<f64>) -> Array1<f64> {
    let data: Vec<f64> = v.data.into();
    Array1::from_vec(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_keep_every_entry_in_every_layout() {
        let c_order = Array2::from_shape_fn((5, 3), |(i, j)| (i * 10 + j) as f64);
        let m = into_matrix(c_order.clone());
        assert_eq!(m.shape(), (5, 3));
        for i in 0..5 {
            for j in 0..3 {
                assert_eq!(m[(i, j)], c_order[(i, j)]);
            }
        }
        let back = into_array(m.clone());
        assert_eq!(back, c_order);
        assert_eq!(as_array_view(&m), c_order.view());
        // Fortran order moves without a copy: the pointer is kept.
        let f_order = back;
        let ptr = f_order.as_ptr();
        let m2 = into_matrix(f_order);
        assert_eq!(m2.as_ptr(), ptr);
        assert_eq!(m2, m);
        // A strided view (every other row).
        let strided = c_order.slice(ndarray::s![..;2, ..]);
        let ms = to_matrix(strided);
        assert_eq!(ms.shape(), (3, 3));
        assert_eq!(ms[(2, 1)], 41.0);
        // A sliced owned Fortran array (offset buffer) is copied correctly.
        let mut f = into_array(m.clone());
        f.slice_collapse(ndarray::s![1.., 1..]);
        let mf = into_matrix(f);
        assert_eq!(mf, m.view((1, 1), (4, 2)).into_owned());
        // Vectors.
        let v = Array1::from_vec(vec![1.0, 2.0, 3.0]);
        let dv = into_vector(v.clone());
        assert_eq!(dv.as_slice(), &[1.0, 2.0, 3.0]);
        assert_eq!(into_array1(dv), v);
        let mut sliced = Array1::from_vec(vec![0.0, 1.0, 2.0, 3.0]);
        sliced.slice_collapse(ndarray::s![1..3]);
        assert_eq!(into_vector(sliced).as_slice(), &[1.0, 2.0]);
        assert_eq!(to_vector(c_order.column(1)).as_slice(), &[1.0, 11.0, 21.0, 31.0, 41.0]);
    }
}
