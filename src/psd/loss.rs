//! Separable convex losses `L(z) = sum_i l_i(z_i)` with the Fenchel conjugate
//! `L*(alpha) = sum_i l_i*(alpha_i)` and its proximal operator, which is what
//! the dual (Eq. 10) needs (App. B.5: "it suffices to be able to compute the
//! proximal operator of the l_i").

use nalgebra::DVector;

use crate::device::Device;
use crate::error::Error;
use crate::resident::{negative_root, DeviceMatrix, Workspace};

/// A separable convex loss with a computable conjugate proximal operator.
pub trait DualLoss {
    /// Number of terms n.
    fn len(&self) -> usize;
    /// Whether there are no terms.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `L(z)`, `+inf` outside the domain.
    fn value(&self, z: &DVector<f64>) -> f64;
    /// `L*(alpha)`, `+inf` outside the domain.
    fn conjugate(&self, alpha: &DVector<f64>) -> f64;
    /// `prox_{t L*}(v) = argmin_s 1/2 ||s - v||^2 + t L*(s)`.
    fn prox_conjugate(&self, v: &DVector<f64>, t: f64) -> DVector<f64>;
    /// `prox` of `L*` with a step per term, `s_i = prox_{t_i l_i*}(v_i)`,
    /// for the diagonal metric of the dual engine; `None` where the loss
    /// does not provide it (the engine then keeps one scalar step).
    fn prox_conjugate_per_term(&self, v: &DVector<f64>, t: &DVector<f64>) -> Option<DVector<f64>> {
        let _ = (v, t);
        None
    }
    /// The dual point matching a primal guess of the model values `z > 0`:
    /// `alpha_i = l_i'(z_i)` (at the optimum, `alpha = grad L(f)`), which sets
    /// the scale of the dual variables right.
    fn dual_start(&self, z: &DVector<f64>) -> DVector<f64>;
    /// The same loss on vectors resident on a device, where it provides
    /// that (`None`, the default: the dual engine keeps FISTA's state on
    /// the host).
    fn resident(&self) -> Option<&dyn ResidentLoss> {
        None
    }
}

