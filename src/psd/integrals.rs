//! Closed-form integrals of products of Gaussian kernels (Proposition 4).
//!
//! For the Gaussian kernel of width `sigma`, one coordinate at a time,
//!
//! `k(x, a) k(x, b) = exp(-(a - b)^2 / (4 sigma^2)) exp(-(x - c)^2 / sigma^2)`, `c = (a + b)/2`,
//!
//! so `M_ij = int k(x, z_i) k(x, z_j) dnu(x)` (the matrix `M_p` of
//! Proposition 4, with `W_p = V^{-T} M_p V^{-1}` in feature coordinates) is a
//! product over coordinates of one-dimensional integrals of
//! `exp(-(x - c)^2 / sigma^2)`:
//!
//! - Lebesgue on `[lo, hi]`: `sqrt(pi) sigma / 2 (erf((hi - c)/sigma) - erf((lo - c)/sigma))`
//!   (`sqrt(pi) sigma` on the whole line);
//! - Gaussian `N(mu, s^2)` restricted to `[lo, hi]`: the product of the two
//!   Gaussians is `w N(x; c', s'^2)` with `1/s'^2 = 2/sigma^2 + 1/s^2`,
//!   `c' = s'^2 (2c/sigma^2 + mu/s^2)`, `w = sigma/sqrt(sigma^2 + 2 s^2) exp(-(c - mu)^2/(sigma^2 + 2 s^2))`,
//!   so the integral is `w (Phi((hi - c')/s') - Phi((lo - c')/s'))`.

use nalgebra::{DMatrix, DVector};

use crate::linalg::{check_dim, check_matrix};

use super::error::check_positive;
use crate::error::Error;

/// The measure a model is integrated against (a product measure over coordinates).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum BaseMeasure {
    /// Lebesgue measure on `R^d`: a density is `p(x) = f(x)`.
    Lebesgue,
    /// Gaussian `N(mean, diag(std^2))`: a density is `p(x) = f(x) nu(x)` (App. E).
    Gaussian {
        /// Mean, length d.
        #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
        mean: DVector<f64>,
        /// Standard deviations, length d, all > 0.
        #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
        std: DVector<f64>,
    },
}

impl BaseMeasure {
    /// `N(0, variance I_d)`, the base measure of the 10-D experiment (App. E, variance 5).
    pub fn isotropic_gaussian(d: usize, variance: f64) -> Result<Self, Error> {
        check_positive("variance", variance)?;
        BaseMeasure::gaussian(DVector::zeros(d), DVector::from_element(d, variance.sqrt()))
    }

    /// `N(mean, diag(std^2))`, validated.
    pub fn gaussian(mean: DVector<f64>, std: DVector<f64>) -> Result<Self, Error> {
        check_dim("length of std vs length of mean", mean.len(), std.len())?;
        if mean.is_empty() {
            return Err(Error::InvalidParameter { name: "mean", reason: "must have at least one coordinate".into() });
        }
        for &v in mean.iter() {
            if !v.is_finite() {
                return Err(Error::InvalidParameter { name: "mean", reason: format!("must be finite, got {v}") });
            }
        }
        for &s in std.iter() {
            check_positive("std", s)?;
        }
        Ok(BaseMeasure::Gaussian { mean, std })
    }

    /// The check of a loaded measure for a model of dimension `d`: a
    /// Gaussian of `d` coordinates, means finite and within
    /// [`crate::io::MAX_STORED_MAGNITUDE`], standard deviations stored scales
    /// ([`crate::io::MIN_STORED_SCALE`]).
    #[cfg(feature = "serde")]
    pub(crate) fn check_loaded(&self, d: usize) -> Result<(), Error> {
        use crate::io::{ensure, ensure_bounded, ensure_scale};
        if let BaseMeasure::Gaussian { mean, std } = self {
            ensure(mean.len() == d && std.len() == d, || format!("a Gaussian base measure with {} means and {} standard deviations for a model of dimension {d}", mean.len(), std.len()))?;
            ensure_bounded("base measure mean", mean.iter())?;
            for (k, &s) in std.iter().enumerate() {
                ensure_scale(&format!("base measure standard deviation {k}"), s)?;
            }
        }
        Ok(())
    }

