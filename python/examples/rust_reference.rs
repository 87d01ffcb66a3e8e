//! The Rust API's results on data written by the Python tests
//! (`python/tests/test_rust_reference.py`), for the check that the Python
//! package computes what the library computes.
//!
//! ```text
//! rust_reference DIR N D M SEED
//! ```
//!
//! reads `DIR/x.bin` (N x D), `DIR/y.bin` (N) and `DIR/xt.bin` (M x D),
//! row-major little-endian `f64`, fits with the parameters below on the
//! CPU and writes each result to `DIR/<name>.bin` the same way:
//!
//! | file | fit | result |
//! |---|---|---|
//! | `mklaren.bin` | mklaren, rank 15, RBF gamma 0.5 and 2, look-ahead 10, lambda 0.01 | predictions on `xt` |
//! | `nystrom.bin` | stacked Nystrom ridge, rank 12, landmarks seeded by SEED, RBF gamma 0.5, lambda 0.1 | predictions on `xt` |
//! | `full.bin` | kernel ridge on the alignfc combination of RBF gamma 0.5 and 2, lambda 0.1 | predictions on `xt` |
//! | `density.bin` | PSD density on the first column, width 0.4, trace 1e-3, quadratic 1e-4, tolerance 1e-8 | density on `xt`'s first column |
//! | `eksvd.bin` | eKSVD, 2 components, sources `x` and `x^2`, random Fourier features (gamma 0.5, 64) seeded by SEED | scores of `xt` and `xt^2` (M x 4) |
//! | `kernel.bin` | Laplacian kernel gamma 0.7 | `K(x, xt)` (N x M) |

use std::error::Error as StdError;
use std::path::Path;

use gramian::eksvd::{Eigensolver, EksvdParams, FeatureMap, Solver};
use gramian::mklaren::{FullKernelRidgeParams, KernelCombination, LowRankMethod, LowRankRidgeParams, MklarenParams};
use gramian::psd::{DensityParams, Regularisation, SolverOptions};
use gramian::{Device, Kernel, MultiSource};
use nalgebra::{DMatrix, DVector};

fn read(dir: &Path, name: &str, rows: usize, cols: usize) -> Result<DMatrix<f64>, Box<dyn StdError>> {
    let bytes = std::fs::read(dir.join(name))?;
    if bytes.len() != rows * cols * 8 {
        return Err(format!("{name}: {} bytes, expected {rows} x {cols} f64", bytes.len()).into());
    }
    let values: Vec<f64> = bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
    Ok(DMatrix::from_row_slice(rows, cols, &values))
}

fn write(dir: &Path, name: &str, m: &DMatrix<f64>) -> Result<(), Box<dyn StdError>> {
    let mut bytes = Vec::with_capacity(m.len() * 8);
    for i in 0..m.nrows() {
        for j in 0..m.ncols() {
            bytes.extend_from_slice(&m[(i, j)].to_le_bytes());
        }
    }
    Ok(std::fs::write(dir.join(name), bytes)?)
}

fn column(v: DVector<f64>) -> DMatrix<f64> {
    DMatrix::from_column_slice(v.len(), 1, v.as_slice())
}

fn main() -> Result<(), Box<dyn StdError>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 6 {
        return Err("usage: rust_reference DIR N D M SEED".into());
    }
    let dir = Path::new(&args[1]);
    let (n, d, m): (usize, usize, usize) = (args[2].parse()?, args[3].parse()?, args[4].parse()?);
    let seed: u64 = args[5].parse()?;
    let x = read(dir, "x.bin", n, d)?;
    let y = DVector::from_column_slice(read(dir, "y.bin", n, 1)?.as_slice());
    let xt = read(dir, "xt.bin", m, d)?;
    let cpu = Device::cpu();
    let kernels = [Kernel::rbf(0.5)?, Kernel::rbf(2.0)?];

    let mklaren = MklarenParams::new(15).lookahead(10).lambda(0.01).kernels(&kernels).fit_inputs(&cpu, &[&x], &y)?;
    write(dir, "mklaren.bin", &column(mklaren.predict(&xt)?))?;

    let nystrom = LowRankRidgeParams::new(LowRankMethod::Nystrom { seed }, 12).kernels(&kernels[..1]).lambda(0.1).fit_inputs(&cpu, &[&x], &y)?;
    write(dir, "nystrom.bin", &column(nystrom.predict(&xt)?))?;

    let full = FullKernelRidgeParams::new(KernelCombination::Alignfc).kernels(&kernels).lambda(0.1).fit_inputs(&cpu, &[&x], &y)?;
    write(dir, "full.bin", &column(full.predict(&xt)?))?;

    let density = DensityParams::new(Kernel::gaussian_with_width(0.4)?)?
        .regularisation(Regularisation::new().trace(1e-3).quadratic(1e-4))
        .solver(SolverOptions { tolerance: 1e-8, max_iterations: 20000, check_every: 2 })
        .fit(&cpu, &x.columns(0, 1).into_owned())?;
    write(dir, "density.bin", &column(density.density(&xt.columns(0, 1).into_owned())?))?;

    let squares = |a: &DMatrix<f64>| a.map(|v| v * v);
    let maps = vec![FeatureMap::random_fourier(0.5, 64)?; 2];
    let eksvd = EksvdParams::new(2).feature_maps(maps).solver(Solver::Dual(Eigensolver::Dense)).seed(seed).fit(&cpu, &MultiSource::paired(vec![x.clone(), squares(&x)])?)?;
    let (s0, s1) = (eksvd.transform_source(0, &xt)?, eksvd.transform_source(1, &squares(&xt))?);
    let mut scores = DMatrix::zeros(m, 4);
    scores.columns_mut(0, 2).copy_from(&s0);
    scores.columns_mut(2, 2).copy_from(&s1);
    write(dir, "eksvd.bin", &scores)?;

    write(dir, "kernel.bin", &cpu.kernel_matrix(&Kernel::laplacian(0.7)?, &x, &xt)?)?;
    Ok(())
}
