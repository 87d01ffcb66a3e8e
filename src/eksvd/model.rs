//! The user-facing model: validated parameters -> `fit` -> fitted model ->
//! `transform` (projection scores, Eq. 7), for `Q >= 2` sources ([`EksvdParams`])
//! and for two ([`KsvdParams`], KSVD of Eq. 2).

use nalgebra::{DMatrix, DVector};

use super::coupling::CouplingMatrix;
use super::covariance::solve_covariance_in;
use super::dual::{solve_dual, solve_dual_in, DualSolution};
use super::eigensolver::Eigensolver;
use crate::input::AsMatrix;
use crate::data::{check_shape, check_source_matrix};
use crate::error::Result;
use crate::error::Error;
use super::features::{FeatureMap, FittedFeatureMap};
use super::objective::{kkt_residuals, objective_terms, KktResiduals, ObjectiveTerms};
use crate::data::MultiSource;
use crate::gpu::MatrixProduct;
use crate::resident::DeviceMatrix;
use crate::linalg::matmul;
use crate::precision::WorkingPrecision;
use crate::Device;

/// Which formulation finds the components.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Solver {
    /// Dual eKSVD (Eq. 4) on `G_Q`, of order `sum_q N_q`.
    Dual(Eigensolver),
    /// Covariance eKSVD (Eq. 8) on `C_Q`, of order `Q d_phi`.
    Covariance(Eigensolver),
}

/// Parameters of eKSVD (builder; checked by [`EksvdParams::validate`] and `fit`).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct EksvdParams {
    n_components: usize,
    feature_maps: Vec<FeatureMap>,
    solver: Solver,
    seed: u64,
    #[cfg_attr(feature = "serde", serde(default))]
    precision: WorkingPrecision,
}

impl EksvdParams {
    /// `n_components` components; defaults: linear feature maps, dense dual
    /// solver, seed 0, [`WorkingPrecision::Auto`].
    pub fn new(n_components: usize) -> Self {
        EksvdParams { n_components, feature_maps: vec![FeatureMap::Linear], solver: Solver::Dual(Eigensolver::Dense), seed: 0, precision: WorkingPrecision::Auto }
    }

    /// The working precision of the fit's device work ([`WorkingPrecision`],
    /// resolved by [`Device::working_precision`]): the feature maps
    /// (`Phi_q = phi(X_q)` on the device), the covariance form's Gram
    /// matrices `Phi_q^T Phi_q` (Eq. 8), the Lanczos products
    /// `G_Q V` (Eq. 4) and, after the fit, the model's transforms. `F32`
    /// runs them in `f32` on a GPU; `F64` needs an adapter with
    /// `SHADER_F64` ([`Error::Unsupported`] at fit otherwise); on the CPU
    /// the fit computes in `f64` whatever the setting. The kernel matrix of
    /// a Nystrom map's landmarks and the dense dual solver's stored blocks
    /// are host-matrix operations ([`Device::kernel_matrix`],
    /// [`Device::matmul`]: `f32` inside on a GPU) whatever the setting.
    pub fn precision(mut self, precision: WorkingPrecision) -> Self {
        self.precision = precision;
        self
    }

    /// The working precision set ([`EksvdParams::precision`]).
    pub fn precision_setting(&self) -> WorkingPrecision {
        self.precision
    }

    /// The same kind of feature map for every source (each fitted on its own source).
    pub fn feature_map(mut self, map: FeatureMap) -> Self {
        self.feature_maps = vec![map];
        self
    }

    /// One feature map per source (all must give the same `d_phi`).
    pub fn feature_maps(mut self, maps: Vec<FeatureMap>) -> Self {
        self.feature_maps = maps;
        self
    }

    /// The formulation and eigensolver.
    pub fn solver(mut self, solver: Solver) -> Self {
        self.solver = solver;
        self
    }

    /// Seed of the random feature maps (source `q` uses `seed + q`) and of
    /// the Lanczos start vector.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Number of components.
    pub fn n_components(&self) -> usize {
        self.n_components
    }

