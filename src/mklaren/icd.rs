//! Incomplete Cholesky decomposition (Eq. 1-3), its look-ahead columns
//! (Eq. 12-13), the Nystrom approximation and the out-of-sample transform
//! (Eq. 21).

use nalgebra::{DMatrix, DVector};
use rayon::prelude::*;

use super::columns::{KernelColumns, Rows, ROW_CHUNK};
use crate::input::AsMatrix;
use crate::error::Error;
use crate::linalg;
use crate::precision::{Precision, WorkingPrecision};
use crate::resident::DeviceMatrix;
use crate::{Device, Kernel};

/// The state of an incomplete Cholesky decomposition `K ~ G G^T` (Eq. 1-3):
/// the columns of `G` computed so far, their pivots (the active set), and the
/// residual diagonal `d = diag(K - G G^T)`.
#[derive(Debug, Clone)]
pub(crate) struct CholeskyState {
    pub(crate) columns: Vec<Vec<f64>>,
    pub(crate) pivots: Vec<usize>,
    pub(crate) diag: Vec<f64>,
}

/// The larger of two `(index, value)` pairs; on equal values the lower index
/// (the first maximum, as a sequential scan finds it).
fn larger(a: (usize, f64), b: (usize, f64)) -> (usize, f64) {
    if b.1 > a.1 || (b.1 == a.1 && b.0 < a.0) {
        b
    } else {
        a
    }
}

/// One Cholesky step (Eq. 2) on pivot `i` given the previous columns:
/// `g_k = (K(k, i) - sum_t G(k, t) G(i, t)) / sqrt(d_i)`, `g_i = sqrt(d_i)`,
/// zero on earlier pivots; then `d_k -= g_k^2` (Eq. 3), written into `out`
/// (n). One pass over row chunks (in parallel) does the combination, the
/// scaling, the diagonal update and the search for the largest residual
/// diagonal afterwards, which it returns `(index, value)` (the next greedy
/// pivot of plain ICD).
///
/// The residual diagonal is 0 on earlier pivots (Eq. 3 keeps it there), so
/// the update of those rows with the not yet zeroed `g` leaves them 0.
fn cholesky_column(
    cols: &KernelColumns<'_>,
    previous: &[&[f64]],
    previous_pivots: &[usize],
    diag: &mut [f64],
    i: usize,
    out: &mut [f64],
) -> Result<(usize, f64), Error> {
    cols.column_into(i, out)?;
    let coeff: Vec<f64> = previous.iter().map(|c| c[i]).collect();
    let pivot_value = diag[i].max(0.0).sqrt();
    Ok(cholesky_update(out, previous, &coeff, diag, pivot_value, Some(i), previous_pivots))
}

/// The row-wise part of a Cholesky step (Eq. 2-3) on rows that hold the
/// kernel column `K(:, i)` in `out`: `out_k = (out_k - sum_t G(k, t) coeff_t)
/// / pivot_value` with `coeff = G(i, :)` and `pivot_value = sqrt(d_i)`,
/// `out = pivot_value` on the pivot's row (`pivot_row`, where these rows
/// hold it), `d_k -= out_k^2`, and `out` and `d` zero on the rows of earlier
/// pivots. The rows may be all rows or a block of them (a shard): every row
/// is computed alone, so a block gets the bits of the same rows of the whole.
/// Returns the largest residual diagonal afterwards `(row, value)` (the first
/// one; `(0, -inf)` for no rows).
pub(crate) fn cholesky_update(
    out: &mut [f64],
    previous: &[&[f64]],
    coeff: &[f64],
    diag: &mut [f64],
    pivot_value: f64,
    pivot_row: Option<usize>,
    previous_pivots: &[usize],
) -> (usize, f64) {
    let inv = 1.0 / pivot_value;
    let i = pivot_row.unwrap_or(usize::MAX);
    let best = out
        .par_chunks_mut(ROW_CHUNK)
        .zip(diag.par_chunks_mut(ROW_CHUNK))
        .enumerate()
        .map(|(c, (g, d))| {
            let off = c * ROW_CHUNK;
            let len = g.len();
            for (col, &f) in previous.iter().zip(coeff) {
                if f != 0.0 {
                    for (o, &v) in g.iter_mut().zip(&col[off..off + len]) {
                        *o -= f * v;
                    }
                }
            }
            let mut best = (off, f64::NEG_INFINITY);
            for (k, (gv, dv)) in g.iter_mut().zip(d.iter_mut()).enumerate() {
                *gv *= inv;
                let row = off + k;
                let value = if row == i {
                    *gv = pivot_value;
                    0.0
                } else {
                    (*dv - *gv * *gv).max(0.0)
                };
                *dv = value;
                if value > best.1 {
                    best = (row, value);
                }
            }
            best
        })
        .reduce(|| (0, f64::NEG_INFINITY), larger);
    for &p in previous_pivots {
        out[p] = 0.0;
        diag[p] = 0.0;
    }
    best
}

