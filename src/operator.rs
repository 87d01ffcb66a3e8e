//! The matrix-free kernel operator `K(X, Z)` over data held by a device.
//!
//! X (n x d) and Z (m x d) are uploaded once, at construction; then
//! `K(X, Z) V` for blocks of vectors (the kernel is never stored: tiles of it
//! live in one scratch matrix on the device), a batch of kernel columns
//! `K(X, Z[idx])` in one dispatch, the diagonal of a square operator, and the
//! full matrix when asked for ([`KernelOperator::materialise`], tiled over
//! the device's row blocks). The same type runs on the CPU, in `f64`, with
//! the same calls, so an iterative solver written against it (our Lanczos in
//! [`crate::eksvd::eigensolver`] takes `|v| op.apply(v)`) runs on either.

use nalgebra::{DMatrix, DVector};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::precision::Precision;
use crate::kernel::Kernel;
use crate::resident::DeviceMatrix;

/// `K(X, Z)` as an operator, X and Z resident on `device`.
#[derive(Clone, Debug)]
pub struct KernelOperator {
    device: Device,
    kernel: Kernel,
    x: DeviceMatrix,
    z: DeviceMatrix,
    square: bool,
}

impl KernelOperator {
    /// Uploads X and Z once, in `precision`.
    ///
    /// Errors: invalid kernel, empty or non-finite inputs, differing numbers
    /// of columns, an unsupported precision, device errors.
    pub fn new(device: &Device, kernel: Kernel, x: &DMatrix<f64>, z: &DMatrix<f64>, precision: Precision) -> Result<Self> {
        kernel.validate()?;
        crate::linalg::check_dim("columns of z vs columns of x", x.ncols(), z.ncols())?;
        let xd = device.upload(x, precision)?;
        let zd = device.upload(z, precision)?;
        Ok(KernelOperator { device: device.clone(), kernel, x: xd, z: zd, square: false })
    }

    /// The square operator `K(X, X)` (one upload).
    pub fn square(device: &Device, kernel: Kernel, x: &DMatrix<f64>, precision: Precision) -> Result<Self> {
        kernel.validate()?;
        let xd = device.upload(x, precision)?;
        Ok(KernelOperator { device: device.clone(), kernel, x: xd.clone(), z: xd, square: true })
    }

    /// Over matrices already on `device`.
    pub fn from_resident(device: &Device, kernel: Kernel, x: DeviceMatrix, z: DeviceMatrix) -> Result<Self> {
        kernel.validate()?;
        crate::linalg::check_dim("columns of z vs columns of x", x.ncols(), z.ncols())?;
        if x.precision() != z.precision() {
            return Err(Error::PrecisionMismatch { expected: x.precision(), found: z.precision() });
        }
        Ok(KernelOperator { device: device.clone(), kernel, x, z, square: false })
    }

    /// n, the rows of K.
    pub fn nrows(&self) -> usize {
        self.x.nrows()
    }

    /// m, the columns of K.
    pub fn ncols(&self) -> usize {
        self.z.nrows()
    }

    /// The device holding X and Z.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// `K(X, Z) V` for host V (m x c): V goes up, the n x c result comes back.
    pub fn apply(&self, v: &DMatrix<f64>) -> Result<DMatrix<f64>> {
        let vd = self.device.upload(v, self.x.precision())?;
        self.device.to_host(&self.apply_resident(&vd)?)
    }

    /// `K(X, Z) V` for resident V, left on the device.
    pub fn apply_resident(&self, v: &DeviceMatrix) -> Result<DeviceMatrix> {
        self.device.resident_kernel_matvec(&self.kernel, &self.x, &self.z, v)
    }

    /// Columns `K(X, z_j)` for `j` in `indices` (n x len), one dispatch.
    /// For the square operator these are Cholesky's pivot columns.
    pub fn columns(&self, indices: &[usize]) -> Result<DeviceMatrix> {
        if self.square {
            return self.device.resident_kernel_columns(&self.kernel, &self.x, indices);
        }
        let points = self.device.resident_gather_rows(&self.z, indices)?;
        self.device.resident_kernel_matrix(&self.kernel, &self.x, &points)
    }

    /// `k(x_i, x_i)` of the square operator.
    ///
    /// Errors: `InvalidParameter` for a non-square operator.
    pub fn diagonal(&self) -> Result<DVector<f64>> {
        if !self.square {
            return Err(Error::InvalidParameter { name: "diagonal", reason: "the operator K(X, Z) with Z != X has no diagonal".into() });
        }
        self.device.resident_kernel_diagonal(&self.kernel, &self.x)
    }

    /// The whole matrix `K(X, Z)` on the device (n x m), computed tile by
    /// tile within the device's binding limits.
    pub fn materialise(&self) -> Result<DeviceMatrix> {
        self.device.resident_kernel_matrix(&self.kernel, &self.x, &self.z)
    }
}