    /// Checks the parameters (the data, and the number of feature maps
    /// against the number of sources, are checked by `fit`); `fit` calls it
    /// first after counting the sources.
    ///
    /// Errors: `n_components == 0` ([`Error::InvalidParameter`]), an invalid
    /// feature map ([`FeatureMap::validate`]) or eigensolver
    /// ([`Eigensolver::validate`]).
    pub fn validate(&self) -> Result<()> {
        if self.n_components == 0 {
            return Err(Error::InvalidParameter { name: "n_components", reason: "must be >= 1".into() });
        }
        for map in &self.feature_maps {
            map.validate()?;
        }
        match &self.solver {
            Solver::Dual(s) | Solver::Covariance(s) => s.validate(),
        }
    }

    /// [`EksvdParams::validate`] for data of `n_sources` sources: at least
    /// two ([`Error::TooFewSources`] before the other checks), and one
    /// feature map for all or one per source.
    pub(super) fn validate_for(&self, n_sources: usize) -> Result<()> {
        if n_sources < 2 {
            return Err(Error::TooFewSources(n_sources));
        }
        self.validate()?;
        if self.feature_maps.len() != 1 {
            check_shape("number of feature maps vs sources", n_sources, self.feature_maps.len())?;
        }
        Ok(())
    }

    pub(super) fn map_for(&self, q: usize) -> &FeatureMap {
        if self.feature_maps.len() == 1 { &self.feature_maps[0] } else { &self.feature_maps[q] }
    }

    /// Fits the feature maps on `data` (each source on its own rows), then
    /// solves Eq. 4 or Eq. 8. Kernel, Gram and product matrices run on `device`.
    ///
    /// Sparse (CSR) sources are mapped without densifying them
    /// ([`FeatureMap::fit`], [`FittedFeatureMap::transform_sparse`]: on a
    /// GPU the sparse products and kernel matrices run on the device, on
    /// the CPU in `f64`); their features `Phi_q` (dense, `N_q x d_phi`) then
    /// go to the solver as any features do. The result equals the fit on the dense copies up
    /// to rounding.
    pub fn fit(&self, device: &Device, data: &MultiSource) -> Result<Eksvd> {
        self.validate_for(data.n_sources())?;
        device.working_precision(self.precision)?;
        let maps: Vec<FittedFeatureMap> = (0..data.n_sources())
            .map(|q| self.map_for(q).fit(device, data.input(q), q, self.seed.wrapping_add(q as u64)).map(|m| m.in_precision(self.precision)))
            .collect::<Result<_>>()?;
        let features: Vec<DMatrix<f64>> = maps.iter().enumerate().map(|(q, m)| m.transform(data.input(q))).collect::<Result<_>>()?;
        let mut fitted = self.fit_features(device, features)?;
        fitted.maps = Some(maps);
        Ok(fitted)
    }

    /// Solves Eq. 4 or Eq. 8 from precomputed training features `Phi_q`
    /// (`N_q x d_phi`, e.g. from a neural network); the feature maps set on
    /// the parameters are not used, and new data is projected with
    /// [`Eksvd::transform_features`].
    pub fn fit_features(&self, device: &Device, features: Vec<DMatrix<f64>>) -> Result<Eksvd> {
        self.validate_for(features.len())?;
        let precision = device.working_precision(self.precision)?;
        let (features, eigenvalues, weights, alphas) = match &self.solver {
            Solver::Dual(eig) => {
                let coupling = CouplingMatrix::from_features(features)?;
                let features = coupling.features().expect("built from features").to_vec();
                let solution = solve_dual_in(device, precision, &coupling, self.n_components, eig, self.seed)?;
                let weights = solution.primal_weights(&features)?;
                (features, solution.eigenvalues, weights, solution.alphas)
            }
            Solver::Covariance(eig) => {
                // The covariance solver checks the features as the coupling
                // matrix would (count, finiteness, equal widths), without a copy.
                let solution = solve_covariance_in(device, precision, &features, self.n_components, eig, self.seed)?;
                // alpha^(q) = (Q-1) gamma Phi_q w_q (Eq. 5).
                let alphas = super::dual::dual_from_covariance(&features, &solution)?.alphas;
                (features, solution.eigenvalues, solution.weights, alphas)
            }
        };
        Ok(Eksvd { device: device.clone(), maps: None, features, eigenvalues, weights, alphas, solver: self.solver, precision: self.precision })
    }
}

impl EksvdParams {
    /// The seed of the random draws (feature maps and Lanczos start).
    pub(super) fn seed_value(&self) -> u64 {
        self.seed
    }

