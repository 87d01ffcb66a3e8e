//! The positive part `[M]_+` of a symmetric matrix by matrix products alone
//! (no eigendecomposition), for the dual of Eq. 10-11, where every FISTA
//! iteration needs `[M]_+` of `M = -P diag(alpha) P^T - mu W - lambda_1 I`.
//!
//! **Identity.** With `S = sign(M)` (the matrix function of the sign),
//! `[M]_+ = (M + M S) / 2`, and per eigenvalue `lambda` of `M` any odd
//! scalar function `s` in place of the sign gives
//! `lambda (1 + s(lambda)) / 2` instead of `max(lambda, 0)`: an error of
//! `|lambda| |1 - |s(lambda)|| / 2` whenever `s` keeps the sign of `lambda`.
//!
//! **Iteration.** `X_0 = M / c` with `c >= ||M||_2`, here
//! `c = ||M^2||_F^{1/2} = (sum lambda^4)^{1/4}` (between `||M||_2` and
//! `||M||_F`, and the product `M^2` is the first step's `X_0^2` anyway),
//! then odd polynomial steps `X_{k+1} = X_k (a_k I + b_k X_k^2 [+ e_k X_k^4])`.
//! Every `X_k = s_k(M / c)` is the composition `s_k = p_k o .. o p_1` of the
//! scalar steps applied to `M / c`: it commutes with `M` and its error is
//! the scalar one above. The steps of [`StepFamily::ScaledCubic`] are the
//! scaled Newton-Schulz steps `p(x) = a x (3 - a^2 x^2) / 2`,
//! `a = (3 / (1 + l + l^2))^{1/2}` (Chen & Chow 2014), which map `[l, 1]`
//! into `[p(l), 1]` with the largest slope at 0 (`3^{3/2}/2 = 2.6`) of an odd
//! cubic with values in `[0, 1]` on `[0, 1]`; two products per step.
//!
//! **A-priori bound.** Only the scalar composition is needed: `[0, 1]` is
//! cut into pieces `[x_j, x_{j+1}]` (geometric, ratio [`PIECE_RATIO`]); the
//! exact image of each piece under every step (an odd polynomial's range on
//! an interval, from its ends and critical points, widened by the rounding
//! of its evaluation) gives `e_j >= max |1 - |s_k(x)|| / 2` on the piece.
//! For any split `t` of the spectrum, the at most `r` eigenvalues with
//! `|lambda| < c t` contribute at most `c x e` each and the others at most
//! `|lambda| e`, so
//!
//! `||[M]_+ - P_k||_F <= min_t (r c^2 max_{x_j < t} (x_{j+1} e_j)^2 + ||M||_F^2 max_{x_j >= t} e_j^2)^{1/2}`
//!
//! for `P_k = (M + M X_k) / 2`, and `|tr [M]_+ - tr P_k| <= r^{1/2}` times it.
//! The planner ([`plan`], kept per order and spectrum class by
//! [`cached_plan`]) picks the smallest number of products whose
//! bound, plus a rounding allowance of `(2k + 2) r u ||M||_F` (`u` the unit
//! roundoff), is at most `tolerance ||M||_F`; for the scaled family it also
//! picks the lower end `l_0` of the interval the steps are tuned to. A step
//! tuned to `[l_0, 1]` sends the largest eigenvalues to `p(l_0)`, next to
//! the smallest, and the steps that lift them back multiply the rounding of
//! `X` between them and the near-null directions by up to `1 / p(l_0)`;
//! `P_k`'s error there is that rounding times the large eigenvalue. The
//! planner adds `0.1 r^{1/2} u / p(l_0) ||M||_F` for it, which keeps it
//! from tuning to an `l_0` far below the tolerance (allowances calibrated on
//! matrices with null spaces next to O(1) eigenvalues, not a
//! floating-point proof). Then `P_k` is formed and
//! symmetrised: `2k + 1` products of order `r` for `k` cubic steps.
//!
//! **Products.** The iteration is written once over [`SymmetricProducts`]:
//! [`HostProducts`] (faer's products on host matrices) and
//! [`DeviceProducts`] (resident `f64` matrices of a [`Device`]; per call
//! only norms and the trace, `O(r)` numbers, come back), and
//! `WorkspaceProducts` (the same operations recorded in a workspace:
//! outputs from its pool, one submission per read-back).
//!
//! The result is a dense matrix, not eigenpairs: its eigenvalues for the
//! negative eigenvalues of `M` are at most `0` and at least minus the bound,
//! so `P_k` is within the bound of the PSD cone as well as of `[M]_+`.
//!
//! **In the dual** ([`super::engine`] with
//! [`PositivePartSolver::polar`](super::positive_part::PositivePartSolver::polar)),
//! `P_k` stands for `[M]_+` everywhere: with `delta` the bound, the smooth
//! part `||[M]_+||_F^2 / (2 lambda_2)` is evaluated to within
//! `(2 ||P_k||_F delta + delta^2) / (2 lambda_2)`, and the primal point
//! `P_k / lambda_2` is within `delta / lambda_2` of the PSD cone; at the
//! default tolerance both are far below the gap tolerances of the
//! estimators (the engine tests compare the certified gaps of both routes).