/// Index and value of the largest entry of `d`.
pub(crate) fn argmax(d: &[f64]) -> (usize, f64) {
    d.iter().enumerate().fold((0, f64::NEG_INFINITY), |best, (i, &v)| if v > best.1 { (i, v) } else { best })
}

impl CholeskyState {
    /// Empty decomposition: `G = 0`, `d = diag(K)`, no pivots.
    pub(crate) fn new(cols: &KernelColumns<'_>) -> Self {
        CholeskyState { columns: Vec::new(), pivots: Vec::new(), diag: cols.diagonal().to_vec() }
    }

    /// Number of columns.
    pub(crate) fn rank(&self) -> usize {
        self.columns.len()
    }

    /// Adds the exact column for pivot `i` (Eq. 2-3) and returns it.
    pub(crate) fn step(&mut self, cols: &KernelColumns<'_>, i: usize) -> Result<&[f64], Error> {
        let previous: Vec<&[f64]> = self.columns.iter().map(|c| c.as_slice()).collect();
        let mut g = vec![0.0; self.diag.len()];
        cholesky_column(cols, &previous, &self.pivots, &mut self.diag, i, &mut g)?;
        self.columns.push(g);
        self.pivots.push(i);
        Ok(self.columns.last().expect("just pushed"))
    }

    /// `delta` look-ahead columns: plain ICD steps (greedy pivots, largest
    /// residual diagonal first) continuing from this state without changing
    /// it, stopping early when the residual diagonal falls to `tolerance`.
    /// Returns the block `B` (n x delta' with delta' <= delta) and its pivots.
    pub(crate) fn lookahead(&self, cols: &KernelColumns<'_>, delta: usize, tolerance: f64) -> Result<(DMatrix<f64>, Vec<usize>), Error> {
        // No more than n columns can be added (a larger delta would also
        // overflow the capacity below).
        let n = self.diag.len();
        let delta = delta.min(n);
        let mut diag = self.diag.clone();
        let mut block = vec![0.0; n * delta];
        let mut pivots = self.pivots.clone();
        let mut block_pivots = Vec::with_capacity(delta);
        let (mut i, mut best) = argmax(&diag);
        for t in 0..delta {
            if !(best > tolerance) {
                break;
            }
            let (done, rest) = block.split_at_mut(t * n);
            let previous: Vec<&[f64]> = self.columns.iter().map(|c| c.as_slice()).chain(done.chunks(n.max(1))).collect();
            (i, best) = {
                let next = cholesky_column(cols, &previous, &pivots, &mut diag, i, &mut rest[..n])?;
                pivots.push(i);
                block_pivots.push(i);
                next
            };
        }
        block.truncate(n * block_pivots.len());
        let b = DMatrix::from_vec(n, block_pivots.len(), block);
        Ok((b, block_pivots))
    }

    /// `G` as an n x rank matrix.
    pub(crate) fn factor(&self) -> DMatrix<f64> {
        let n = self.diag.len();
        let mut g = DMatrix::<f64>::zeros(n, self.rank());
        for (t, c) in self.columns.iter().enumerate() {
            g.column_mut(t).copy_from_slice(c);
        }
        g
    }

    /// The out-of-sample transform of this decomposition (Eq. 21).
    pub(crate) fn transform(&self, kernel: Kernel, x: Rows<'_>) -> Result<FactorTransform, Error> {
        let j = self.rank();
        let l = DMatrix::from_fn(j, j, |a, t| self.columns[t][self.pivots[a]]);
        Ok(FactorTransform::from_pivots(kernel, x.select_dense(&self.pivots)?, &l))
    }
}

