//! The device handle: one API, two execution paths.
//!
//! The operations here take and return host matrices (a convenience: on a
//! GPU each call uploads its operands and reads its result back). Every
//! operation validates its inputs the same way on both paths, then runs
//! either the multi-threaded CPU code (`f32` or `f64`, the caller's type) or
//! the WGSL shaders (`f32` inside, converted back to the caller's type).
//! Data that should stay on the device between operations, in `f32` or
//! `f64`, goes through [`Device::upload`] and the `resident_*` operations of
//! [`crate::resident`]; the methods' fits use those.

use std::sync::Arc;

use nalgebra::{DMatrix, DVector};

use crate::error::{Error, Result};
use crate::gpu::{GpuContext, GpuOptions};
use crate::input::AsMatrix;
use crate::kernel::{self, Kernel};
use crate::linalg::{self, check_dim, check_matrix, MatrixProduct, Real};
use crate::memory;
use crate::precision::Precision;
use crate::sparse::{self, CsrMatrix};

/// Where computations run. Cheap to clone (the GPU context is shared).
#[derive(Clone, Debug)]
pub enum Device {
    /// Multi-threaded CPU code (rayon + faer), in the caller's precision.
    Cpu,
    /// WGSL compute shaders through wgpu, in `f32`.
    Gpu(Arc<GpuContext>),
}

/// Environment variable read by [`Device::auto`]: `cpu` forces the CPU path,
/// `gpu` accepts any adapter including a software one (lavapipe).
pub const DEVICE_ENV: &str = "GRAMIAN_DEVICE";

impl Device {
    /// The best device available: a hardware GPU when one exists, otherwise
    /// the CPU path (with one INFO log line). A software Vulkan adapter is used
    /// only when asked for with `GRAMIAN_DEVICE=gpu`, because it is slower
    /// than the CPU path; `GRAMIAN_DEVICE=cpu` forces the CPU.
    pub fn auto() -> Device {
        let wanted = std::env::var(DEVICE_ENV).unwrap_or_default().to_lowercase();
        if wanted == "cpu" {
            return Device::Cpu;
        }
        let allow_software = wanted == "gpu";
        if !allow_software && !gpu_device_nodes_present() {
            // Probing the Vulkan loader on such a machine loads Mesa's
            // software drivers, which print errors of their own.
            log::info!("gramian: no GPU device nodes (/dev/dri/renderD*, /dev/nvidia*); using the CPU path");
            return Device::Cpu;
        }
        match GpuContext::new(&GpuOptions { allow_software, ..Default::default() }) {
            Ok(ctx) => Device::Gpu(Arc::new(ctx)),
            Err(e) => {
                log::info!("gramian: {e}; falling back to the CPU path");
                Device::Cpu
            }
        }
    }

    /// The device of one rank of a sharded fit ([`crate::distributed`]):
    /// like [`Device::auto`], but the `local_rank`-th GPU of the node
    /// (round-robin when the node has fewer GPUs than ranks), and the CPU
    /// path where there is none.
    pub fn for_local_rank(local_rank: usize) -> Device {
        let wanted = std::env::var(DEVICE_ENV).unwrap_or_default().to_lowercase();
        if wanted == "cpu" {
            return Device::Cpu;
        }
        let allow_software = wanted == "gpu";
        if !allow_software && !gpu_device_nodes_present() {
            return Device::Cpu;
        }
        match GpuContext::new(&GpuOptions { allow_software, adapter: local_rank, ..Default::default() }) {
            Ok(ctx) => Device::Gpu(Arc::new(ctx)),
            Err(e) => {
                log::info!("gramian: {e}; rank {local_rank} of this node falls back to the CPU path");
                Device::Cpu
            }
        }
    }

    /// The CPU path.
    pub fn cpu() -> Device {
        Device::Cpu
    }

    /// A GPU, hardware or software (a software adapter is accepted because
    /// the caller asked for a GPU explicitly).
    ///
    /// Errors: [`Error::NoGpuAdapter`] when there is none.
    pub fn gpu() -> Result<Device> {
        Device::gpu_with(&GpuOptions { allow_software: true, ..Default::default() })
    }

    /// A GPU opened with explicit options (e.g. a forced tile limit).
    pub fn gpu_with(options: &GpuOptions) -> Result<Device> {
        Ok(Device::Gpu(Arc::new(GpuContext::new(options)?)))
    }

    /// True for the GPU path.
    pub fn is_gpu(&self) -> bool {
        matches!(self, Device::Gpu(_))
    }