/// A loss whose conjugate's prox, conjugate and value run on vectors
/// resident on a device (`n x B`, `f64`: block `b` is column `b`), so that
/// the dual engine's FISTA state stays there: the prox is element-wise, and
/// the values are sums of element-wise terms (computed with one read-back
/// of a few numbers, the terms of several sums together). What the loss
/// needs on the device (its targets, bounds or levels) is uploaded once
/// ([`Self::upload`]) and handed to every call as `data`.
pub trait ResidentLoss {
    /// The loss's data on `device`, uploaded once per solve (none by default).
    fn upload(&self, device: &Device) -> Result<Vec<DeviceMatrix>, Error> {
        let _ = device;
        Ok(Vec::new())
    }
    /// `out_ij = prox_{t c_ij l_ij*}(v_ij)` with a step `t c_ij` per term
    /// (`c` resident, the shape of `v` and `out`), recorded in `workspace`.
    fn prox_conjugate_resident(&self, workspace: &Workspace<'_>, data: &[DeviceMatrix], v: &DeviceMatrix, c: &DeviceMatrix, t: f64, out: &DeviceMatrix) -> Result<(), Error>;
    /// Resident `n x 1` vectors whose sums give `L*(alpha)`
    /// ([`Self::conjugate_from_sums`]), recorded in `workspace` (outputs
    /// from its pool).
    fn conjugate_terms(&self, workspace: &Workspace<'_>, data: &[DeviceMatrix], alpha: &DeviceMatrix) -> Result<Vec<DeviceMatrix>, Error>;
    /// `L*(alpha)` from the sums of [`Self::conjugate_terms`] (`+inf` outside the domain).
    fn conjugate_from_sums(&self, sums: &[f64]) -> f64;
    /// Resident `n x 1` vectors whose sums give `L(scale v)`
    /// ([`Self::value_from_sums`]), recorded in `workspace` (outputs from
    /// its pool).
    fn value_terms(&self, workspace: &Workspace<'_>, data: &[DeviceMatrix], v: &DeviceMatrix, scale: f64) -> Result<Vec<DeviceMatrix>, Error>;
    /// `L(u)` from the sums of [`Self::value_terms`] (`+inf` outside the domain).
    fn value_from_sums(&self, sums: &[f64]) -> f64;
    /// `L(u / s)` from `value = L(u)`, for `s > 0` (the integral
    /// constraint's feasible scale).
    fn value_at_scale(&self, value: f64, s: f64) -> f64;
}

/// Negative log-likelihood `L(z) = -(1/n) sum_i log z_i` (Section 6, density estimation).
///
/// `l*(s) = -(1/n)(1 + log(-n s))` for `s < 0`; `prox_{t l*}(v)` is the negative
/// root of `s^2 - v s - t/n = 0`, `s = (v - sqrt(v^2 + 4t/n))/2`.
#[derive(Debug, Clone, Copy)]
pub struct NegativeLogLikelihood {
    /// Number of samples.
    pub n: usize,
}

impl DualLoss for NegativeLogLikelihood {
    fn len(&self) -> usize {
        self.n
    }
    fn value(&self, z: &DVector<f64>) -> f64 {
        let n = self.n as f64;
        z.iter().map(|&v| if v > 0.0 { -v.ln() / n } else { f64::INFINITY }).sum()
    }
    fn conjugate(&self, alpha: &DVector<f64>) -> f64 {
        let n = self.n as f64;
        alpha.iter().map(|&s| if s < 0.0 { -(1.0 + (-n * s).ln()) / n } else { f64::INFINITY }).sum()
    }
    fn prox_conjugate(&self, v: &DVector<f64>, t: f64) -> DVector<f64> {
        let c = 4.0 * t / self.n as f64;
        v.map(|x| negative_root(x, c))
    }
    fn prox_conjugate_per_term(&self, v: &DVector<f64>, t: &DVector<f64>) -> Option<DVector<f64>> {
        let n = self.n as f64;
        Some(v.zip_map(t, |x, ti| negative_root(x, 4.0 * ti / n)))
    }
    fn dual_start(&self, z: &DVector<f64>) -> DVector<f64> {
        z.map(|v| -1.0 / (self.n as f64 * v.max(f64::MIN_POSITIVE)))
    }
    fn resident(&self) -> Option<&dyn ResidentLoss> {
        Some(self)
    }
}

/// On a device: the prox is the negative root above with `c = 4 t c_i / n`
/// (one element-wise pass); over the `n` terms, `L*(s) = -(n + sum_i
/// ln(-n s_i)) / n` and `L(u) = -(1/n) sum_i ln u_i`, from the sums of the
/// logs and of the indicators of the terms outside the domain; `L(u / s) =
/// L(u) + ln s`.
impl ResidentLoss for NegativeLogLikelihood {
    fn prox_conjugate_resident(&self, workspace: &Workspace<'_>, _data: &[DeviceMatrix], v: &DeviceMatrix, c: &DeviceMatrix, t: f64, out: &DeviceMatrix) -> Result<(), Error> {
        workspace.negative_root_into(v, c, 4.0 * t / self.n as f64, out)
    }
    fn conjugate_terms(&self, workspace: &Workspace<'_>, _data: &[DeviceMatrix], alpha: &DeviceMatrix) -> Result<Vec<DeviceMatrix>, Error> {
        log_terms(workspace, alpha, -(self.n as f64))
    }
    fn conjugate_from_sums(&self, sums: &[f64]) -> f64 {
        if sums[1] > 0.0 { f64::INFINITY } else { -(self.n as f64 + sums[0]) / self.n as f64 }
    }
    fn value_terms(&self, workspace: &Workspace<'_>, _data: &[DeviceMatrix], v: &DeviceMatrix, scale: f64) -> Result<Vec<DeviceMatrix>, Error> {
        log_terms(workspace, v, scale)
    }
    fn value_from_sums(&self, sums: &[f64]) -> f64 {
        if sums[1] > 0.0 { f64::INFINITY } else { -sums[0] / self.n as f64 }
    }
    fn value_at_scale(&self, value: f64, s: f64) -> f64 {
        value + s.ln()
    }
}

/// The logs `ln(scale x_i)` and the indicators of the entries outside
/// their domain, recorded in `workspace`.
fn log_terms(workspace: &Workspace<'_>, x: &DeviceMatrix, scale: f64) -> Result<Vec<DeviceMatrix>, Error> {
    let logs = workspace.take(x.nrows(), x.ncols(), x.precision())?;
    let outside = workspace.take(x.nrows(), x.ncols(), x.precision())?;
    workspace.log_into(x, scale, &logs, &outside)?;
    Ok(vec![logs, outside])
}

/// A block of `rows` of the terms of `loss` (a rank's samples in a sharded
/// fit): the same terms and scale (the loss's `n` is that of all samples),
/// `rows` of them.
#[derive(Debug, Clone, Copy)]
pub struct SampleBlock<L> {
    /// The loss of all samples.
    pub loss: L,
    /// Terms in this block.
    pub rows: usize,
}

impl<L: DualLoss> DualLoss for SampleBlock<L> {
    fn len(&self) -> usize {
        self.rows
    }
    fn value(&self, z: &DVector<f64>) -> f64 {
        self.loss.value(z)
    }
    fn conjugate(&self, alpha: &DVector<f64>) -> f64 {
        self.loss.conjugate(alpha)
    }
    fn prox_conjugate(&self, v: &DVector<f64>, t: f64) -> DVector<f64> {
        self.loss.prox_conjugate(v, t)
    }
    fn prox_conjugate_per_term(&self, v: &DVector<f64>, t: &DVector<f64>) -> Option<DVector<f64>> {
        self.loss.prox_conjugate_per_term(v, t)
    }
    fn dual_start(&self, z: &DVector<f64>) -> DVector<f64> {
        self.loss.dual_start(z)
    }
    /// The loss's own when the block holds all its terms.
    fn resident(&self) -> Option<&dyn ResidentLoss> {
        if self.rows == self.loss.len() { self.loss.resident() } else { None }
    }
}

/// Squared loss `L(z) = 1/(2n) sum_i (z_i - y_i)^2` (fitting a non-negative function to values).
///
/// `l*(s) = s y + n s^2 / 2`; `prox_{t l*}(v) = (v - t y)/(1 + t n)`.
#[derive(Debug, Clone)]
pub struct SquaredLoss {
    /// Targets `y_i`.
    pub targets: DVector<f64>,
}

impl DualLoss for SquaredLoss {
    fn len(&self) -> usize {
        self.targets.len()
    }
    fn value(&self, z: &DVector<f64>) -> f64 {
        (z - &self.targets).norm_squared() / (2.0 * self.len() as f64)
    }
    fn conjugate(&self, alpha: &DVector<f64>) -> f64 {
        alpha.dot(&self.targets) + self.len() as f64 * alpha.norm_squared() / 2.0
    }
    fn prox_conjugate(&self, v: &DVector<f64>, t: f64) -> DVector<f64> {
        let n = self.len() as f64;
        (v - &self.targets * t) / (1.0 + t * n)
    }
    fn dual_start(&self, z: &DVector<f64>) -> DVector<f64> {
        (z - &self.targets) / self.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks prox optimality and the Fenchel-Young equality by brute force.
    fn check_prox(loss: &dyn DualLoss, v: &DVector<f64>, t: f64) {
        let p = loss.prox_conjugate(v, t);
        let obj = |s: &DVector<f64>| 0.5 * (s - v).norm_squared() + t * loss.conjugate(s);
        let base = obj(&p);
        assert!(base.is_finite());
        for i in 0..v.len() {
            for h in [1e-4, -1e-4, 1e-2, -1e-2] {
                let mut q = p.clone();
                q[i] += h * p[i].abs().max(1e-3);
                assert!(obj(&q) >= base - 1e-14, "prox not optimal at {i}");
            }
        }
    }

    #[test]
    fn proximal_operators_minimise_their_objective() {
        let v = DVector::from_vec(vec![-0.3, 0.2, 1.5, -2.0]);
        check_prox(&NegativeLogLikelihood { n: 4 }, &v, 0.7);
        check_prox(&SquaredLoss { targets: DVector::from_vec(vec![1.0, 0.0, 2.0, 0.5]) }, &v, 0.3);
    }

    #[test]
    fn conjugate_of_nll_satisfies_fenchel_young() {
        // l(z) + l*(s) = s z at s = l'(z) = -1/(n z).
        let loss = NegativeLogLikelihood { n: 3 };
        let z = DVector::from_vec(vec![0.5, 2.0, 7.0]);
        let s = z.map(|v| -1.0 / (3.0 * v));
        assert!((loss.value(&z) + loss.conjugate(&s) - s.dot(&z)).abs() < 1e-12);
    }
}