    /// The formulation and eigensolver set.
    pub(super) fn solver_value(&self) -> Solver {
        self.solver
    }
}

impl Eksvd {
    /// The model from its parts (shapes as [`EksvdParams::fit_features`] produces them).
    pub(super) fn from_parts(device: &Device, maps: Option<Vec<FittedFeatureMap>>, features: Vec<DMatrix<f64>>, solution: DualSolution, weights: Vec<DMatrix<f64>>, solver: Solver) -> Self {
        Eksvd { device: device.clone(), maps, features, eigenvalues: solution.eigenvalues, weights, alphas: solution.alphas, solver, precision: WorkingPrecision::Auto }
    }

    /// The model transforming in `precision` (its fit's setting).
    pub(super) fn in_precision(mut self, precision: WorkingPrecision) -> Self {
        self.precision = precision;
        self
    }
}

/// A fitted eKSVD model: eigenvalues `lambda_k = 1/gamma_k`, primal weights
/// `w_q` and dual variables `alpha^(q)` (both available whichever solver ran:
/// the dual recovers `w_q` by Eq. 5, the covariance solver `alpha^(q)` by
/// Eq. 5), the training features and, when fitted from raw data, the maps.
///
/// Its methods compute on the device it was fitted on ([`OnDevice`](crate::estimator::OnDevice): a loaded model is on the CPU).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Eksvd {
    maps: Option<Vec<FittedFeatureMap>>,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    features: Vec<DMatrix<f64>>,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    eigenvalues: DVector<f64>,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    weights: Vec<DMatrix<f64>>,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    alphas: Vec<DMatrix<f64>>,
    solver: Solver,
    /// Not saved: a loaded model is on the CPU.
    #[cfg_attr(feature = "serde", serde(skip, default = "crate::Device::cpu"))]
    device: Device,
    /// The fit's working precision, for the transforms (not saved: a loaded
    /// model is on the CPU, which computes in `f64`).
    #[cfg_attr(feature = "serde", serde(skip))]
    precision: WorkingPrecision,
}

#[cfg(feature = "serde")]
impl crate::io::SavedModel for Eksvd {
    const KIND: &'static str = "eksvd";

    /// `Q >= 2` sources; `k >= 1` positive eigenvalues (stored scales,
    /// [`crate::io::MIN_STORED_SCALE`]); per source `features` `N_q x d_phi`
    /// (`N_q, d_phi >= 1`, one `d_phi` for all sources), `weights`
    /// `d_phi x k`, `alphas` `N_q x k`; a map per source (if any) from its
    /// input dimension to `d_phi`, itself consistent; every number finite
    /// and within [`crate::io::MAX_STORED_MAGNITUDE`].
    fn check_loaded(&self) -> Result<()> {
        use crate::io::{ensure, ensure_bounded, ensure_scale};
        let (q, k) = (self.features.len(), self.eigenvalues.len());
        ensure(q >= 2 && self.weights.len() == q && self.alphas.len() == q, || format!("{q} feature blocks, {} weight and {} dual blocks (need one of each per source, at least 2 sources)", self.weights.len(), self.alphas.len()))?;
        ensure(k >= 1, || "no eigenvalues (components)".into())?;
        for (i, &v) in self.eigenvalues.iter().enumerate() {
            ensure(v > 0.0, || format!("eigenvalue {i} is {v}: the eigenvalues of a fitted model are positive"))?;
            ensure_scale(&format!("eigenvalue {i}"), v)?;
        }
        let d_phi = self.features[0].ncols();
        for s in 0..q {
            let (n, d) = self.features[s].shape();
            ensure(n >= 1 && d >= 1 && d == d_phi, || format!("source {s}: training features of {n} x {d} (need at least one row, and {d_phi} columns as source 0)"))?;
            ensure(self.weights[s].shape() == (d, k), || format!("source {s}: weights of {:?}, need {d} x {k}", self.weights[s].shape()))?;
            ensure(self.alphas[s].shape() == (n, k), || format!("source {s}: dual variables of {:?}, need {n} x {k}", self.alphas[s].shape()))?;
            ensure_bounded(&format!("source {s}: training features"), self.features[s].iter())?;
            ensure_bounded(&format!("source {s}: weights"), self.weights[s].iter())?;
            ensure_bounded(&format!("source {s}: dual variables"), self.alphas[s].iter())?;
        }
        if let Some(maps) = &self.maps {
            ensure(maps.len() == q, || format!("{} feature maps for {q} sources", maps.len()))?;
            for (s, m) in maps.iter().enumerate() {
                m.check_loaded(s)?;
                ensure(m.output_dim() == d_phi, || format!("source {s}: the map gives {} features, the model has {d_phi}", m.output_dim()))?;
            }
        }
        Ok(())
    }
}