    /// A short description, e.g. `cpu (2 threads)` or `gpu: NVIDIA H200 (Vulkan)`.
    pub fn describe(&self) -> String {
        match self {
            Device::Cpu => format!("cpu ({} threads)", rayon::current_num_threads()),
            Device::Gpu(ctx) => {
                let a = ctx.adapter();
                format!("gpu: {} ({}{})", a.name, a.backend, if a.is_software { ", software" } else { "" })
            }
        }
    }

    /// Cross kernel matrix `K(X, Z)_{ij} = k(x_i, z_j)`, n x m, for X (n x d)
    /// and Z (m x d); n != m is fine (asymmetric blocks).
    ///
    /// Errors (every operation here, both paths): `Empty`, `NonFinite` and
    /// `DimensionMismatch` inputs, invalid kernel parameters, and
    /// [`Error::Overflow`] when finite inputs give a non-finite result
    /// (e.g. entries near `1e200` in a linear or polynomial kernel, or in a
    /// product).
    ///
    /// `x` and `z` are any [`AsMatrix`] input with the same element type
    /// (`DMatrix<f64>` and `DMatrix<f32>` borrowed, [`RowMajor`](crate::input::RowMajor)
    /// slices, views, `ndarray` arrays converted once); the result has that
    /// element type. So are the matrix inputs of every operation here.
    pub fn kernel_matrix<X, Z>(&self, kernel: &Kernel, x: &X, z: &Z) -> Result<DMatrix<X::Elem>>
    where
        X: AsMatrix + ?Sized,
        Z: AsMatrix<Elem = X::Elem> + ?Sized,
    {
        self.kernel_matrix_dense(kernel, &*x.as_matrix()?, &*z.as_matrix()?)
    }

    fn kernel_matrix_dense<T: Real>(&self, kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>) -> Result<DMatrix<T>> {
        match self {
            // Checked for overflow tile by tile (no second pass over the output).
            Device::Cpu => kernel::kernel_matrix_cpu(kernel, x, z),
            Device::Gpu(ctx) => {
                kernel::check_pair(kernel, x, z)?;
                memory::check_host_matrix::<T>(x.nrows(), z.nrows(), "kernel matrix")?;
                kernel::check_distance_range(kernel, Precision::F32, kernel::row_norm_bound(x) + kernel::row_norm_bound(z))?;
                linalg::finite_result("kernel matrix", ctx.kernel_matrix(kernel, x, z)?)
            }
        }
    }

    /// Symmetric kernel matrix `K(X, X)` (exactly symmetric on both paths).
    pub fn kernel_matrix_symmetric<X: AsMatrix + ?Sized>(&self, kernel: &Kernel, x: &X) -> Result<DMatrix<X::Elem>> {
        let x = x.as_matrix()?;
        Ok(symmetrised(self.kernel_matrix_dense(kernel, &x, &x)?))
    }

    /// One kernel column `K(X, z)_i = k(x_i, z)` against the point `z`
    /// (length d). Incomplete Cholesky uses `z = x_p`, a pivot row.
    pub fn kernel_column<X: AsMatrix + ?Sized>(&self, kernel: &Kernel, x: &X, z: &[X::Elem]) -> Result<DVector<X::Elem>> {
        self.kernel_column_dense(kernel, &*x.as_matrix()?, z)
    }

    fn kernel_column_dense<T: Real>(&self, kernel: &Kernel, x: &DMatrix<T>, z: &[T]) -> Result<DVector<T>> {
        let column = match self {
            Device::Cpu => kernel::kernel_column_cpu(kernel, x, z)?,
            Device::Gpu(ctx) => {
                let zm = DMatrix::from_row_slice(1, z.len(), z);
                kernel::check_pair(kernel, x, &zm)?;
                kernel::check_distance_range(kernel, Precision::F32, kernel::row_norm_bound(x) + kernel::row_norm_bound(&zm))?;
                ctx.kernel_matrix(kernel, x, &zm)?.column(0).into_owned()
            }
        };
        linalg::finite_vector("kernel column", column)
    }

    /// Column `i` of `K(X, X)`.
    pub fn kernel_column_of<X: AsMatrix + ?Sized>(&self, kernel: &Kernel, x: &X, i: usize) -> Result<DVector<X::Elem>> {
        let x = x.as_matrix()?;
        if i >= x.nrows() {
            return Err(Error::IndexOutOfRange { what: "rows of x", index: i, len: x.nrows() });
        }
        let z: Vec<X::Elem> = x.row(i).iter().copied().collect();
        self.kernel_column_dense(kernel, &x, &z)
    }