use nalgebra::DMatrix;

use crate::device::Device;
use crate::error::Error;
use crate::linalg;
use crate::precision::Precision;
use crate::resident::{DeviceMatrix, Workspace};

/// Ratio of the geometric pieces of `[0, 1]` in the a-priori bound (the
/// bound uses each piece's upper end, so it is loose by at most this factor
/// on the small eigenvalues).
pub const PIECE_RATIO: f64 = 1.05;

/// The smallest piece starts at 0 and ends here (an eigenvalue below
/// `c 1e-30` contributes at most `c 1e-30`).
const SMALLEST_PIECE: f64 = 1e-30;

/// Factor of [`amplified_rounding`]: on the kinds of `tests/psd/polar.rs`
/// (null spaces and eigenvalues `1e-8` next to O(1) ones, orders 80 and
/// 300) the true error stays below 6 % of the bound with it.
const AMPLIFICATION_ALLOWANCE: f64 = 0.1;

/// Plans kept by [`cached_plan`].
const CACHED_PLANS: usize = 64;

/// Most polynomial steps the planner considers.
pub const MAX_STEPS: usize = 80;

/// Families of polynomial sign steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepFamily {
    /// Scaled Newton-Schulz cubics tuned to the current interval `[l_k, 1]`
    /// (module docs), two products per step: the default.
    ScaledCubic,
    /// The Newton-Schulz cubic `(3x - x^3)/2`, two products per step.
    Cubic,
    /// The Newton-Schulz quintic `(15x - 10x^3 + 3x^5)/8`, three products per step.
    Quintic,
}

/// One odd polynomial step `x -> a x + b x^3 + e x^5`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OddStep {
    /// `a`, `b`, `e`.
    pub coefficients: [f64; 3],
}

impl OddStep {
    /// Products of order `r` that the step costs on a matrix whose square is
    /// known: one for `X W`, one more for `X^4` with a quintic term.
    pub fn products(&self) -> usize {
        if self.coefficients[2] != 0.0 {
            2
        } else {
            1
        }
    }

    fn value(&self, x: f64) -> f64 {
        let [a, b, e] = self.coefficients;
        let y = x * x;
        x * (a + y * (b + y * e))
    }

    /// A bound on the rounding of [`OddStep::value`] at `x`.
    fn rounding(&self, x: f64) -> f64 {
        let [a, b, e] = self.coefficients;
        let ax = x.abs();
        8.0 * f64::EPSILON * ax * (a.abs() + ax * ax * (b.abs() + ax * ax * e.abs()))
    }

    /// The range of the step on `[lo, hi]` (`lo <= hi`), widened by its rounding.
    fn range(&self, lo: f64, hi: f64) -> (f64, f64) {
        let [a, b, e] = self.coefficients;
        let mut points = [lo, hi, lo, lo, lo, lo];
        let mut count = 2;
        // p'(x) = a + 3 b y + 5 e y^2 with y = x^2.
        let mut roots_y = [f64::NAN; 2];
        if e != 0.0 {
            let (qa, qb, qc) = (5.0 * e, 3.0 * b, a);
            let disc = qb * qb - 4.0 * qa * qc;
            if disc >= 0.0 {
                let sq = disc.sqrt();
                roots_y = [(-qb + sq) / (2.0 * qa), (-qb - sq) / (2.0 * qa)];
            }
        } else if b != 0.0 {
            roots_y[0] = -a / (3.0 * b);
        }
        for y in roots_y {
            if y > 0.0 {
                let x = y.sqrt();
                for c in [x, -x] {
                    if c > lo && c < hi {
                        points[count] = c;
                        count += 1;
                    }
                }
            }
        }
        let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
        for &x in &points[..count] {
            let v = self.value(x);
            let slack = self.rounding(x);
            min = min.min(v - slack);
            max = max.max(v + slack);
        }
        (min, max)
    }
}

/// The steps, their products and the a-priori bound chosen by [`plan`].
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The polynomial steps, first applied first.
    pub steps: Vec<OddStep>,
    /// Products of order `r` of the whole computation (the square of `M`,
    /// the steps, and `M X_k`).
    pub products: usize,
    /// The a-priori bound on `||[M]_+ - P_k||_F` relative to `||M||_F`,
    /// including the rounding allowance.
    pub relative_bound: f64,
}

/// What [`plan`] needs to know of `M`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spectrum {
    /// Order `r`.
    pub order: usize,
    /// `||M||_F`.
    pub frobenius: f64,
    /// The scale `c >= ||M||_2` of `X_0 = M / c`.
    pub scale: f64,
}

