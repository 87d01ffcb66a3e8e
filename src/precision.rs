//! The scalar type of device-resident data and of the arithmetic on it.
//!
//! The lowest layer of the crate with [`crate::error`]: the error type names
//! it, and the kernel, GPU, device and method layers read it.

/// Scalar type of a device-resident matrix and of the arithmetic on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    /// 32-bit floats: every adapter.
    F32,
    /// 64-bit floats: adapters with `SHADER_F64` (NVIDIA's and Mesa's Vulkan
    /// drivers have it); the CPU path always.
    F64,
}

impl Precision {
    /// Bytes per element.
    pub fn bytes(self) -> usize {
        match self {
            Precision::F32 => 4,
            Precision::F64 => 8,
        }
    }
}