/// An incomplete Cholesky decomposition (Eq. 1-3) whose factor `G`
/// (n x rank) and residual diagonal `d` stay on the device: per step the
/// greedy pivot from [`Device::resident_argmax`] (at most 1008 bytes back,
/// the step's one blocking wait), the pivot's kernel column in the columns'
/// device buffer ([`KernelColumns`]), `p = G G(i,:)^T` by a resident product, and the
/// fused [`Device::resident_cholesky_column`]; nothing goes up and nothing
/// is allocated after the start. `G` and `d` come down once, in
/// [`ResidentCholesky::into_state`].
pub(crate) struct ResidentCholesky<'c, 'a> {
    cols: &'c KernelColumns<'a>,
    g: DeviceMatrix,
    d: DeviceMatrix,
    combination: DeviceMatrix,
    pivots: Vec<usize>,
}

impl<'c, 'a> ResidentCholesky<'c, 'a> {
    /// `G = 0` with room for `rank` columns and `d = diag(K)` on the device
    /// of `cols`, or `None` where X is not resident in `f64` there.
    ///
    /// Errors: the device's (out of memory).
    pub(crate) fn new(cols: &'c KernelColumns<'a>, rank: usize) -> Result<Option<Self>, Error> {
        if !cols.resident_f64() {
            return Ok(None);
        }
        let (device, n, f64p) = (cols.device(), cols.n(), Precision::F64);
        let d = device.upload_vector(&DVector::from_column_slice(cols.diagonal()), f64p)?;
        let g = device.zeros(n, rank.max(1), f64p)?;
        let combination = device.zeros(n, 1, f64p)?;
        Ok(Some(ResidentCholesky { cols, g, d, combination, pivots: Vec::new() }))
    }

    /// Number of columns computed.
    pub(crate) fn rank(&self) -> usize {
        self.pivots.len()
    }

    /// The next greedy pivot and its residual diagonal (one blocking wait).
    pub(crate) fn next_pivot(&self) -> Result<(usize, f64), Error> {
        self.cols.device().resident_argmax(&self.d)
    }

    /// Adds the column of pivot `i` whose residual diagonal is `d_pivot`
    /// (Eq. 2-3); nothing comes back.
    ///
    /// Errors: no room left for a column; those of the device operations.
    pub(crate) fn step(&mut self, i: usize, d_pivot: f64) -> Result<(), Error> {
        let device = self.cols.device();
        let t = self.pivots.len();
        let column = self.cols.resident_column(i)?.ok_or(Error::DeviceMismatch)?;
        device.resident_matmul_into(&self.g, &self.g.rows(i, 1)?, linalg::MatrixProduct::ABt, &self.combination, false)?;
        device.resident_cholesky_column(&column, &self.combination, &self.d, &self.g, t, i, d_pivot)?;
        self.pivots.push(i);
        Ok(())
    }

    /// The decomposition on the host: `G` and `d` read back once (pivots,
    /// marked `-1` in the resident `d`, have residual 0).
    pub(crate) fn into_state(self) -> Result<CholeskyState, Error> {
        let device = self.cols.device();
        let g = device.to_host(&self.g)?;
        let d = device.to_host(&self.d)?;
        let columns = (0..self.pivots.len()).map(|t| g.column(t).as_slice().to_vec()).collect();
        let diag = d.iter().map(|&v| v.max(0.0)).collect();
        Ok(CholeskyState { columns, pivots: self.pivots, diag })
    }
}

/// The linear map from kernel values to Cholesky factors of new samples
/// (Eq. 21): `G* = K(*, A) T` with `T = K(A,A)^{-1} K(A,:) G (G^T G)^{-1}`,
/// an |A| x rank matrix stored after training, so a new sample needs only
/// its kernel values against the active pivots.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct FactorTransform {
    kernel: Kernel,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    pivot_rows: DMatrix<f64>,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    transform: DMatrix<f64>,
}

impl FactorTransform {
    /// The transform `G* = K(X*, A) T` from the samples at the pivots `A`
    /// and `T` (a Nystrom map, or an incomplete Cholesky factor's `L^{-T}`).
    pub(crate) fn new(kernel: Kernel, pivot_rows: DMatrix<f64>, transform: DMatrix<f64>) -> FactorTransform {
        FactorTransform { kernel, pivot_rows, transform }
    }