/// The pieces of `[0, 1]` and, per piece, the interval of `s_k` on it.
struct Pieces {
    upper: Vec<f64>,
    lo: Vec<f64>,
    hi: Vec<f64>,
}

impl Pieces {
    fn new() -> Self {
        let mut upper = vec![SMALLEST_PIECE];
        while *upper.last().unwrap_or(&1.0) < 1.0 {
            let next = (upper[upper.len() - 1] * PIECE_RATIO).min(1.0);
            upper.push(next);
        }
        let mut lo = vec![0.0];
        lo.extend_from_slice(&upper[..upper.len() - 1]);
        let hi = upper.clone();
        Pieces { upper, lo, hi }
    }

    fn apply(&mut self, step: &OddStep) {
        for (lo, hi) in self.lo.iter_mut().zip(self.hi.iter_mut()) {
            (*lo, *hi) = step.range(*lo, *hi);
        }
    }

    /// The bound of the module docs, relative to `||M||_F`, without the rounding allowance.
    fn bound(&self, spectrum: &Spectrum) -> f64 {
        let defect = |t: f64| (1.0 - t.abs()).abs();
        let e: Vec<f64> = self
            .lo
            .iter()
            .zip(self.hi.iter())
            .map(|(&lo, &hi)| {
                let mut d = defect(lo).max(defect(hi));
                if lo < 0.0 && hi > 0.0 {
                    d = d.max(1.0);
                }
                d / 2.0
            })
            .collect();
        let n = e.len();
        let mut suffix = vec![0.0f64; n + 1];
        for j in (0..n).rev() {
            suffix[j] = suffix[j + 1].max(e[j]);
        }
        let ratio = spectrum.scale / spectrum.frobenius;
        let small_weight = spectrum.order as f64 * ratio * ratio;
        let mut prefix = 0.0f64;
        let mut best = suffix[0];
        for j in 0..n {
            prefix = prefix.max(self.upper[j] * e[j]);
            best = best.min((small_weight * prefix * prefix + suffix[j + 1] * suffix[j + 1]).sqrt());
        }
        best
    }
}

fn rounding_allowance(order: usize, steps: usize) -> f64 {
    (2 * steps + 2) as f64 * order as f64 * f64::EPSILON / 2.0
}

/// The rounding of the first step amplified by the later ones (module
/// docs), relative to `||M||_F`, for a first step that sends 1 to `first`.
fn amplified_rounding(order: usize, first: f64) -> f64 {
    AMPLIFICATION_ALLOWANCE * (order as f64).sqrt() * f64::EPSILON / 2.0 / first
}

/// The scaled Newton-Schulz step tuned to `[l, 1]`.
fn scaled_step(l: f64) -> OddStep {
    let a = (3.0 / (1.0 + l + l * l)).sqrt();
    OddStep { coefficients: [1.5 * a, -0.5 * a * a * a, 0.0] }
}

/// The fewest products reaching `tolerance` (relative Frobenius, module
/// docs) with steps of `family`, or `None` when [`MAX_STEPS`] steps do not.
pub fn plan(spectrum: &Spectrum, family: StepFamily, tolerance: f64) -> Option<Plan> {
    let fixed = |step: OddStep| -> Option<Plan> {
        let mut pieces = Pieces::new();
        let mut steps = Vec::new();
        for k in 1..=MAX_STEPS {
            pieces.apply(&step);
            steps.push(step);
            let bound = pieces.bound(spectrum) + rounding_allowance(spectrum.order, k);
            if bound <= tolerance {
                return Some(Plan { products: products_of(&steps), steps, relative_bound: bound });
            }
        }
        None
    };
    match family {
        StepFamily::Cubic => fixed(OddStep { coefficients: [1.5, -0.5, 0.0] }),
        StepFamily::Quintic => fixed(OddStep { coefficients: [15.0 / 8.0, -10.0 / 8.0, 3.0 / 8.0] }),
        StepFamily::ScaledCubic => {
            let mut best: Option<Plan> = None;
            // l_0 from 1e-2 down to 1e-20, two per decade.
            for i in 4..=40 {
                let mut l = 10f64.powf(-(i as f64) / 2.0);
                let amplified = amplified_rounding(spectrum.order, scaled_step(l).value(l));
                let mut pieces = Pieces::new();
                let mut steps = Vec::new();
                for k in 1..=MAX_STEPS {
                    if best.as_ref().is_some_and(|b| products_of(&steps) + 1 > b.products) {
                        break;
                    }
                    let step = scaled_step(l);
                    l = step.value(l).min(1.0);
                    pieces.apply(&step);
                    steps.push(step);
                    let bound = pieces.bound(spectrum) + rounding_allowance(spectrum.order, k) + amplified;
                    if bound <= tolerance {
                        let candidate = Plan { products: products_of(&steps), steps, relative_bound: bound };
                        if best.as_ref().is_none_or(|b| (candidate.products, candidate.relative_bound) < (b.products, b.relative_bound)) {
                            best = Some(candidate);
                        }
                        break;
                    }
                }
            }
            best
        }
    }
}

