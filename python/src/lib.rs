//! `gramian._core`: the Rust side of the Python package `gramian`.
//!
//! Thin bindings over the library: every function takes C-contiguous
//! `float64` numpy arrays (the pure-Python layer in `gramian/` validates and
//! converts its inputs first), releases the GIL while the library computes,
//! and returns new numpy arrays. Errors of the library become the Python
//! exceptions of `gramian.exceptions` (the table is in `src/errors.rs`); a panic is caught at
//! the boundary and raised as `gramian.exceptions.GramianError`, never as
//! PyO3's `PanicException`.

use pyo3::prelude::*;

mod convert;
mod device;
mod eksvd;
mod errors;
mod kernels;
mod mklaren;
#[cfg(feature = "neural")]
mod neural;
mod psd;

/// The extension module.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(device::device_description, m)?)?;
    m.add_function(wrap_pyfunction!(kernels::kernel_matrix, m)?)?;
    m.add_function(wrap_pyfunction!(kernels::kernel_matvec, m)?)?;
    m.add_function(wrap_pyfunction!(kernels::matmul, m)?)?;
    m.add_function(wrap_pyfunction!(kernels::gram, m)?)?;
    m.add_function(wrap_pyfunction!(kernels::kernel_matrix_sparse, m)?)?;
    m.add_function(wrap_pyfunction!(kernels::kernel_matvec_sparse, m)?)?;
    m.add_function(wrap_pyfunction!(kernels::supports_precision, m)?)?;
    m.add_function(wrap_pyfunction!(kernels::_input_address, m)?)?;
    m.add_function(wrap_pyfunction!(device::adapters, m)?)?;
    m.add_class::<mklaren::MklarenModel>()?;
    m.add_function(wrap_pyfunction!(mklaren::fit_mklaren, m)?)?;
    m.add_function(wrap_pyfunction!(mklaren::load_mklaren, m)?)?;
    m.add_class::<mklaren::LowRankModel>()?;
    m.add_function(wrap_pyfunction!(mklaren::fit_low_rank, m)?)?;
    m.add_function(wrap_pyfunction!(mklaren::load_low_rank, m)?)?;
    m.add_class::<mklaren::FullKernelModel>()?;
    m.add_function(wrap_pyfunction!(mklaren::fit_full_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(mklaren::load_full_kernel, m)?)?;
    m.add_class::<psd::DensityModel>()?;
    m.add_function(wrap_pyfunction!(psd::fit_density, m)?)?;
    m.add_function(wrap_pyfunction!(psd::load_density, m)?)?;
    m.add_class::<psd::QuantileModel>()?;
    m.add_function(wrap_pyfunction!(psd::fit_quantiles, m)?)?;
    m.add_function(wrap_pyfunction!(psd::load_quantiles, m)?)?;
    m.add_class::<psd::HeteroscedasticModel>()?;
    m.add_function(wrap_pyfunction!(psd::fit_heteroscedastic, m)?)?;
    m.add_function(wrap_pyfunction!(psd::load_heteroscedastic, m)?)?;
    m.add_class::<psd::BaselineDensityModel>()?;
    m.add_function(wrap_pyfunction!(psd::fit_baseline_density, m)?)?;
    m.add_function(wrap_pyfunction!(psd::load_baseline_density, m)?)?;
    m.add_class::<psd::BaselineQuantileModel>()?;
    m.add_function(wrap_pyfunction!(psd::fit_baseline_quantiles, m)?)?;
    m.add_function(wrap_pyfunction!(psd::load_baseline_quantiles, m)?)?;
    m.add_class::<psd::BaselineHeteroscedasticModel>()?;
    m.add_function(wrap_pyfunction!(psd::fit_baseline_heteroscedastic, m)?)?;
    m.add_function(wrap_pyfunction!(psd::load_baseline_heteroscedastic, m)?)?;
    m.add_class::<eksvd::EksvdModel>()?;
    m.add_function(wrap_pyfunction!(eksvd::fit_eksvd, m)?)?;
    m.add_function(wrap_pyfunction!(eksvd::load_eksvd, m)?)?;
    #[cfg(feature = "neural")]
    {
        m.add_class::<neural::NeuralEksvdModel>()?;
        m.add_function(wrap_pyfunction!(neural::fit_neural_eksvd, m)?)?;
        m.add_function(wrap_pyfunction!(neural::load_neural_eksvd, m)?)?;
    }
    Ok(())
}