    /// The transform of an incomplete Cholesky factor `G` (Eq. 21) from its
    /// rows at the pivots `G(A, :)` (|A| x |A|, in pivot order; its lower
    /// triangle is read) and the samples at the pivots: `G(A, :) = L` is
    /// lower triangular, `L L^T = K(A, A)` and `G = K(:, A) L^{-T}`, so
    /// `T = K(A,A)^{-1} K(A,:) G (G^T G)^{-1} = L^{-T}`.
    pub(crate) fn from_pivots(kernel: Kernel, pivot_rows: DMatrix<f64>, g_at_pivots: &DMatrix<f64>) -> FactorTransform {
        let j = g_at_pivots.nrows();
        let l = DMatrix::from_fn(j, j, |a, t| if t <= a { g_at_pivots[(a, t)] } else { 0.0 });
        let l_inv = l.solve_lower_triangular(&DMatrix::identity(j, j)).expect("pivot values are positive");
        FactorTransform { kernel, pivot_rows, transform: l_inv.transpose() }
    }

    /// The check of a loaded transform (of kernel `q`): a valid kernel; `T`
    /// with a row per pivot; no columns without pivots (the factors of new
    /// samples then have none); pivots of at least one column; every number
    /// finite and within [`crate::io::MAX_STORED_MAGNITUDE`].
    #[cfg(feature = "serde")]
    pub(crate) fn check_loaded(&self, q: usize) -> crate::error::Result<()> {
        use crate::io::{ensure, ensure_bounded, ensure_kernel};
        ensure_kernel(&format!("kernel {q}"), &self.kernel)?;
        let (a, d) = self.pivot_rows.shape();
        let (t, r) = self.transform.shape();
        ensure(a == t, || format!("kernel {q}: {a} pivot rows and a transform of {t} rows"))?;
        ensure(a >= 1 || r == 0, || format!("kernel {q}: a transform of {r} columns without pivots"))?;
        ensure(a == 0 || d >= 1, || format!("kernel {q}: pivot rows of no columns"))?;
        ensure_bounded(&format!("kernel {q}: pivot rows"), self.pivot_rows.iter())?;
        ensure_bounded(&format!("kernel {q}: factor transform"), self.transform.iter())
    }

    /// The kernel.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// The training samples at the pivots (|A| x d).
    pub fn pivot_rows(&self) -> &DMatrix<f64> {
        &self.pivot_rows
    }

    /// The matrix `T` (|A| x rank).
    pub fn matrix(&self) -> &DMatrix<f64> {
        &self.transform
    }

    /// Factors of new samples `G* = K(X*, A) T` (t x rank); `K(X*, A)` is
    /// built on `device`. On a GPU the samples, pivots and `T` go up once
    /// and the kernel matrix and the product run there (in `f64` where the
    /// adapter has it); only `G*` comes back.
    ///
    /// Sparse rows ([`AsMatrix::as_csr`]) stay sparse: `K(X*, A)` from
    /// sparse inner products against the (dense) pivot rows, on the CPU on
    /// every device ([`crate::nystrom::features_sparse`]).
    pub fn apply(&self, device: &Device, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<DMatrix<f64>, Error> {
        if let Some(csr) = x.as_csr() {
            return self.apply_rows(device, Rows::Sparse(csr));
        }
        let x = x.as_matrix()?;
        self.apply_rows(device, Rows::Dense(&x))
    }

    /// [`FactorTransform::apply`] on dense or sparse rows.
    pub(crate) fn apply_rows(&self, device: &Device, x: Rows<'_>) -> Result<DMatrix<f64>, Error> {
        if self.pivot_rows.nrows() == 0 {
            x.check("x")?;
            return Ok(DMatrix::zeros(x.nrows(), 0));
        }
        match x {
            Rows::Dense(x) => crate::nystrom::features(device, &self.kernel, &self.pivot_rows, &self.transform, x),
            Rows::Sparse(x) => crate::nystrom::features_sparse(&self.kernel, &self.pivot_rows, &self.transform, x),
        }
    }
}

/// Parameters of the incomplete Cholesky decomposition with greedy pivots.
#[derive(Debug, Clone, PartialEq)]
pub struct IcdParams {
    pub(super) rank: usize,
    pub(super) tolerance: f64,
    pub(super) precision: WorkingPrecision,
}

impl IcdParams {
    /// At most `rank` columns, valid in `1..=n` for n samples (checked at
    /// fit); default tolerance `1e-12`.
    pub fn new(rank: usize) -> Self {
        IcdParams { rank, tolerance: 1e-12, precision: WorkingPrecision::Auto }
    }