#[cfg(feature = "serde")]
impl crate::io::SavedModel for Ksvd {
    const KIND: &'static str = "ksvd";
    fn check_loaded(&self) -> Result<()> {
        crate::io::ensure(self.model.n_sources() == 2, || format!("KSVD with {} sources", self.model.n_sources()))?;
        self.model.check_loaded()
    }
}

impl Eksvd {
    /// Number of sources `Q`.
    pub fn n_sources(&self) -> usize {
        self.features.len()
    }

    /// Number of components `k`.
    pub fn n_components(&self) -> usize {
        self.eigenvalues.len()
    }

    /// The solver that produced the model.
    pub fn solver(&self) -> Solver {
        self.solver
    }

    /// `lambda_k`, descending and positive.
    pub fn eigenvalues(&self) -> &DVector<f64> {
        &self.eigenvalues
    }

    /// `gamma_k = 1 / lambda_k`.
    pub fn gammas(&self) -> DVector<f64> {
        self.eigenvalues.map(|l| 1.0 / l)
    }

    /// Primal weights `w_q` (`d_phi x k`).
    ///
    /// # Panics
    ///
    /// If `q >= n_sources()`; [`Eksvd::try_weights`] returns an error instead.
    pub fn weights(&self, q: usize) -> &DMatrix<f64> {
        &self.weights[q]
    }

    /// Primal weights `w_q`, or [`Error::InvalidParameter`] (`q`) if `q >= n_sources()`.
    pub fn try_weights(&self, q: usize) -> Result<&DMatrix<f64>> {
        self.check_source(q)?;
        Ok(&self.weights[q])
    }

    /// Dual variables `alpha^(q)` (`N_q x k`); stacked, each component has unit norm.
    ///
    /// # Panics
    ///
    /// If `q >= n_sources()`; [`Eksvd::try_alphas`] returns an error instead.
    pub fn alphas(&self, q: usize) -> &DMatrix<f64> {
        &self.alphas[q]
    }

    /// Dual variables `alpha^(q)`, or [`Error::InvalidParameter`] (`q`) if `q >= n_sources()`.
    pub fn try_alphas(&self, q: usize) -> Result<&DMatrix<f64>> {
        self.check_source(q)?;
        Ok(&self.alphas[q])
    }

    /// Training features `Phi_q` (`N_q x d_phi`).
    ///
    /// # Panics
    ///
    /// If `q >= n_sources()`; [`Eksvd::try_training_features`] returns an error instead.
    pub fn training_features(&self, q: usize) -> &DMatrix<f64> {
        &self.features[q]
    }

    /// Training features `Phi_q`, or [`Error::InvalidParameter`] (`q`) if `q >= n_sources()`.
    pub fn try_training_features(&self, q: usize) -> Result<&DMatrix<f64>> {
        self.check_source(q)?;
        Ok(&self.features[q])
    }

    /// The fitted feature map of source `q` (`None` when fitted from
    /// features, or when `q >= n_sources()`; never panics).
    pub fn feature_map(&self, q: usize) -> Option<&FittedFeatureMap> {
        self.maps.as_ref().and_then(|m| m.get(q))
    }

    /// The dual solution (eigenvalues and `alpha^(q)`), e.g. for
    /// [`DualSolution::project`] with precomputed cross-kernel blocks.
    pub fn dual_solution(&self) -> DualSolution {
        DualSolution { eigenvalues: self.eigenvalues.clone(), alphas: self.alphas.clone() }
    }

    fn check_source(&self, q: usize) -> Result<()> {
        if q >= self.n_sources() {
            return Err(Error::InvalidParameter { name: "q", reason: format!("source {q} of {}", self.n_sources()) });
        }
        Ok(())
    }