    /// Diagonal `k(x_i, x_i)`; O(n d), computed on the CPU on every device.
    pub fn kernel_diagonal<X: AsMatrix + ?Sized>(&self, kernel: &Kernel, x: &X) -> Result<DVector<X::Elem>> {
        kernel.diagonal(&*x.as_matrix()?)
    }

    /// `Phi^T Phi` (d x d), the sum over samples of `phi_i phi_i^T`: the
    /// (uncentred) covariance of explicit features, Phi n x d.
    pub fn gram<X: AsMatrix + ?Sized>(&self, phi: &X) -> Result<DMatrix<X::Elem>> {
        let phi = &*phi.as_matrix()?;
        check_matrix("phi", phi)?;
        memory::check_host_matrix::<X::Elem>(phi.ncols(), phi.ncols(), "Gram matrix")?;
        let g = match self {
            Device::Cpu => linalg::gram_tall(phi),
            Device::Gpu(ctx) => symmetrised(ctx.product(phi, phi, MatrixProduct::AtB)?),
        };
        linalg::finite_result("Gram matrix", g)
    }

    /// `Phi Phi^T` (n x n): the linear kernel matrix of the rows of Phi.
    pub fn outer_gram<X: AsMatrix + ?Sized>(&self, phi: &X) -> Result<DMatrix<X::Elem>> {
        let phi = &*phi.as_matrix()?;
        check_matrix("phi", phi)?;
        memory::check_host_matrix::<X::Elem>(phi.nrows(), phi.nrows(), "outer Gram matrix")?;
        let g = match self {
            Device::Cpu => linalg::matmul_nt(phi, phi),
            Device::Gpu(ctx) => symmetrised(ctx.product(phi, phi, MatrixProduct::ABt)?),
        };
        linalg::finite_result("outer Gram matrix", g)
    }

    /// `A B`, `A B^T` or `A^T B` as `form` says.
    pub fn matmul<A, B>(&self, a: &A, b: &B, form: MatrixProduct) -> Result<DMatrix<A::Elem>>
    where
        A: AsMatrix + ?Sized,
        B: AsMatrix<Elem = A::Elem> + ?Sized,
    {
        let (a, b) = (a.as_matrix()?, b.as_matrix()?);
        let (a, b) = (&*a, &*b);
        check_product(a, b, form)?;
        let c = match self {
            Device::Cpu => linalg::product(a, b, form),
            Device::Gpu(ctx) => ctx.product(a, b, form)?,
        };
        linalg::finite_result("matrix product", c)
    }

    /// Many products `A_i B_i` (or the other forms) at once: on the GPU
    /// recorded together and run in one submission (a product too large for
    /// one output band runs on its own), on the CPU in parallel.
    pub fn batched_matmul<T: Real>(&self, pairs: &[(&DMatrix<T>, &DMatrix<T>)], form: MatrixProduct) -> Result<Vec<DMatrix<T>>> {
        let mut entries = 0usize;
        for (a, b) in pairs {
            check_product(a, b, form)?;
            entries = entries.checked_add(product_entries(a, b, form)?).ok_or_else(|| Error::host_memory("batched products overflow the address space"))?;
        }
        memory::check_host::<T>(entries, "batched products")?;
        let products = match self {
            Device::Cpu => {
                use rayon::prelude::*;
                pairs.par_iter().map(|(a, b)| linalg::product(a, b, form)).collect()
            }
            Device::Gpu(ctx) => ctx.batched_product(pairs, form)?,
        };
        products.into_iter().map(|c| linalg::finite_result("batched matrix product", c)).collect()
    }

    /// Cross kernel matrix `K(X, Z)_{ij} = k(x_i, z_j)` (n x m) for sparse
    /// CSR inputs X (n x d) and Z (m x d), from sparse inner products and
    /// squared row norms (see [`crate::sparse`]); equal to
    /// [`Device::kernel_matrix`] of the dense copies up to the summation
    /// order. Computed on the CPU on every device.
    ///
    /// Errors: as [`Device::kernel_matrix`] (`Empty`, `NonFinite` at the
    /// stored entry's row and column, `DimensionMismatch`, invalid kernel
    /// parameters, `Overflow`).
    pub fn kernel_matrix_sparse<T: Real>(&self, kernel: &Kernel, x: &CsrMatrix<T>, z: &CsrMatrix<T>) -> Result<DMatrix<T>> {
        sparse::kernel_matrix_sparse_cpu(kernel, x, z)
    }