    /// The working precision of the kernel columns on a GPU
    /// ([`Device::working_precision`]): `Auto` and `F64` hold X in `f64`
    /// where the adapter has it and run the Cholesky steps on the device
    /// (Eq. 1-3); `F32` computes each column in `f32` and reads it back for
    /// the host steps. On the CPU the decomposition is `f64` whatever the
    /// setting.
    pub fn precision(mut self, precision: WorkingPrecision) -> Self {
        self.precision = precision;
        self
    }

    /// Stop when the largest residual diagonal `max_i d_i` is below
    /// `tolerance` (finite and `>= 0`; checked at fit).
    pub fn tolerance(mut self, tolerance: f64) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// Checks the parameters (the rank against the number of samples is
    /// checked by `fit`); `fit` calls it first.
    ///
    /// Errors ([`Error::InvalidParameter`]): `rank == 0`, a `tolerance` not
    /// finite and `>= 0`.
    pub fn validate(&self) -> Result<(), Error> {
        if self.rank == 0 {
            return Err(Error::InvalidParameter { name: "rank", reason: "must be >= 1".into() });
        }
        if !(self.tolerance.is_finite() && self.tolerance >= 0.0) {
            return Err(Error::InvalidParameter { name: "tolerance", reason: format!("must be finite and >= 0, got {}", self.tolerance) });
        }
        Ok(())
    }

    /// Decomposes the kernel matrix of `kernel` on the rows of `x` (n x d)
    /// without forming it: each step computes one kernel column on `device`,
    /// pivot `i = argmax d_i` (Eq. 1-3), cost O(n rank (rank + d)).
    ///
    /// Errors: rank 0 or above n, negative or non-finite tolerance, empty or
    /// non-finite `x`, invalid kernel.
    ///
    /// Sparse rows ([`AsMatrix::as_csr`]) stay sparse: the columns come from
    /// sparse inner products on the CPU on every device (the host steps),
    /// and the transform keeps the pivots' rows dense.
    pub fn fit(&self, device: &Device, kernel: &Kernel, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<IcdFactor, Error> {
        if let Some(csr) = x.as_csr() {
            return self.fit_rows(device, kernel, Rows::Sparse(csr));
        }
        let x = x.as_matrix()?;
        self.fit_rows(device, kernel, Rows::Dense(&x))
    }

    /// [`IcdParams::fit`] on dense or sparse rows.
    pub(crate) fn fit_rows(&self, device: &Device, kernel: &Kernel, x: Rows<'_>) -> Result<IcdFactor, Error> {
        self.validate()?;
        let cols = KernelColumns::on_rows(device, *kernel, x, device.working_precision(self.precision)?)?;
        if self.rank > cols.n() {
            return Err(Error::RankTooLarge { rank: self.rank, n: cols.n() });
        }
        let state = match ResidentCholesky::new(&cols, self.rank)? {
            Some(mut resident) => {
                while resident.rank() < self.rank {
                    let (i, best) = resident.next_pivot()?;
                    if !(best > self.tolerance) {
                        break;
                    }
                    resident.step(i, best)?;
                }
                resident.into_state()?
            }
            None => {
                let mut state = CholeskyState::new(&cols);
                while state.rank() < self.rank {
                    let (i, best) = argmax(&state.diag);
                    if !(best > self.tolerance) {
                        break;
                    }
                    state.step(&cols, i)?;
                }
                state
            }
        };
        Ok(IcdFactor { device: device.clone(), factor: state.factor(), transform: state.transform(*kernel, cols.rows())?, pivots: state.pivots, residual_diagonal: DVector::from_vec(state.diag) })
    }
}

/// A fitted incomplete Cholesky decomposition `K ~ G G^T`.
///
/// Its methods compute on the device it was fitted on ([`OnDevice`](crate::estimator::OnDevice)).
#[derive(Debug, Clone)]
pub struct IcdFactor {
    factor: DMatrix<f64>,
    pivots: Vec<usize>,
    residual_diagonal: DVector<f64>,
    transform: FactorTransform,
    device: Device,
}

impl IcdFactor {
    /// The fitted object of a decomposition: `G` (n x rank), its pivots,
    /// the residual diagonal and the transform, on `device`.
    pub(crate) fn from_parts(device: &Device, factor: DMatrix<f64>, pivots: Vec<usize>, residual_diagonal: DVector<f64>, transform: FactorTransform) -> IcdFactor {
        IcdFactor { device: device.clone(), factor, pivots, residual_diagonal, transform }
    }