/// [`plan`] for the spectrum with `scale / frobenius` rounded up to the
/// next power of `2^{1/4}` (a larger ratio only raises the bound, so the
/// plan still meets the tolerance), kept for later calls with the same
/// order, rounded ratio, family and tolerance: the dual asks for `[M]_+` of
/// one order and similar spectra at every iteration.
pub fn cached_plan(spectrum: &Spectrum, family: StepFamily, tolerance: f64) -> Option<Plan> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    type Key = (usize, i32, u8, u64);
    static CACHE: OnceLock<Mutex<HashMap<Key, Option<Plan>>>> = OnceLock::new();
    let ratio = (spectrum.scale / spectrum.frobenius).clamp(f64::MIN_POSITIVE, 1.0);
    let bucket = (4.0 * ratio.log2()).ceil() as i32;
    let rounded = Spectrum { scale: spectrum.frobenius * 2f64.powf(bucket as f64 / 4.0).min(1.0), ..*spectrum };
    let key = (spectrum.order, bucket, family as u8, tolerance.to_bits());
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(found) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return found.clone();
    }
    let planned = plan(&rounded, family, tolerance);
    let mut guard = cache.lock().unwrap_or_else(|e| e.into_inner());
    if guard.len() >= CACHED_PLANS {
        guard.clear();
    }
    guard.insert(key, planned.clone());
    planned
}

fn products_of(steps: &[OddStep]) -> usize {
    // M^2, the steps, X_k^2 between steps, and M X_k.
    2 + steps.iter().map(OddStep::products).sum::<usize>() + steps.len().saturating_sub(1)
}

/// The products the iteration needs, on matrices of type `Matrix` (all
/// square of one order `r`, symmetric up to rounding).
pub trait SymmetricProducts {
    /// A matrix where the products run.
    type Matrix;
    /// `A B`.
    fn product(&self, a: &Self::Matrix, b: &Self::Matrix) -> Result<Self::Matrix, Error>;
    /// `alpha X + beta Y + gamma I` (`Y` absent: `beta` is ignored).
    fn combine(&self, alpha: f64, x: &Self::Matrix, beta: f64, y: Option<&Self::Matrix>, gamma: f64) -> Result<Self::Matrix, Error>;
    /// `||X||_F`.
    fn frobenius(&self, x: &Self::Matrix) -> Result<f64, Error>;
    /// `tr X`.
    fn trace(&self, x: &Self::Matrix) -> Result<f64, Error>;
    /// `(||X||_F, ||Y||_F)`, as [`Self::frobenius`] of each (where the
    /// numbers come back from a device: both in one read-back).
    fn frobenius_pair(&self, x: &Self::Matrix, y: &Self::Matrix) -> Result<(f64, f64), Error> {
        Ok((self.frobenius(x)?, self.frobenius(y)?))
    }
    /// `(tr X, ||X||_F)`, as [`Self::trace`] and [`Self::frobenius`] (where
    /// the numbers come back from a device: both in one read-back).
    fn trace_and_frobenius(&self, x: &Self::Matrix) -> Result<(f64, f64), Error> {
        Ok((self.trace(x)?, self.frobenius(x)?))
    }
    /// `(X + X^T) / 2`, or `X` as it is where a transpose costs a product
    /// (the result is then symmetric to rounding only).
    fn symmetrise(&self, x: Self::Matrix) -> Result<Self::Matrix, Error>;
    /// Order `r` of `X`.
    fn order(&self, x: &Self::Matrix) -> usize;
}

/// [`SymmetricProducts`] on host matrices (faer's multi-threaded products).
#[derive(Debug, Clone, Copy, Default)]
pub struct HostProducts;

impl SymmetricProducts for HostProducts {
    type Matrix = DMatrix<f64>;
    fn product(&self, a: &DMatrix<f64>, b: &DMatrix<f64>) -> Result<DMatrix<f64>, Error> {
        linalg::check_dim("inner dimension of a product", a.ncols(), b.nrows())?;
        Ok(linalg::matmul(a, b))
    }
    fn combine(&self, alpha: f64, x: &DMatrix<f64>, beta: f64, y: Option<&DMatrix<f64>>, gamma: f64) -> Result<DMatrix<f64>, Error> {
        let mut out = x * alpha;
        if let Some(y) = y {
            linalg::check_dim("rows of a combination's operands", x.nrows(), y.nrows())?;
            linalg::check_dim("columns of a combination's operands", x.ncols(), y.ncols())?;
            out.iter_mut().zip(y.iter()).for_each(|(o, v)| *o += beta * v);
        }
        for i in 0..out.nrows().min(out.ncols()) {
            out[(i, i)] += gamma;
        }
        Ok(out)
    }
    fn frobenius(&self, x: &DMatrix<f64>) -> Result<f64, Error> {
        Ok(x.norm())
    }
    fn trace(&self, x: &DMatrix<f64>) -> Result<f64, Error> {
        Ok(x.trace())
    }
    fn symmetrise(&self, x: DMatrix<f64>) -> Result<DMatrix<f64>, Error> {
        Ok((&x + x.transpose()) * 0.5)
    }
    fn order(&self, x: &DMatrix<f64>) -> usize {
        x.nrows()
    }
}