    /// The largest value of the density `nu` (1 for Lebesgue,
    /// `prod_k 1/(sqrt(2 pi) s_k)` for a Gaussian; `+inf` if it overflows).
    #[cfg(feature = "serde")]
    pub(crate) fn peak_density(&self) -> f64 {
        match self {
            BaseMeasure::Lebesgue => 1.0,
            BaseMeasure::Gaussian { std, .. } => std.iter().map(|s| 1.0 / ((2.0 * std::f64::consts::PI).sqrt() * s)).product(),
        }
    }

    /// Checks that the measure lives in dimension `d`.
    pub fn check_dimension(&self, d: usize) -> Result<(), Error> {
        if let BaseMeasure::Gaussian { mean, .. } = self {
            check_dim("dimension of the base measure vs columns of the data", d, mean.len())?;
        }
        Ok(())
    }

    /// `(mean, std)` of coordinate `k`, `None` for Lebesgue.
    pub fn coordinate(&self, k: usize) -> Option<(f64, f64)> {
        match self {
            BaseMeasure::Lebesgue => None,
            BaseMeasure::Gaussian { mean, std } => Some((mean[k], std[k])),
        }
    }

    /// Density `nu(x)` of the measure at the rows of `x` (1 for Lebesgue).
    pub fn density(&self, x: &DMatrix<f64>) -> DVector<f64> {
        match self {
            BaseMeasure::Lebesgue => DVector::from_element(x.nrows(), 1.0),
            BaseMeasure::Gaussian { mean, std } => DVector::from_fn(x.nrows(), |i, _| {
                (0..x.ncols()).map(|k| gaussian_pdf(x[(i, k)], mean[k], std[k])).product()
            }),
        }
    }

    /// The base measure restricted to the coordinates `keep` (for marginals).
    pub fn restrict(&self, keep: &[usize]) -> BaseMeasure {
        match self {
            BaseMeasure::Lebesgue => BaseMeasure::Lebesgue,
            BaseMeasure::Gaussian { mean, std } => BaseMeasure::Gaussian {
                mean: DVector::from_iterator(keep.len(), keep.iter().map(|&k| mean[k])),
                std: DVector::from_iterator(keep.len(), keep.iter().map(|&k| std[k])),
            },
        }
    }
}

/// Standard normal CDF.
pub fn normal_cdf(t: f64) -> f64 {
    0.5 * (1.0 + libm::erf(t / std::f64::consts::SQRT_2))
}

/// `N(x; mean, std^2)`.
pub fn gaussian_pdf(x: f64, mean: f64, std: f64) -> f64 {
    let u = (x - mean) / std;
    (-0.5 * u * u).exp() / (std * (2.0 * std::f64::consts::PI).sqrt())
}

/// `int_lo^hi exp(-(x - c)^2 / sigma^2) g(x) dx` with `g = 1` (`gaussian = None`)
/// or `g = N(mu, s^2)` (`gaussian = Some((mu, s))`); `lo`, `hi` may be infinite.
pub fn squared_gaussian_integral(c: f64, sigma: f64, gaussian: Option<(f64, f64)>, lo: f64, hi: f64) -> f64 {
    match gaussian {
        None => {
            if lo == f64::NEG_INFINITY && hi == f64::INFINITY {
                std::f64::consts::PI.sqrt() * sigma
            } else {
                0.5 * std::f64::consts::PI.sqrt() * sigma * (libm::erf((hi - c) / sigma) - libm::erf((lo - c) / sigma))
            }
        }
        Some((mu, s)) => {
            let (c2, s2, w) = gaussian_product(c, sigma, mu, s);
            if lo == f64::NEG_INFINITY && hi == f64::INFINITY {
                w
            } else {
                w * (normal_cdf((hi - c2) / s2) - normal_cdf((lo - c2) / s2))
            }
        }
    }
}

/// `exp(-(x - c)^2 / sigma^2) N(x; mu, s^2) = w N(x; c2, s2^2)`: returns `(c2, s2, w)`.
pub fn gaussian_product(c: f64, sigma: f64, mu: f64, s: f64) -> (f64, f64, f64) {
    let (sig2, s_2) = (sigma * sigma, s * s);
    let var = 1.0 / (2.0 / sig2 + 1.0 / s_2);
    let c2 = var * (2.0 * c / sig2 + mu / s_2);
    let w = sigma / (sig2 + 2.0 * s_2).sqrt() * (-(c - mu) * (c - mu) / (sig2 + 2.0 * s_2)).exp();
    (c2, var.sqrt(), w)
}

