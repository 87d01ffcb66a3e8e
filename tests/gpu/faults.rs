//! Fits interrupted by the device: a device-memory budget
//! ([`GpuOptions::max_device_bytes`]) too small for a fit's buffers makes
//! an allocation fail part-way through it. The fit then returns a typed
//! [`Error::OutOfMemory`] (or finishes another way with the same result),
//! never panics, and releases every buffer it had: the context's byte
//! ledger ([`GpuContext::device_bytes_held`]) is back at its value before
//! the fit.

use crate::common;

use common::{gpu_device, rng};
use gramian::eksvd::{solve_dual, CouplingMatrix, Eigensolver};
use gramian::gpu::GpuContext;
use gramian::mklaren::MklarenParams;
use gramian::psd::{BaseMeasure, DensityParams, Regularisation, SolverOptions};
use gramian::{Device, Error, GpuOptions, Kernel, MultiSource};
use nalgebra::{DMatrix, DVector};
use rand::Rng;

/// How a fit on a device with a budget ended.
#[derive(PartialEq)]
enum Ending {
    /// The unlimited fit's result.
    Finished,
    /// `OutOfMemory` at its first allocation.
    Refused,
    /// `OutOfMemory` after it had allocated something.
    Interrupted,
}

/// Runs `fit` (returning numbers to compare) on an unlimited device, then
/// on devices with budgets between nothing and the bytes it allocated
/// (bisection: a budget that lets it finish lowers the upper end, one
/// that refuses its first allocation raises the lower end) until one
/// interrupts it part-way, at most 16 budgets. Each fit returns the
/// unlimited fit's numbers (within `tolerance`, relative to their largest
/// magnitude) or `OutOfMemory`, and leaves the ledger at 0 once its result
/// is dropped. Returns whether a budget interrupted the fit.
fn interrupted_fit(what: &str, tolerance: f64, fit: impl Fn(&Device) -> Result<Vec<f64>, Error>) -> Option<bool> {
    let device = gpu_device(GpuOptions::default())?;
    let reference = fit(&device).unwrap_or_else(|e| panic!("{what}: the unlimited fit failed: {e}"));
    let before = device.device_counters();
    fit(&device).unwrap();
    let allocated = device.device_counters().since(&before).allocated_bytes;
    assert!(allocated > 0, "{what}: the fit allocated nothing on the device");
    let scale = reference.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let (mut refused, mut finished) = (0u64, allocated);
    for _ in 0..16 {
        let budget = refused + (finished - refused) / 2;
        let device = gpu_device(GpuOptions { max_device_bytes: Some(budget), ..Default::default() })?;
        let Device::Gpu(ctx) = &device else { panic!("gpu_device returned the CPU") };
        let ctx: &GpuContext = ctx;
        assert_eq!(ctx.device_bytes_held(), 0);
        let ending = match fit(&device) {
            Ok(values) => {
                let gap = values.iter().zip(&reference).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
                assert!(values.len() == reference.len() && gap <= tolerance * scale, "{what}, budget {budget} of {allocated} bytes: the fit differs by {gap:e}");
                Ending::Finished
            }
            Err(Error::OutOfMemory { .. }) if device.device_counters().allocations > 0 => Ending::Interrupted,
            Err(Error::OutOfMemory { .. }) => Ending::Refused,
            Err(e) => panic!("{what}, budget {budget} of {allocated} bytes: {e} is not OutOfMemory"),
        };
        assert_eq!(ctx.device_bytes_held(), 0, "{what}, budget {budget} of {allocated} bytes: buffers left after the fit");
        match ending {
            Ending::Interrupted => return Some(true),
            Ending::Finished => finished = budget,
            Ending::Refused => refused = budget,
        }
        if finished - refused <= 1 {
            break;
        }
    }
    Some(false)
}

#[test]
fn fits_interrupted_by_device_memory_release_their_buffers() {
    let mut rng = rng();
    // mklaren, X on the device (two RBF kernels on one input).
    let (n, d) = (400, 3);
    let x = DMatrix::<f64>::from_fn(n, d, |_, _| rng.random_range(-1.0..1.0));
    let y = DVector::from_fn(n, |i, _| (2.0 * x[(i, 0)]).sin() + x[(i, 1)]);
    let kernels = [Kernel::rbf(0.3).unwrap(), Kernel::rbf(3.0).unwrap()];
    let params = MklarenParams::new(8).lookahead(3).kernels(&kernels);
    let Some(mklaren) = interrupted_fit("mklaren", 1e-12, |device| Ok(params.fit_inputs(device, &[&x, &x], &y)?.training_fit().as_slice().to_vec())) else { return };
    // The matrix-free eKSVD Dual (Krylov basis on the device).
    let shared = DMatrix::<f64>::from_fn(150, 3, |_, _| rng.random_range(-1.0..1.0));
    let sources: Vec<DMatrix<f64>> = (0..3).map(|_| shared.map(|v| v + 0.3 * rng.random_range(-1.0..1.0))).collect();
    let data = MultiSource::paired(sources).unwrap();
    let coupling = CouplingMatrix::from_kernel(Kernel::rbf(0.3).unwrap(), &data).unwrap();
    let solver = Eigensolver::Lanczos { tolerance: 1e-10, max_restarts: 300 };
    let eksvd = interrupted_fit("eKSVD Dual", 1e-8, |device| Ok(solve_dual(device, &coupling, 3, &solver, 7)?.eigenvalues.as_slice().to_vec())).expect("a GPU");
    // The PSD density, FISTA's state on the device.
    let z = DMatrix::<f64>::from_fn(300, 2, |_, _| 0.5 * rng.random_range(-1.0..1.0));
    let density = DensityParams::new(Kernel::gaussian_with_width(0.8).unwrap())
        .unwrap()
        .regularisation(Regularisation::new().trace(1e-3).quadratic(1e-4))
        .base_measure(BaseMeasure::isotropic_gaussian(2, 2.0).unwrap())
        .nystrom(30, 3)
        .solver(SolverOptions { tolerance: 1e-6, max_iterations: 3000, check_every: 2 });
    // Both fits are certified to the gap: their objectives agree to it.
    let psd = interrupted_fit("PSD density", 1e-5, |device| Ok(vec![density.fit(device, &z)?.report().primal])).expect("a GPU");
    // Between refusing the first allocation and finishing, some budget
    // stops every fit part-way.
    for (what, interrupted) in [("mklaren", mklaren), ("eKSVD Dual", eksvd), ("PSD density", psd)] {
        assert!(interrupted, "{what}: no budget interrupted the fit after its first allocation");
    }
}