/// [`SymmetricProducts`] on resident `f64` matrices of a [`Device`]: the
/// products by [`Device::resident_matmul`], combinations by
/// [`Device::resident_combine`], and the norm and trace from `r` row sums
/// read back.
#[derive(Debug, Clone, Copy)]
pub struct DeviceProducts<'a> {
    /// The device holding the matrices.
    pub device: &'a Device,
}

impl SymmetricProducts for DeviceProducts<'_> {
    type Matrix = DeviceMatrix;
    fn product(&self, a: &DeviceMatrix, b: &DeviceMatrix) -> Result<DeviceMatrix, Error> {
        self.device.resident_matmul(a, b, linalg::MatrixProduct::AB)
    }
    fn combine(&self, alpha: f64, x: &DeviceMatrix, beta: f64, y: Option<&DeviceMatrix>, gamma: f64) -> Result<DeviceMatrix, Error> {
        match y {
            Some(y) => self.device.resident_combine(alpha, x, beta, y, gamma),
            None => self.device.resident_combine(alpha, x, 0.0, x, gamma),
        }
    }
    fn frobenius(&self, x: &DeviceMatrix) -> Result<f64, Error> {
        Ok(self.device.to_host_vector(&self.device.resident_row_squared_norms(x)?)?.sum().sqrt())
    }
    fn trace(&self, x: &DeviceMatrix) -> Result<f64, Error> {
        let identity = self.device.resident_combine(0.0, x, 0.0, x, 1.0)?;
        let diagonal = self.device.resident_hadamard(x, &identity)?;
        Ok(self.device.to_host_vector(&self.device.resident_row_sums(&diagonal)?)?.sum())
    }
    fn symmetrise(&self, x: DeviceMatrix) -> Result<DeviceMatrix, Error> {
        // The products of polynomials in M commute; the device result is
        // used as computed (asymmetric to rounding).
        Ok(x)
    }
    fn order(&self, x: &DeviceMatrix) -> usize {
        x.nrows()
    }
}

/// [`SymmetricProducts`] on resident `f64` matrices recorded in a
/// [`Workspace`]: the operations and arithmetic of [`DeviceProducts`], the
/// outputs from the workspace's pool, and the products and combinations
/// between two read-backs in one submission.
pub(crate) struct WorkspaceProducts<'w, 'd> {
    /// Where the operations are recorded.
    pub(crate) workspace: &'w Workspace<'d>,
}

impl SymmetricProducts for WorkspaceProducts<'_, '_> {
    type Matrix = DeviceMatrix;
    fn product(&self, a: &DeviceMatrix, b: &DeviceMatrix) -> Result<DeviceMatrix, Error> {
        let out = self.workspace.take(a.nrows(), b.ncols(), a.precision())?;
        self.workspace.matmul_into(a, b, linalg::MatrixProduct::AB, &out)?;
        Ok(out)
    }
    fn combine(&self, alpha: f64, x: &DeviceMatrix, beta: f64, y: Option<&DeviceMatrix>, gamma: f64) -> Result<DeviceMatrix, Error> {
        let out = self.workspace.take(x.nrows(), x.ncols(), x.precision())?;
        match y {
            Some(y) => self.workspace.combine_into(alpha, x, beta, y, gamma, &out)?,
            None => self.workspace.combine_into(alpha, x, 0.0, x, gamma, &out)?,
        }
        Ok(out)
    }
    fn frobenius(&self, x: &DeviceMatrix) -> Result<f64, Error> {
        let norms = self.workspace.take(x.nrows(), 1, x.precision())?;
        self.workspace.row_reduction_into(x, true, &norms)?;
        Ok(self.workspace.read_vector(&norms)?.sum().sqrt())
    }
    fn trace(&self, x: &DeviceMatrix) -> Result<f64, Error> {
        let sums = self.workspace.take(x.nrows(), 1, x.precision())?;
        self.diagonal_into(x, &sums)?;
        Ok(self.workspace.read_vector(&sums)?.sum())
    }
    fn frobenius_pair(&self, x: &DeviceMatrix, y: &DeviceMatrix) -> Result<(f64, f64), Error> {
        let (r, s) = (x.nrows(), y.nrows());
        let both = self.workspace.take(r + s, 1, x.precision())?;
        self.workspace.row_reduction_into(x, true, &both.rows(0, r)?)?;
        self.workspace.row_reduction_into(y, true, &both.rows(r, s)?)?;
        let v = self.workspace.read_vector(&both)?;
        Ok((v.rows(0, r).sum().sqrt(), v.rows(r, s).sum().sqrt()))
    }
    fn trace_and_frobenius(&self, x: &DeviceMatrix) -> Result<(f64, f64), Error> {
        let r = x.nrows();
        let both = self.workspace.take(2 * r, 1, x.precision())?;
        self.diagonal_into(x, &both.rows(0, r)?)?;
        self.workspace.row_reduction_into(x, true, &both.rows(r, r)?)?;
        let v = self.workspace.read_vector(&both)?;
        Ok((v.rows(0, r).sum(), v.rows(r, r).sum().sqrt()))
    }
    fn symmetrise(&self, x: DeviceMatrix) -> Result<DeviceMatrix, Error> {
        // As DeviceProducts: used as computed.
        Ok(x)
    }
    fn order(&self, x: &DeviceMatrix) -> usize {
        x.nrows()
    }
}

