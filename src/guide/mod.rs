//! The user guide: what to reach for and how the pieces fit, one chapter per
//! topic. Every Rust code block here is compiled and run as a test.
//!
//! 1. [`devices`]: choosing a device, precision, models that keep their device.
//! 2. [`inputs`]: data from nalgebra, plain slices or ndarray.
//! 3. [`resident`]: data that stay on the device between operations.
//! 4. [`eksvd`]: kernel SVD for several data sources.
//! 5. [`mklaren`]: multiple-kernel low-rank regression.
//! 6. [`psd`]: PSD models of non-negative functions.
//! 7. [`selection`]: choosing parameters by cross-validation.
//! 8. [`saving`]: saving and loading fitted models.
//! 9. [`python`]: the Python package (scikit-learn estimators).
//! 10. [`distributed`]: fits sharded over several devices (MPI or threads).
//!
//! The design behind them (layers, where data cross between host and device)
//! is in `DESIGN.md` at the root of the repository.

#[doc = include_str!("devices.md")]
pub mod devices {}
#[doc = include_str!("inputs.md")]
pub mod inputs {}
#[doc = include_str!("resident.md")]
pub mod resident {}
#[doc = include_str!("eksvd.md")]
pub mod eksvd {}
#[doc = include_str!("mklaren.md")]
pub mod mklaren {}
#[doc = include_str!("psd.md")]
pub mod psd {}
#[doc = include_str!("selection.md")]
pub mod selection {}
#[doc = include_str!("saving.md")]
pub mod saving {}
#[doc = include_str!("python.md")]
pub mod python {}
#[doc = include_str!("distributed.md")]
pub mod distributed {}