    /// Features `phi_q(x)` of new rows of source `q`.
    pub fn features_of(&self, q: usize, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<DMatrix<f64>> {
        self.check_source(q)?;
        let maps = self.maps.as_ref().ok_or(Error::NotAvailable("feature maps (the model was fitted from precomputed features)"))?;
        maps[q].transform(x)
    }

    /// Projection scores of new features of source `q`, primal form of
    /// Eq. 7: `e = Phi_new w_q` (`n_new x k`).
    pub fn transform_features(&self, q: usize, phi: &DMatrix<f64>) -> Result<DMatrix<f64>> {
        let device = &self.device;
        self.check_source(q)?;
        check_source_matrix("features", q, phi)?;
        check_shape(format!("feature dimension of new features of source {q}"), self.weights[q].nrows(), phi.ncols())?;
        device.matmul(phi, &self.weights[q], MatrixProduct::AB)
    }

    /// Primal scores `Phi(X) w_q` of resident raw rows X of source `q`, left
    /// on the device in X's precision: the feature map and the projection run
    /// there, only the map's parameters and `w_q` go up. X is held by the
    /// model's device ([`OnDevice::to_device`](crate::estimator::OnDevice::to_device)
    /// moves the model to the device holding X).
    pub fn transform_resident(&self, q: usize, x: &DeviceMatrix) -> Result<DeviceMatrix> {
        let device = &self.device;
        self.check_source(q)?;
        let maps = self.maps.as_ref().ok_or(Error::NotAvailable("feature maps (the model was fitted from precomputed features)"))?;
        let phi = maps[q].transform_resident(x)?;
        check_shape(format!("feature dimension of new features of source {q}"), self.weights[q].nrows(), phi.ncols())?;
        let w = device.upload(&self.weights[q], x.precision())?;
        device.resident_matmul(&phi, &w, MatrixProduct::AB)
    }

    /// Projection scores of new features of source `q`, dual form of Eq. 7:
    /// `e = (1/(Q-1)) sum_{p != q} K(x, X_p) alpha^(p)` with the rectangular
    /// cross-source blocks `K(x, X_p) = Phi_new Phi_p^T` (`n_new x N_p`).
    pub fn transform_features_dual(&self, q: usize, phi: &DMatrix<f64>) -> Result<DMatrix<f64>> {
        let device = &self.device;
        self.check_source(q)?;
        check_source_matrix("features", q, phi)?;
        check_shape(format!("feature dimension of new features of source {q}"), self.weights[q].nrows(), phi.ncols())?;
        let blocks: Vec<Option<DMatrix<f64>>> = (0..self.n_sources())
            .map(|p| if p == q { Ok(None) } else { device.matmul(phi, &self.features[p], MatrixProduct::ABt).map(Some) })
            .collect::<std::result::Result<_, _>>()?;
        let refs: Vec<Option<&DMatrix<f64>>> = blocks.iter().map(|b| b.as_ref()).collect();
        self.dual_solution().project(q, &refs)
    }

    /// Projection scores (primal form) of new raw rows `x` of source `q`
    /// (on a GPU: [`Eksvd::transform_resident`] in the fit's working
    /// precision, [`EksvdParams::precision`], X up once, the scores back).
    /// Sparse rows ([`AsMatrix::as_csr`]) are mapped without densifying
    /// ([`FittedFeatureMap::transform_sparse`], on the model's device), then
    /// projected on the model's device.
    pub fn transform_source(&self, q: usize, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<DMatrix<f64>> {
        if x.as_csr().is_some() {
            let phi = self.features_of(q, x)?;
            return self.transform_features(q, &phi);
        }
        let x = x.as_matrix()?;
        let x = &*x;
        let device = &self.device;
        if device.is_gpu() && self.maps.is_some() {
            crate::linalg::check_matrix("x", x)?;
            let xd = device.upload(x, device.working_precision(self.precision)?)?;
            return device.to_host(&self.transform_resident(q, &xd)?);
        }
        if matches!(device, Device::Cpu) {
            if let Some(maps) = &self.maps {
                self.check_source(q)?;
                crate::linalg::check_matrix("x", x)?;
                check_shape("columns of new data vs the fitted feature map's input dimension", maps[q].input_dim(), x.ncols())?;
                check_shape(format!("feature dimension of new features of source {q}"), self.weights[q].nrows(), maps[q].output_dim())?;
                return maps[q].transform_projected_cpu(x, &self.weights[q]);
            }
        }
        let phi = self.features_of(q, x)?;
        self.transform_features(q, &phi)
    }

    /// Projection scores (dual form) of new raw rows `x` of source `q`.
    pub fn transform_dual(&self, q: usize, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<DMatrix<f64>> {
        let phi = self.features_of(q, x)?;
        self.transform_features_dual(q, &phi)
    }

    /// Scores of a paired set, concatenated per sample:
    /// `[e^(1) ... e^(Q)]` (`n x Q k`), e.g. as input to a classifier.
    pub fn transform_paired(&self, data: &MultiSource) -> Result<DMatrix<f64>> {
        if !data.is_paired() {
            return Err(Error::NotAvailable("per-sample concatenation needs paired sources"));
        }
        check_shape("number of sources", self.n_sources(), data.n_sources())?;
        let k = self.n_components();
        let mut out = DMatrix::zeros(data.sample_counts()[0], self.n_sources() * k);
        for q in 0..self.n_sources() {
            let e = self.transform_source(q, data.input(q))?;
            out.columns_mut(q * k, k).copy_from(&e);
        }
        Ok(out)
    }

    /// Training scores `e^(q) = Phi_q w_q` (`N_q x k`) of source `q`.
    ///
    /// Errors: `q` not a source of the model ([`Error::IndexOutOfRange`]).
    pub fn training_scores(&self, q: usize) -> Result<DMatrix<f64>> {
        if q >= self.n_sources() {
            return Err(Error::IndexOutOfRange { what: "sources of the model", index: q, len: self.n_sources() });
        }
        Ok(matmul(&self.features[q], &self.weights[q]))
    }

    /// Objective `J` of Eq. 3 at component `k` (0 at every solution, Lemma 3.3).
    pub fn objective(&self, k: usize) -> Result<ObjectiveTerms> {
        self.check_component(k)?;
        let weights: Vec<DVector<f64>> = self.weights.iter().map(|w| w.column(k).into_owned()).collect();
        let scores: Vec<DVector<f64>> = (0..self.n_sources()).map(|q| &self.features[q] * &weights[q]).collect();
        objective_terms(&weights, &scores, 1.0 / self.eigenvalues[k])
    }

    /// KKT residuals (Eq. 5) at component `k`.
    pub fn kkt(&self, k: usize) -> Result<KktResiduals> {
        self.check_component(k)?;
        let weights: Vec<DVector<f64>> = self.weights.iter().map(|w| w.column(k).into_owned()).collect();
        let alphas: Vec<DVector<f64>> = self.alphas.iter().map(|a| a.column(k).into_owned()).collect();
        kkt_residuals(&self.features, &weights, &alphas, 1.0 / self.eigenvalues[k])
    }

    fn check_component(&self, k: usize) -> Result<()> {
        if k >= self.n_components() {
            return Err(Error::InvalidParameter { name: "k", reason: format!("component {k} of {}", self.n_components()) });
        }
        Ok(())
    }
}

/// Parameters of KSVD (Eq. 2), eKSVD with two sources `X` (rows `x_i`) and
/// `Z` (rows `z_j`): by Theorem 2.1 its eigenvalues are the singular values of
/// `K_xz = Phi_x Phi_z^T` and `alpha`, `beta` the stacked singular vectors.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct KsvdParams {
    inner: EksvdParams,
}

impl KsvdParams {
    /// `n_components` singular triplets; defaults as [`EksvdParams::new`].
    pub fn new(n_components: usize) -> Self {
        KsvdParams { inner: EksvdParams::new(n_components) }
    }

    /// Feature maps `phi` of `X` and `psi` of `Z` (same output dimension).
    pub fn feature_maps(mut self, phi: FeatureMap, psi: FeatureMap) -> Self {
        self.inner = self.inner.feature_maps(vec![phi, psi]);
        self
    }

    /// The formulation and eigensolver.
    pub fn solver(mut self, solver: Solver) -> Self {
        self.inner = self.inner.solver(solver);
        self
    }

    /// Seed (see [`EksvdParams::seed`]).
    pub fn seed(mut self, seed: u64) -> Self {
        self.inner = self.inner.seed(seed);
        self
    }

    /// The working precision (see [`EksvdParams::precision`]).
    pub fn precision(mut self, precision: WorkingPrecision) -> Self {
        self.inner = self.inner.precision(precision);
        self
    }

    /// The working precision set ([`KsvdParams::precision`]).
    pub fn precision_setting(&self) -> WorkingPrecision {
        self.inner.precision_setting()
    }

    /// Checks the parameters (the data are checked by `fit`); `fit` calls it
    /// after counting the sources.
    ///
    /// Errors: those of [`EksvdParams::validate`].
    pub fn validate(&self) -> Result<()> {
        self.inner.validate()
    }

    /// Fits on two sources `X = data.source(0)` (`N x d_x`) and
    /// `Z = data.source(1)` (`M x d_z`); `N != M` is fine.
    ///
    /// Errors: [`Error::InvalidParameter`] for other than two sources,
    /// and those of [`EksvdParams::fit`].
    pub fn fit(&self, device: &Device, data: &MultiSource) -> Result<Ksvd> {
        if data.n_sources() != 2 {
            return Err(Error::InvalidParameter { name: "sources", reason: format!("KSVD couples exactly 2 sources, got {}", data.n_sources()) });
        }
        Ok(Ksvd { model: self.inner.fit(device, data)? })
    }

    /// Fits on `x` (`N x d_x`) and `z` (`M x d_z`); `N != M` is fine.
    pub fn fit_pair(&self, device: &Device, x: &(impl AsMatrix<Elem = f64> + ?Sized), z: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<Ksvd> {
        let x = x.as_matrix()?;
        let x = &*x;
        let z = z.as_matrix()?;
        let z = &*z;
        self.fit(device, &MultiSource::new(vec![x.clone(), z.clone()])?)
    }
}

/// A fitted KSVD model (a two-source [`Eksvd`]).
///
/// Its methods compute on the device it was fitted on ([`OnDevice`](crate::estimator::OnDevice): a loaded model is on the CPU).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Ksvd {
    model: Eksvd,
}

impl Ksvd {
    /// The singular values of `K_xz` retained (the eigenvalues `lambda`).
    pub fn singular_values(&self) -> &DVector<f64> {
        self.model.eigenvalues()
    }

    /// Scores `e = phi(x)^T w` of new rows of `X`.
    pub fn transform_x(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<DMatrix<f64>> {
        self.model.transform_source(0, x)
    }

    /// Scores `r = psi(z)^T v` of new rows of `Z`.
    pub fn transform_z(&self, z: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<DMatrix<f64>> {
        self.model.transform_source(1, z)
    }

    /// The underlying two-source eKSVD model.
    pub fn as_eksvd(&self) -> &Eksvd {
        &self.model
    }
}

/// KSVD of a given asymmetric kernel matrix `K_xz` (`N x M`): the dual
/// problem of Eq. 2, whose solutions are the `n_components` largest singular
/// triplets (`alphas[0]` left, `alphas[1]` right singular vectors, each
/// scaled by `1/sqrt(2)`).
pub fn ksvd_from_kernel(device: &Device, k_xz: &DMatrix<f64>, n_components: usize, solver: &Eigensolver, seed: u64) -> Result<DualSolution> {
    let coupling = CouplingMatrix::from_blocks(2, vec![(0, 1, k_xz.clone())])?;
    solve_dual(device, &coupling, n_components, solver, seed)
}

/// Moving an eKSVD model moves its fitted feature maps with it.
impl crate::estimator::OnDevice for Eksvd {
    fn device(&self) -> &Device {
        &self.device
    }
    fn to_device(&self, device: &Device) -> Self {
        let mut moved = self.clone();
        moved.device = device.clone();
        if let Some(maps) = &mut moved.maps {
            for map in maps.iter_mut() {
                *map = crate::estimator::OnDevice::to_device(map, device);
            }
        }
        moved
    }
}

/// A KSVD model is on the device of its two-source [`Eksvd`].
impl crate::estimator::OnDevice for Ksvd {
    fn device(&self) -> &Device {
        crate::estimator::OnDevice::device(&self.model)
    }
    fn to_device(&self, device: &Device) -> Self {
        Ksvd { model: crate::estimator::OnDevice::to_device(&self.model, device) }
    }
}