impl WorkspaceProducts<'_, '_> {
    /// The diagonal of `x` (r x r) into `out` (r x 1), recorded.
    fn diagonal_into(&self, x: &DeviceMatrix, out: &DeviceMatrix) -> Result<(), Error> {
        let identity = self.combine(0.0, x, 0.0, None, 1.0)?;
        let diagonal = self.workspace.take(x.nrows(), x.ncols(), x.precision())?;
        self.workspace.hadamard_into(x, &identity, &diagonal)?;
        self.workspace.row_reduction_into(&diagonal, false, out)
    }
}

/// `[M]_+` from [`positive_part_polar`]: the dense matrix `P_k` and what
/// the dual needs of it. On a device `P_k` is not symmetrised: its
/// antisymmetric part is rounding, which cancels in quadratic forms
/// `p^T P_k p` and the trace.
#[derive(Debug, Clone)]
pub struct PolarPart<T> {
    /// `P_k = (M + M X_k) / 2` (symmetrised on the host).
    pub matrix: T,
    /// `tr P_k`.
    pub trace: f64,
    /// `||P_k||_F^2`.
    pub frobenius_squared: f64,
    /// Polynomial steps taken.
    pub steps: usize,
    /// Products of order `r` computed.
    pub products: usize,
    /// The a-priori bound on `||[M]_+ - P_k||_F` (absolute, including the
    /// rounding allowance).
    pub bound: f64,
}

/// `[M]_+` of the symmetric `m` by the polynomial sign iteration of the
/// module docs, to `tolerance ||M||_F` in the Frobenius norm (a-priori
/// bound).
///
/// Errors: [`Error::InvalidParameter`] for a tolerance outside `(0, 1)`;
/// [`Error::InvalidParameter`] for a non-finite `||M||_F`;
/// [`Error::InvalidParameter`] as well when [`MAX_STEPS`] steps cannot
/// reach the tolerance (one near the rounding allowance); the products' errors.
pub fn positive_part_polar<B: SymmetricProducts>(products: &B, m: &B::Matrix, family: StepFamily, tolerance: f64) -> Result<PolarPart<B::Matrix>, Error> {
    if !(tolerance > 0.0 && tolerance < 1.0) {
        return Err(Error::InvalidParameter { name: "tolerance", reason: format!("must be in (0, 1), got {tolerance}") });
    }
    let frobenius = products.frobenius(m)?;
    polar_with_norm(products, m, frobenius, family, tolerance)
}

/// The checks of the polar route's arguments: a tolerance in `(0, 1)` and
/// a finite `||M||_F`.
fn check_polar(frobenius: f64, tolerance: f64) -> Result<(), Error> {
    if !(tolerance > 0.0 && tolerance < 1.0) {
        return Err(Error::InvalidParameter { name: "tolerance", reason: format!("must be in (0, 1), got {tolerance}") });
    }
    if !frobenius.is_finite() {
        return Err(Error::InvalidParameter { name: "m", reason: format!("its Frobenius norm is {frobenius} (non-finite or overflowing entries)") });
    }
    Ok(())
}

/// [`positive_part_polar`] with `||M||_F` already known.
fn polar_with_norm<B: SymmetricProducts>(products: &B, m: &B::Matrix, frobenius: f64, family: StepFamily, tolerance: f64) -> Result<PolarPart<B::Matrix>, Error> {
    check_polar(frobenius, tolerance)?;
    if frobenius == 0.0 {
        return Ok(PolarPart { matrix: products.combine(0.0, m, 0.0, None, 0.0)?, trace: 0.0, frobenius_squared: 0.0, steps: 0, products: 0, bound: 0.0 });
    }
    let m2 = products.product(m, m)?;
    let square = products.frobenius(&m2)?;
    polar_steps(products, m, m2, frobenius, square, family, tolerance)
}