    /// Factors of new samples `G* = K(X*, A) T` (t x rank), computed on the
    /// device the factor was fitted on ([`FactorTransform::apply`]).
    pub fn apply(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<DMatrix<f64>, Error> {
        self.transform.apply(&self.device, x)
    }

    /// `G` (n x rank).
    pub fn factor(&self) -> &DMatrix<f64> {
        &self.factor
    }

    /// Pivots in the order they were chosen.
    pub fn pivots(&self) -> &[usize] {
        &self.pivots
    }

    /// Number of columns computed (less than asked when the tolerance stopped it).
    pub fn rank(&self) -> usize {
        self.pivots.len()
    }

    /// `diag(K - G G^T)`; its sum is the trace-norm error of the approximation.
    pub fn residual_diagonal(&self) -> &DVector<f64> {
        &self.residual_diagonal
    }

    /// The out-of-sample transform (Eq. 21).
    pub fn transform(&self) -> &FactorTransform {
        &self.transform
    }
}

/// The Nystrom approximation `K ~ K(:, A) K(A, A)^+ K(A, :) = G G^T` on the
/// pivots `A`: `G = K(:, A) W` with the map `W = U S^{-1/2}` of
/// [`NystromMap::eigen`](crate::nystrom::NystromMap::eigen) on the
/// eigenvalues of `K(A, A)` above `1e-12 max S` (the pseudo-inverse).
/// `K(:, A)` is built on `device`, and `K(A, A)` is its symmetrised rows at `A`.
///
/// Errors: empty or repeated pivot list, a pivot out of range, invalid inputs.
pub fn nystrom(device: &Device, kernel: &Kernel, x: &DMatrix<f64>, pivots: &[usize]) -> Result<NystromFactor, Error> {
    nystrom_in(device, kernel, Rows::Dense(x), pivots, WorkingPrecision::Auto)
}

/// [`nystrom`] with `K(:, A)` in the working precision `setting`
/// ([`Device::working_precision`]; `Auto`: as [`nystrom`]), on dense rows
/// or on sparse rows (`K(:, A)` from sparse inner products on the CPU,
/// [`crate::sparse::kernel_matrix_sparse_cpu`], the pivots' rows kept
/// dense in the transform).
pub(crate) fn nystrom_in(device: &Device, kernel: &Kernel, x: Rows<'_>, pivots: &[usize], setting: WorkingPrecision) -> Result<NystromFactor, Error> {
    x.check("x")?;
    kernel.validate()?;
    if pivots.is_empty() {
        return Err(Error::InvalidParameter { name: "pivots", reason: "empty pivot set".into() });
    }
    let mut seen = vec![false; x.nrows()];
    for &p in pivots {
        if p >= x.nrows() {
            return Err(crate::Error::IndexOutOfRange { what: "pivots", index: p, len: x.nrows() });
        }
        if std::mem::replace(&mut seen[p], true) {
            return Err(Error::InvalidParameter { name: "pivots", reason: format!("pivot {p} repeated") });
        }
    }
    let (pivot_rows, c) = match x {
        Rows::Dense(x) => {
            let pivot_rows = x.select_rows(pivots);
            let c = device.kernel_matrix_in(kernel, x, &pivot_rows, setting)?;
            (pivot_rows, c)
        }
        Rows::Sparse(x) => {
            let selected = crate::sparse::select_csr_rows(x, pivots);
            (crate::sparse::densify(&selected)?, crate::sparse::kernel_matrix_sparse_cpu(kernel, x, &selected)?)
        }
    };
    let m = pivots.len();
    let w = DMatrix::from_fn(m, m, |a, b| 0.5 * (c[(pivots[a], b)] + c[(pivots[b], a)]));
    let transform = crate::nystrom::NystromMap::eigen(&w, 1e-12, None)?;
    if transform.rank() == 0 {
        return Err(Error::RankDeficient { requested: m, reached: 0 });
    }
    let transform = transform.into_matrix();
    let factor = linalg::matmul(&c, &transform);
    Ok(NystromFactor { device: device.clone(), factor, pivots: pivots.to_vec(), transform: FactorTransform { kernel: *kernel, pivot_rows, transform } })
}

/// A fitted Nystrom approximation `K ~ G G^T`.
///
/// Its methods compute on the device it was fitted on ([`OnDevice`](crate::estimator::OnDevice)).
#[derive(Debug, Clone)]
pub struct NystromFactor {
    factor: DMatrix<f64>,
    pivots: Vec<usize>,
    transform: FactorTransform,
    device: Device,
}

impl NystromFactor {
    /// Factors of new samples `G* = K(X*, A) T` (t x rank), computed on the
    /// device the factor was fitted on ([`FactorTransform::apply`]).
    pub fn apply(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<DMatrix<f64>, Error> {
        self.transform.apply(&self.device, x)
    }

    /// `G` (n x r, r = numerical rank of `K(A, A)`).
    pub fn factor(&self) -> &DMatrix<f64> {
        &self.factor
    }

    /// The pivots.
    pub fn pivots(&self) -> &[usize] {
        &self.pivots
    }

    /// The out-of-sample transform `G* = K(*, A) U S^{-1/2}`.
    pub fn transform(&self) -> &FactorTransform {
        &self.transform
    }
}

crate::estimator::on_device!(IcdFactor, NystromFactor);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linalg::MatrixProduct;
    use crate::precision::Precision;
    use crate::resident::DeviceMatrix;

