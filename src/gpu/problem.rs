//! The descriptors the shaders read: one product problem ([`Problem`], and
//! [`ProblemF64`] with `f64` kernel parameters), the row-reduction job
//! ([`Reduce`]), the kernel's encoding ([`KernelCode`]) and the flags of a
//! problem, laid out as `shaders/problem.wgsl` and `row_reduce.wgsl` declare
//! them (std430).

use bytemuck::{Pod, Zeroable};

use crate::kernel::Kernel;

/// Add the statistic to what the output holds.
pub(crate) const FLAG_ACCUMULATE: u32 = 1;
/// Apply the kernel function to the statistic (the last depth chunk).
pub(crate) const FLAG_APPLY: u32 = 2;
/// Weight the depth by `w` (`A' diag(w) B'^T`).
pub(crate) const FLAG_WEIGHTED: u32 = 4;
/// Stage A and B four depth elements at a time (variants with vec4 global
/// loads; set where [`Problem::rows_allow_vec4`]).
pub(crate) const FLAG_VEC4: u32 = 8;

/// One problem of a batch, as the product shaders (`problem.wgsl`)
/// read it (std430): element offsets and strides of A, B and C (see the
/// shader's header), flags, the kernel, and the weights' offset.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct Problem {
    pub(crate) rows: u32,
    pub(crate) cols: u32,
    pub(crate) depth: u32,
    pub(crate) a_off: u32,
    pub(crate) b_off: u32,
    pub(crate) c_off: u32,
    pub(crate) flags: u32,
    pub(crate) kind: u32,
    pub(crate) a_rs: u32,
    pub(crate) a_cs: u32,
    pub(crate) b_rs: u32,
    pub(crate) b_cs: u32,
    pub(crate) c_rs: u32,
    pub(crate) c_cs: u32,
    pub(crate) w_off: u32,
    pub(crate) degree: u32,
    /// The pair matvec's element offset of W (in the weights binding).
    pub(crate) u_off: u32,
    pub(crate) gamma: f32,
    pub(crate) coef0: f32,
}

impl Problem {
    /// True where every row of A and B the problem reads is four
    /// contiguous, 4-aligned elements at a time: unit column strides, and
    /// offsets, row strides and depth multiples of 4. Then element `(i, k)`
    /// for `k` a multiple of 4 starts a vec4 of the operand's binding (its
    /// buffer a multiple of 4 elements long, see `GpuContext::zeros`), and
    /// `(i, k + 3)` is still in the row.
    pub(crate) fn rows_allow_vec4(&self) -> bool {
        self.a_cs == 1 && self.b_cs == 1 && [self.depth, self.a_off, self.a_rs, self.b_off, self.b_rs].iter().all(|v| v % 4 == 0)
    }

    /// Sets [`FLAG_VEC4`] where `vec4_loads` (the variant has them) and
    /// the rows allow it.
    pub(crate) fn with_vec4_where_allowed(mut self, vec4_loads: bool) -> Self {
        if vec4_loads && self.rows_allow_vec4() {
            self.flags |= FLAG_VEC4;
        }
        self
    }
}

/// The kernel as the shaders encode it (parameters kept in `f64`; the f32
/// shaders round them).
#[derive(Debug, Clone, Copy)]
pub(crate) struct KernelCode {
    pub(crate) kind: u32,
    pub(crate) gamma: f64,
    pub(crate) coef0: f64,
    pub(crate) degree: u32,
}

impl KernelCode {
    /// True for the distance kernels (RBF, Laplacian): the statistic is a squared distance.
    pub(crate) fn is_distance(&self) -> bool {
        self.kind == 1 || self.kind == 2
    }

    /// True for the polynomial kernel (its power is a loop in the shaders).
    pub(crate) fn is_polynomial(&self) -> bool {
        self.kind == 3
    }

    pub(crate) fn of(kernel: &Kernel) -> Self {
        match *kernel {
            Kernel::Linear => KernelCode { kind: 0, gamma: 0.0, coef0: 0.0, degree: 0 },
            Kernel::Rbf { gamma } => KernelCode { kind: 1, gamma, coef0: 0.0, degree: 0 },
            Kernel::Laplacian { gamma } => KernelCode { kind: 2, gamma, coef0: 0.0, degree: 0 },
            Kernel::Polynomial { gamma, coef0, degree } => KernelCode { kind: 3, gamma, coef0, degree },
            Kernel::Sigmoid { gamma, coef0 } => KernelCode { kind: 4, gamma, coef0, degree: 0 },
        }
    }
}

/// `Problem` with `f64` kernel parameters, as the f64 generic shader reads it.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(crate) struct ProblemF64 {
    /// The `u32` fields of [`Problem`], `rows` to `u_off`.
    pub(crate) words: [u32; 17],
    /// Alignment of `gamma` (std430: 8 bytes).
    pub(crate) pad: u32,
    pub(crate) gamma: f64,
    pub(crate) coef0: f64,
}

/// The row-reduction job of `row_reduce.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(crate) struct Reduce {
    pub(crate) rows: u32,
    pub(crate) cols: u32,
    pub(crate) x_off: u32,
    pub(crate) x_rs: u32,
    pub(crate) x_cs: u32,
    pub(crate) out_off: u32,
    pub(crate) mode: u32,
    pub(crate) accumulate: u32,
}