/// `M_ij = int k(x, z_i) k(x, z_j) dnu(x)` over the coordinates `coords` only,
/// each integrated over `[lower[k], upper[k]]` (pass infinities for the whole line).
///
/// Errors: `lower` or `upper` not of length d, a coordinate `>= d`, and
/// `OutOfMemory` when the m x m output does not fit the host.
pub fn product_integrals_over(
    centres: &DMatrix<f64>,
    sigma: f64,
    base: &BaseMeasure,
    coords: &[usize],
    lower: &[f64],
    upper: &[f64],
) -> Result<DMatrix<f64>, Error> {
    let d = centres.ncols();
    check_dim("length of lower", d, lower.len())?;
    check_dim("length of upper", d, upper.len())?;
    if let Some(&k) = coords.iter().find(|&&k| k >= d) {
        return Err(Error::IndexOutOfRange { what: "coordinates of the centres", index: k, len: d });
    }
    let m = centres.nrows();
    let mut out = crate::memory::zeroed_matrix::<f64>(m, m, "product integrals")?;
    out.fill(1.0);
    for &k in coords {
        let g = base.coordinate(k);
        for j in 0..m {
            for i in j..m {
                let (a, b) = (centres[(i, k)], centres[(j, k)]);
                let v = (-(a - b) * (a - b) / (4.0 * sigma * sigma)).exp()
                    * squared_gaussian_integral(0.5 * (a + b), sigma, g, lower[k], upper[k]);
                out[(i, j)] *= v;
                if i != j {
                    out[(j, i)] *= v;
                }
            }
        }
    }
    Ok(out)
}

/// `M_ij = int k(x, z_i) k(x, z_j) dnu(x)` over all of `R^d` (Proposition 4).
pub fn product_integrals(centres: &DMatrix<f64>, sigma: f64, base: &BaseMeasure) -> Result<DMatrix<f64>, Error> {
    check_matrix("centres", centres)?;
    check_positive("sigma", sigma)?;
    let d = centres.ncols();
    base.check_dimension(d)?;
    let coords: Vec<usize> = (0..d).collect();
    product_integrals_over(centres, sigma, base, &coords, &vec![f64::NEG_INFINITY; d], &vec![f64::INFINITY; d])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trapezoid(f: impl Fn(f64) -> f64, a: f64, b: f64, n: usize) -> f64 {
        let h = (b - a) / n as f64;
        (0..=n).map(|i| f(a + i as f64 * h) * if i == 0 || i == n { 0.5 } else { 1.0 }).sum::<f64>() * h
    }

    #[test]
    fn one_dimensional_factors_match_quadrature() {
        let sigma = 0.7;
        let (c, mu, s) = (0.3, -0.4, 1.3);
        let lebesgue = trapezoid(|x| (-(x - c) * (x - c) / (sigma * sigma)).exp(), -20.0, 20.0, 40_000);
        assert!((squared_gaussian_integral(c, sigma, None, f64::NEG_INFINITY, f64::INFINITY) - lebesgue).abs() < 1e-10);
        let boxed = trapezoid(|x| (-(x - c) * (x - c) / (sigma * sigma)).exp(), -0.5, 0.9, 40_000);
        assert!((squared_gaussian_integral(c, sigma, None, -0.5, 0.9) - boxed).abs() < 1e-8);
        let gauss = trapezoid(|x| (-(x - c) * (x - c) / (sigma * sigma)).exp() * gaussian_pdf(x, mu, s), -30.0, 30.0, 60_000);
        assert!((squared_gaussian_integral(c, sigma, Some((mu, s)), f64::NEG_INFINITY, f64::INFINITY) - gauss).abs() < 1e-10);
        let gbox = trapezoid(|x| (-(x - c) * (x - c) / (sigma * sigma)).exp() * gaussian_pdf(x, mu, s), -1.0, 0.5, 40_000);
        assert!((squared_gaussian_integral(c, sigma, Some((mu, s)), -1.0, 0.5) - gbox).abs() < 1e-8);
    }
}