    /// A tiny deterministic generator (fresh inputs per run).
    fn uniform(seed: &mut u64) -> f64 {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (*seed >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The devices to test: the CPU, and a GPU with `f64` where there is one.
    fn devices() -> Vec<Device> {
        let mut out = vec![Device::Cpu];
        if let Some(ctx) = crate::gpu::test_context() {
            if ctx.supports(Precision::F64) {
                out.push(Device::Gpu(std::sync::Arc::new(ctx)));
            }
        }
        out
    }

    /// ICD (Eq. 1-3) with G and d resident: the pivot by
    /// [`Device::resident_argmax`], the kernel column against a row view of
    /// X, `p = G G(i,:)^T` by a resident product against a row view of G,
    /// and the fused [`Device::resident_cholesky_column`], chooses the
    /// pivots of [`CholeskyState`] (the CPU's `f64` reference) and reaches
    /// its factor and residual diagonal within 1e-10 absolute (kernel
    /// values in [0, 1]; the kernel columns agree to about 1e-15 and a step
    /// divides by `sqrt(d_i)`, which stays above 1e-3 here), on fresh
    /// random inputs, on the CPU device and on a GPU in `f64`.
    #[test]
    fn resident_icd_steps_equal_the_cpu_decomposition() {
        let mut seed = 0x1cd_u64 ^ ((std::process::id() as u64) << 17);
        let kernel = Kernel::rbf(0.8).unwrap();
        for device in devices() {
            for (n, rank) in [(37usize, 9usize), (500, 12)] {
                let x = DMatrix::from_fn(n, 3, |_, _| 2.0 * uniform(&mut seed) - 1.0);
                let cols = KernelColumns::new(&Device::Cpu, kernel, &x).unwrap();
                let mut cpu = CholeskyState::new(&cols);
                let f64p = Precision::F64;
                let xr = device.upload(&x, f64p).unwrap();
                let d = device.upload_vector(&DVector::from_column_slice(cols.diagonal()), f64p).unwrap();
                let g = device.zeros(n, rank, f64p).unwrap();
                let (kcol, p) = (device.zeros(n, 1, f64p).unwrap(), device.zeros(n, 1, f64p).unwrap());
                for t in 0..rank {
                    let before = device.device_counters();
                    let (i, best) = argmax(&cpu.diag);
                    let (di, d_pivot) = device.resident_argmax(&d).unwrap();
                    assert_eq!(di, i, "{device:?} n = {n}, step {t}");
                    assert!((d_pivot - best).abs() <= 1e-10 && best > 1e-6, "{device:?} n = {n}, step {t}: {d_pivot} vs {best}");
                    cpu.step(&cols, i).unwrap();
                    device.resident_kernel_matrix_into(&kernel, &xr, &xr.rows(i, 1).unwrap(), &kcol).unwrap();
                    device.resident_matmul_into(&g, &g.rows(i, 1).unwrap(), MatrixProduct::ABt, &p, false).unwrap();
                    device.resident_cholesky_column(&kcol, &p, &d, &g, t, i, d_pivot).unwrap();
                    if device.is_gpu() && t > 0 {
                        // A step: one blocking read of 3 numbers per arg-max
                        // block (at most 42 blocks, 1008 bytes), nothing up,
                        // nothing allocated (the arg-max's partials are reused).
                        let c = device.device_counters().since(&before);
                        let blocks = n.div_ceil(n.div_ceil(42)) as u64;
                        eprintln!("resident ICD step n = {n}: waits {} down {} up {} allocations {} submissions {} dispatches {}", c.waits, c.transfers.device_to_host_bytes, c.transfers.host_to_device_bytes, c.allocations, c.transfers.submissions, c.transfers.dispatches);
                        assert_eq!(c.waits, 1, "{c:?}");
                        assert_eq!(c.transfers.device_to_host_bytes, 3 * 8 * blocks, "{c:?}");
                        assert!(c.transfers.device_to_host_bytes <= 1024);
                        assert_eq!((c.transfers.uploads, c.transfers.host_to_device_bytes), (0, 0), "{c:?}");
                        assert_eq!((c.allocations, c.allocated_bytes), (0, 0), "{c:?}");
                    }
                }
                let (gh, dh) = (device.to_host(&g).unwrap(), device.to_host(&d).unwrap());
                let factor = cpu.factor();
                for r in 0..n {
                    let pivot = cpu.pivots.contains(&r);
                    assert_eq!(dh[(r, 0)] < 0.0, pivot, "{device:?} n = {n}: pivots are marked in d, row {r}");
                    assert!((dh[(r, 0)].max(0.0) - cpu.diag[r]).abs() <= 1e-10, "{device:?} n = {n}: d at row {r}");
                    for t in 0..rank {
                        assert!((gh[(r, t)] - factor[(r, t)]).abs() <= 1e-10, "{device:?} n = {n}: G({r}, {t}) {} vs {}", gh[(r, t)], factor[(r, t)]);
                    }
                }
                // Bad input: a typed error, nothing changed.
                let other = device.zeros(n, 1, f64p).unwrap();
                let i = cpu.pivots[0];
                for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
                    assert!(matches!(device.resident_cholesky_column(&kcol, &p, &other, &g, 0, i, bad), Err(Error::InvalidParameter { .. })), "d_i = {bad}");
                }
                assert!(matches!(device.resident_cholesky_column(&kcol, &p, &other, &g, rank, i, 1.0), Err(Error::IndexOutOfRange { .. })));
                assert!(matches!(device.resident_cholesky_column(&kcol, &p, &other, &g, 0, n, 1.0), Err(Error::IndexOutOfRange { .. })));
                assert!(matches!(device.resident_cholesky_column(&kcol, &p, &kcol, &g, 0, i, 1.0), Err(Error::InvalidParameter { .. })));
                let short: DeviceMatrix = device.zeros(n - 1, 1, f64p).unwrap();
                assert!(device.resident_cholesky_column(&short, &p, &other, &g, 0, i, 1.0).is_err());
                assert!(matches!(device.resident_argmax(&g), Err(Error::DimensionMismatch { .. })));
                // A resident infinity (overflow of a resident operation;
                // uploads refuse non-finite values) is a typed error.
                let big = device.upload_vector(&DVector::from_fn(n, |r, _| if r == n / 2 { 1e308 } else { 1.0 }), f64p).unwrap();
                let inf = device.resident_combine(10.0, &big, 0.0, &big, 0.0).unwrap();
                assert!(matches!(device.resident_argmax(&inf), Err(Error::NonFinite { .. })), "{device:?}");
                assert_eq!(device.to_host(&g).unwrap(), gh, "{device:?}: a refused step changes nothing");
            }
        }
    }
}