/// [`positive_part_polar`] with `||M||_F` and `||M^2||_F` read together
/// ([`SymmetricProducts::frobenius_pair`]: one read-back on a device),
/// `M^2` computed first.
fn polar_with_square<B: SymmetricProducts>(products: &B, m: &B::Matrix, family: StepFamily, tolerance: f64) -> Result<PolarPart<B::Matrix>, Error> {
    check_polar(0.0, tolerance)?;
    let m2 = products.product(m, m)?;
    let (frobenius, square) = products.frobenius_pair(m, &m2)?;
    check_polar(frobenius, tolerance)?;
    if frobenius == 0.0 {
        return Ok(PolarPart { matrix: products.combine(0.0, m, 0.0, None, 0.0)?, trace: 0.0, frobenius_squared: 0.0, steps: 0, products: 0, bound: 0.0 });
    }
    polar_steps(products, m, m2, frobenius, square, family, tolerance)
}

/// The steps of the module docs from `M`, `M^2`, `||M||_F > 0` and
/// `||M^2||_F`.
fn polar_steps<B: SymmetricProducts>(products: &B, m: &B::Matrix, m2: B::Matrix, frobenius: f64, square: f64, family: StepFamily, tolerance: f64) -> Result<PolarPart<B::Matrix>, Error> {
    let r = products.order(m);
    // ||M||_2^2 <= ||M^2||_F, less the rounding of the computed square.
    let square = square + 2.0 * r as f64 * f64::EPSILON * frobenius * frobenius;
    let scale = (square.sqrt() * (1.0 + 4.0 * f64::EPSILON)).min(frobenius * (1.0 + 4.0 * f64::EPSILON));
    let spectrum = Spectrum { order: r, frobenius, scale };
    let chosen = cached_plan(&spectrum, family, tolerance).ok_or_else(|| Error::InvalidParameter {
        name: "tolerance",
        reason: format!("{tolerance:e} is not reached in {MAX_STEPS} steps at order {r} (the rounding allowance alone is {:e})", rounding_allowance(r, MAX_STEPS.min(30))),
    })?;
    let mut x = products.combine(1.0 / scale, m, 0.0, None, 0.0)?;
    let mut x2 = products.combine(1.0 / (scale * scale), &m2, 0.0, None, 0.0)?;
    drop(m2);
    let count = chosen.steps.len();
    for (k, step) in chosen.steps.iter().enumerate() {
        let [a, b, e] = step.coefficients;
        let w = if e != 0.0 {
            let x4 = products.product(&x2, &x2)?;
            products.combine(b, &x2, e, Some(&x4), a)?
        } else {
            products.combine(b, &x2, 0.0, None, a)?
        };
        x = products.product(&x, &w)?;
        if k + 1 < count {
            x2 = products.product(&x, &x)?;
        }
    }
    let mx = products.product(m, &x)?;
    let p = products.symmetrise(products.combine(0.5, m, 0.5, Some(&mx), 0.0)?)?;
    let (trace, norm) = products.trace_and_frobenius(&p)?;
    Ok(PolarPart { matrix: p, trace, frobenius_squared: norm * norm, steps: count, products: chosen.products, bound: chosen.relative_bound * frobenius })
}

/// [`positive_part_polar`] on a host matrix with the default steps
/// ([`StepFamily::ScaledCubic`]).
///
/// Errors: those of [`positive_part_polar`], and empty, non-square or
/// non-finite `m`.
pub fn positive_part_polar_host(m: &DMatrix<f64>, tolerance: f64) -> Result<PolarPart<DMatrix<f64>>, Error> {
    linalg::check_matrix("m", m)?;
    linalg::check_dim("columns of m vs its rows", m.nrows(), m.ncols())?;
    positive_part_polar(&HostProducts, m, StepFamily::ScaledCubic, tolerance)
}

/// [`positive_part_polar`] on a resident `f64` matrix of `device`, with the
/// default steps ([`StepFamily::ScaledCubic`]); the result stays on the device.
///
/// Errors: those of [`positive_part_polar`], a non-square or non-`f64` `m`.
pub fn positive_part_polar_resident(device: &Device, m: &DeviceMatrix, tolerance: f64) -> Result<PolarPart<DeviceMatrix>, Error> {
    if m.precision() != Precision::F64 {
        return Err(Error::PrecisionMismatch { expected: Precision::F64, found: m.precision() });
    }
    linalg::check_dim("columns of m vs its rows", m.nrows(), m.ncols())?;
    positive_part_polar(&DeviceProducts { device }, m, StepFamily::ScaledCubic, tolerance)
}

/// `||M||_F` of a resident matrix (its `r` squared row norms come back).
///
/// Errors: those of the device.
pub fn resident_frobenius(device: &Device, m: &DeviceMatrix) -> Result<f64, Error> {
    DeviceProducts { device }.frobenius(m)
}

