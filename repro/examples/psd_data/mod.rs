//! Data of the PSD examples, shared by `psd_density_10d` and `psd_speed`.
//!
//! The 10-D mixture of App. E is `1/2 N(-2 e_1, s^2 I) + 1/2 N(2 e_1, s^2 I)`.
//! The paper writes the covariance as `1/sqrt(2 pi) I`; its authors ran the
//! experiment with `s = 1/sqrt(2 pi) = 0.399` as the standard deviation
//! ([`paper_std`], their saved samples: `../shared/data/psd/density-10d-n1000.csv`),
//! while the first reproduction read it as a variance (`s = 0.632`,
//! [`wide_std`], [`mixture_10d`]).

#![allow(dead_code)]

use nalgebra::{DMatrix, DVector};
use rand::{rngs::StdRng, Rng};
use rand_distr::{Distribution, Normal};

/// Standard deviation per coordinate of the authors' 10-D mixture: `1/sqrt(2 pi)` = 0.399.
pub fn paper_std() -> f64 {
    1.0 / (2.0 * std::f64::consts::PI).sqrt()
}

/// Standard deviation of the wider mixture: `sqrt(1/sqrt(2 pi))` = 0.632 (`1/sqrt(2 pi)` read as a variance).
pub fn wide_std() -> f64 {
    paper_std().sqrt()
}

/// n samples of the wider mixture `1/2 N(-2 e_1, c I) + 1/2 N(2 e_1, c I)`,
/// c = 1/sqrt(2 pi) read as a variance (standard deviation 0.632).
pub fn mixture_10d(n: usize, rng: &mut StdRng) -> DMatrix<f64> {
    mixture_10d_with_std(n, wide_std(), rng)
}

/// n samples of `1/2 N(-2 e_1, s^2 I) + 1/2 N(2 e_1, s^2 I)` in 10-D.
pub fn mixture_10d_with_std(n: usize, std: f64, rng: &mut StdRng) -> DMatrix<f64> {
    let noise = Normal::new(0.0, std).expect("positive standard deviation");
    let mut x = DMatrix::from_fn(n, 10, |_, _| noise.sample(rng));
    for i in 0..n {
        x[(i, 0)] += if rng.random::<bool>() { 2.0 } else { -2.0 };
    }
    x
}

/// `log` of the mixture density `1/2 N(-2 e_1, s^2 I) + 1/2 N(2 e_1, s^2 I)`
/// at the rows of `x` (any dimension; the centres are `+-2 e_1`).
pub fn mixture_log_density(x: &DMatrix<f64>, std: f64) -> DVector<f64> {
    let d = x.ncols() as f64;
    let log_norm = -d * (std * (2.0 * std::f64::consts::PI).sqrt()).ln();
    DVector::from_fn(x.nrows(), |i, _| {
        let rest: f64 = (1..x.ncols()).map(|k| x[(i, k)] * x[(i, k)]).sum();
        let a = -((x[(i, 0)] + 2.0).powi(2) + rest) / (2.0 * std * std);
        let b = -((x[(i, 0)] - 2.0).powi(2) + rest) / (2.0 * std * std);
        let top = a.max(b);
        log_norm + top + (0.5 * (a - top).exp() + 0.5 * (b - top).exp()).ln()
    })
}

/// Reads a CSV file of samples (header row `x1..xd`, one sample per row).
pub fn read_samples(path: &str) -> Result<DMatrix<f64>, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e} (the data sets are described in ../shared/data/README.md)"))?;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let cols = lines.next().ok_or_else(|| format!("{path}: empty file"))?.split(',').count();
    let mut values = Vec::new();
    let mut rows = 0;
    for (r, line) in lines.enumerate() {
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() != cols {
            return Err(format!("{path}: row {} has {} fields, header has {cols}", r + 1, fields.len()).into());
        }
        for f in fields {
            values.push(f.trim().parse::<f64>().map_err(|_| format!("{path}: row {}: not a number: {f:?}", r + 1))?);
        }
        rows += 1;
    }
    Ok(DMatrix::from_row_slice(rows, cols, &values))
}
