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

/// The precision a fit asks for on its device: a setting of the methods'
/// params types (`.precision(..)` on [`crate::eksvd::EksvdParams`],
/// [`crate::mklaren::MklarenParams`], the PSD params, ...), resolved against
/// the device by [`crate::Device::working_precision`].
///
/// - [`WorkingPrecision::Auto`] (the default): each method's own choice,
///   `f64` on a GPU where the adapter has `SHADER_F64` and `f32` otherwise
///   for the methods that run in either ([`crate::Device::best_precision`]);
///   the PSD models use `f64` on such a GPU and compute on the host
///   otherwise.
/// - [`WorkingPrecision::F64`]: `f64` arithmetic on the device; a GPU
///   without `SHADER_F64` is `Unsupported` at fit.
/// - [`WorkingPrecision::F32`]: the GPU work in `f32` where the method
///   supports it (eKSVD's feature maps and products, mklaren's and the
///   low-rank ridges' kernel columns through the read-back path, the
///   full-kernel ridge's kernel matrices); the methods that need `f64` (the
///   PSD models and their baselines, whose duality-gap certificate and
///   Newton steps need the digits) reject it with
///   `InvalidParameter` from their `validate`.
///
/// On the CPU every fit computes in `f64` whatever the setting (the CPU
/// path's arithmetic is `f64`; `F32` there changes nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum WorkingPrecision {
    /// The method's own choice (see the type's docs).
    #[default]
    Auto,
    /// `f32` device arithmetic where the method supports it.
    F32,
    /// `f64` device arithmetic, required.
    F64,
}