/// [`positive_part_polar_resident`] with `||M||_F` (from
/// [`resident_frobenius`]) already known: one read-back fewer.
///
/// Errors: those of [`positive_part_polar_resident`].
pub fn positive_part_polar_resident_with_norm(device: &Device, m: &DeviceMatrix, frobenius: f64, tolerance: f64) -> Result<PolarPart<DeviceMatrix>, Error> {
    if m.precision() != Precision::F64 {
        return Err(Error::PrecisionMismatch { expected: Precision::F64, found: m.precision() });
    }
    linalg::check_dim("columns of m vs its rows", m.nrows(), m.ncols())?;
    polar_with_norm(&DeviceProducts { device }, m, frobenius, StepFamily::ScaledCubic, tolerance)
}

/// [`positive_part_polar_resident`] recorded in `workspace`
/// ([`WorkspaceProducts`]): the same steps and arithmetic, the outputs
/// from its pool; `||M||_F` and `||M^2||_F` come back in one read-back,
/// `tr P_k` and `||P_k||_F` in another.
///
/// Errors: those of [`positive_part_polar_resident`].
pub(crate) fn positive_part_polar_in(workspace: &Workspace<'_>, m: &DeviceMatrix, tolerance: f64) -> Result<PolarPart<DeviceMatrix>, Error> {
    if m.precision() != Precision::F64 {
        return Err(Error::PrecisionMismatch { expected: Precision::F64, found: m.precision() });
    }
    linalg::check_dim("columns of m vs its rows", m.nrows(), m.ncols())?;
    polar_with_square(&WorkspaceProducts { workspace }, m, StepFamily::ScaledCubic, tolerance)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_steps_keep_the_interval_in_zero_one() {
        let mut l = 1e-12;
        for _ in 0..40 {
            let step = scaled_step(l);
            let (lo, hi) = step.range(l, 1.0);
            assert!(lo >= l * (1.0 - 1e-12) && hi <= 1.0 + 1e-14, "[{lo}, {hi}] from l = {l}");
            l = step.value(l);
        }
        assert!(1.0 - l < 1e-14, "converged to {l}");
    }

    #[test]
    fn the_range_of_a_step_contains_sampled_values() {
        let steps = [scaled_step(1e-3), OddStep { coefficients: [15.0 / 8.0, -10.0 / 8.0, 3.0 / 8.0] }, OddStep { coefficients: [3.4445, -4.7750, 2.0315] }];
        for step in steps {
            for (lo, hi) in [(0.0, 1.0), (0.2, 0.9), (-0.5, 0.3), (0.95, 1.2)] {
                let (min, max) = step.range(lo, hi);
                for i in 0..=1000 {
                    let v = step.value(lo + (hi - lo) * i as f64 / 1000.0);
                    assert!(v >= min && v <= max, "{step:?} on [{lo}, {hi}]: {v} outside [{min}, {max}]");
                }
            }
        }
    }

    #[test]
    fn the_bound_holds_on_every_sampled_point_of_the_composition() {
        // The bound's per-piece defect against the composition evaluated directly.
        let spectrum = Spectrum { order: 1, frobenius: 1.0, scale: 1.0 };
        let chosen = plan(&spectrum, StepFamily::ScaledCubic, 1e-6).unwrap();
        let again = cached_plan(&spectrum, StepFamily::ScaledCubic, 1e-6).unwrap();
        assert_eq!(again, cached_plan(&spectrum, StepFamily::ScaledCubic, 1e-6).unwrap());
        assert!(again.relative_bound <= 1e-6);
        let worst = (0..=200_000)
            .map(|i| {
                let x = 10f64.powf(-12.0 * i as f64 / 200_000.0);
                let s = chosen.steps.iter().fold(x, |v, st| st.value(v));
                x * (1.0 - s.abs()).abs() / 2.0
            })
            .fold(0.0f64, f64::max);
        assert!(worst <= chosen.relative_bound, "sampled {worst:e} above the bound {:e}", chosen.relative_bound);
        assert!(worst > 0.2 * chosen.relative_bound, "sampled {worst:e} far below the bound {:e}: the bound is loose", chosen.relative_bound);
    }

    #[test]
    fn the_scaled_family_needs_fewer_products_than_the_fixed_steps() {
        let spectrum = Spectrum { order: 1000, frobenius: 3.0, scale: 1.0 };
        let scaled = plan(&spectrum, StepFamily::ScaledCubic, 1e-9).unwrap();
        let cubic = plan(&spectrum, StepFamily::Cubic, 1e-9).unwrap();
        let quintic = plan(&spectrum, StepFamily::Quintic, 1e-9).unwrap();
        assert!(scaled.products < cubic.products && scaled.products < quintic.products, "{} vs {} and {}", scaled.products, cubic.products, quintic.products);
    }
}