    /// `K(X, Z) V` (n x c) for sparse CSR inputs X (n x d), Z (m x d) and V
    /// (m x c), without storing `K(X, Z)` (see [`crate::sparse`]); equal to
    /// [`Device::kernel_matvec`] of the dense copies up to the summation
    /// order. Computed on the CPU on every device.
    pub fn kernel_matvec_sparse<T, V>(&self, kernel: &Kernel, x: &CsrMatrix<T>, z: &CsrMatrix<T>, v: &V) -> Result<DMatrix<T>>
    where
        T: Real,
        V: AsMatrix<Elem = T> + ?Sized,
    {
        let v = v.as_matrix()?;
        memory::check_host_matrix::<T>(x.nrows(), v.ncols(), "kernel matrix-vector product")?;
        sparse::kernel_matvec_sparse_cpu(kernel, x, z, &v)
    }

    /// `K(X, Z) V` (n x c) for V (m x c), without storing `K(X, Z)`: the
    /// kernel is evaluated tile by tile and multiplied at once, so memory is
    /// O((n + m)(d + c)) however large n x m is.
    pub fn kernel_matvec<X, Z, V>(&self, kernel: &Kernel, x: &X, z: &Z, v: &V) -> Result<DMatrix<X::Elem>>
    where
        X: AsMatrix + ?Sized,
        Z: AsMatrix<Elem = X::Elem> + ?Sized,
        V: AsMatrix<Elem = X::Elem> + ?Sized,
    {
        let (x, z, v) = (x.as_matrix()?, z.as_matrix()?, v.as_matrix()?);
        let (x, z, v) = (&*x, &*z, &*v);
        kernel::check_pair(kernel, x, z)?;
        check_matrix("v", v)?;
        check_dim("rows of v vs rows of z", z.nrows(), v.nrows())?;
        memory::check_host_matrix::<X::Elem>(x.nrows(), v.ncols(), "kernel matrix-vector product")?;
        let kv = match self {
            Device::Cpu => kernel::kernel_matvec_cpu(kernel, x, z, v)?,
            Device::Gpu(ctx) => {
                kernel::check_distance_range(kernel, Precision::F32, kernel::row_norm_bound(x) + kernel::row_norm_bound(z))?;
                ctx.kernel_matvec(kernel, x, z, v)?
            }
        };
        linalg::finite_result("kernel matrix-vector product", kv)
    }
}


/// Copies the lower triangle onto the upper one, so that a matrix that is
/// symmetric up to rounding (f32 GPU tiles, GEMM order) is exactly symmetric.
fn symmetrised<T: Real>(mut m: DMatrix<T>) -> DMatrix<T> {
    let n = m.nrows();
    for j in 0..n {
        for i in (j + 1)..n {
            m[(j, i)] = m[(i, j)];
        }
    }
    m
}

/// Checks the operands of a product and that its output fits the host.
fn check_product<T: Real>(a: &DMatrix<T>, b: &DMatrix<T>, form: MatrixProduct) -> Result<()> {
    check_matrix("a", a)?;
    check_matrix("b", b)?;
    match form {
        MatrixProduct::AB => check_dim("inner dimension of A B", a.ncols(), b.nrows())?,
        MatrixProduct::ABt => check_dim("inner dimension of A B^T", a.ncols(), b.ncols())?,
        MatrixProduct::AtB => check_dim("inner dimension of A^T B", a.nrows(), b.nrows())?,
    }
    memory::check_host::<T>(product_entries(a, b, form)?, "matrix product")
}

/// Entries of the output of a product.
fn product_entries<T: Real>(a: &DMatrix<T>, b: &DMatrix<T>, form: MatrixProduct) -> Result<usize> {
    let (rows, cols) = match form {
        MatrixProduct::AB => (a.nrows(), b.ncols()),
        MatrixProduct::ABt => (a.nrows(), b.nrows()),
        MatrixProduct::AtB => (a.ncols(), b.ncols()),
    };
    memory::entries(rows, cols, "matrix product")
}

/// Whether this machine can have a hardware GPU: on Linux, a DRM render node
/// or an NVIDIA device node; elsewhere always true (the adapter probe decides).
fn gpu_device_nodes_present() -> bool {
    if !cfg!(target_os = "linux") {
        return true;
    }
    let nvidia = std::path::Path::new("/dev/nvidia0").exists() || std::path::Path::new("/dev/nvidiactl").exists();
    let render = std::fs::read_dir("/dev/dri").map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().starts_with("renderD"))).unwrap_or(false);
    nvidia || render
}
