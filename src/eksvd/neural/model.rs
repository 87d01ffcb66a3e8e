//! The Neural eKSVD network (Section 3.4): per-source MLP feature maps
//! `phi_q : R^{d_q} -> R^{d_phi}`, projections `W_q` (`d_phi x k`), the
//! positive `gamma` and a linear classifier on the concatenated scores
//! `[E_1 ... E_Q]` (the task head of the supervised setting).
//!
//! Each source keeps its own width: its first layer `R^{d_q} -> R^{h_1}`
//! is its own product on its own `[B, d_q]` input (no padding), and from
//! the first layer's output on the `Q` sources run stacked (one
//! `[Q, B, h]` tensor, one batched product per layer): see
//! [`NeuralEksvdNet`].

use burn::module::{Module, Param};
use burn::tensor::{activation, Device, Distribution, Tensor, TensorData};
use nalgebra::{DMatrix, DVector};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::Result;
use crate::error::Error;

/// Activation of the feature-map MLPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activation {
    /// `max(x, 0)`.
    #[default]
    Relu,
    /// `tanh(x)`.
    Tanh,
    /// `x Phi(x)` (exact GELU, with the error function).
    Gelu,
}

impl Activation {
    /// Applies the activation element-wise to a burn tensor.
    pub fn apply<const D: usize>(self, x: Tensor<D>) -> Tensor<D> {
        match self {
            Activation::Relu => activation::relu(x),
            Activation::Tanh => activation::tanh(x),
            Activation::Gelu => activation::gelu(x),
        }
    }

    /// The activation of one f64 value (the CPU reference).
    pub fn apply_f64(self, x: f64) -> f64 {
        match self {
            Activation::Relu => x.max(0.0),
            Activation::Tanh => x.tanh(),
            Activation::Gelu => 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)),
        }
    }

    /// Name (`relu`, `tanh`, `gelu`).
    pub fn name(self) -> &'static str {
        match self {
            Activation::Relu => "relu",
            Activation::Tanh => "tanh",
            Activation::Gelu => "gelu",
        }
    }

    /// Parses a name given by [`Activation::name`].
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "relu" => Some(Activation::Relu),
            "tanh" => Some(Activation::Tanh),
            "gelu" => Some(Activation::Gelu),
            _ => None,
        }
    }
}

/// Shapes of a Neural eKSVD network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Architecture {
    /// Input dimension `d_q` of each source.
    pub input_dims: Vec<usize>,
    /// Hidden widths of every feature-map MLP (may be empty).
    pub hidden: Vec<usize>,
    /// Feature dimension `d_phi` (output width of every MLP).
    pub d_phi: usize,
    /// Number of components `k` (columns of each `W_q`).
    pub components: usize,
    /// Number of classes of the task head.
    pub n_classes: usize,
    /// Activation after every MLP layer (also the last: `phi_q` is a
    /// nonlinear feature map, `W_q` the linear projection of Eq. 3).
    pub activation: Activation,
}

impl Architecture {
    /// Number of sources `Q`.
    pub fn n_sources(&self) -> usize {
        self.input_dims.len()
    }

    /// Checks that every size is positive and `Q >= 2`, `n_classes >= 2`.
    pub fn validate(&self) -> Result<()> {
        if self.input_dims.len() < 2 {
            return Err(Error::TooFewSources(self.input_dims.len()));
        }
        let bad = |name: &'static str, reason: String| Err(Error::InvalidParameter { name, reason });
        if self.input_dims.contains(&0) || self.hidden.contains(&0) {
            return bad("hidden", "all layer widths and input dimensions must be positive".into());
        }
        if self.d_phi == 0 {
            return bad("d_phi", "must be positive".into());
        }
        if self.components == 0 {
            return bad("components", "must be positive".into());
        }
        if self.n_classes < 2 {
            return bad("n_classes", format!("need at least 2 classes, got {}", self.n_classes));
        }
        Ok(())
    }

    /// Layer widths of the MLP of source `q`: `d_q, hidden..., d_phi`.
    pub fn widths(&self, q: usize) -> Vec<usize> {
        let mut w = vec![self.input_dims[q]];
        w.extend(&self.hidden);
        w.push(self.d_phi);
        w
    }
}

/// A dense layer `x A + b` (`A` is `d_in x d_out`): the classifier.
#[derive(Module, Debug)]
pub struct Dense {
    pub(super) weight: Param<Tensor<2>>,
    pub(super) bias: Param<Tensor<1>>,
}

/// Glorot-uniform `d_in x d_out` weights drawn from `rng`.
fn glorot(d_in: usize, d_out: usize, rng: &mut StdRng) -> DMatrix<f64> {
    let limit = (6.0 / (d_in + d_out) as f64).sqrt();
    DMatrix::from_fn(d_in, d_out, |_, _| rng.random_range(-limit..limit))
}

impl Dense {
    fn from_host(weight: &DMatrix<f64>, bias: &DVector<f64>, device: &Device) -> Self {
        Dense { weight: Param::from_tensor(matrix_to_tensor(weight, device)), bias: Param::from_tensor(vector_to_tensor(bias, device)) }
    }

    /// `x A + b` for rows `x`.
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        burn::tensor::module::linear(x, self.weight.val(), Some(self.bias.val()))
    }

    pub(super) fn export(&self) -> (DMatrix<f64>, DVector<f64>) {
        (tensor_to_matrix(self.weight.val()), tensor_to_vector(self.bias.val()))
    }
}

/// One layer after the first of every source's MLP at once: `H_q A_q + b_q`
/// for all `q`, with the `A_q` stacked as `[Q, d_in, d_out]` and the `b_q`
/// as `[Q, 1, d_out]`, so that the `Q` feature maps cost one batched
/// product per layer (and one optimiser update per tensor) instead of `Q`.
/// Every source has the same `d_in` here (the widths after the first layer
/// are shared), so nothing is padded.
#[derive(Module, Debug)]
pub struct StackedDense {
    pub(super) weight: Param<Tensor<3>>,
    pub(super) bias: Param<Tensor<3>>,
}

impl StackedDense {
    /// Stacks the per-source `(A_q, b_q)` (all of the same shape).
    pub(super) fn from_host(layers: &[(&DMatrix<f64>, &DVector<f64>)], device: &Device) -> Self {
        let q = layers.len();
        let (d_in, d_out) = layers[0].0.shape();
        let mut weight = Vec::with_capacity(q * d_in * d_out);
        let mut bias = Vec::with_capacity(q * d_out);
        for (a, b) in layers {
            for row in a.row_iter() {
                weight.extend(row.iter().map(|&x| x as f32));
            }
            bias.extend(b.iter().map(|&x| x as f32));
        }
        StackedDense {
            weight: Param::from_tensor(Tensor::from_data(TensorData::new(weight, [q, d_in, d_out]), device)),
            bias: Param::from_tensor(Tensor::from_data(TensorData::new(bias, [q, 1, d_out]), device)),
        }
    }

    /// `[A_q; b_q]` of source `q` alone (shapes `[1, d_in, d_out]` and
    /// `[1, 1, d_out]`).
    fn of_source(&self, q: usize) -> (Tensor<3>, Tensor<3>) {
        (self.weight.val().narrow(0, q, 1), self.bias.val().narrow(0, q, 1))
    }

    /// The per-source `(A_q, b_q)` in f64.
    pub(super) fn export(&self) -> Vec<(DMatrix<f64>, DVector<f64>)> {
        let [q, d_in, d_out] = self.weight.dims();
        let w = tensor_to_f32(self.weight.val());
        let b = tensor_to_f32(self.bias.val());
        (0..q)
            .map(|s| {
                let a = DMatrix::from_fn(d_in, d_out, |i, j| f64::from(w[(s * d_in + i) * d_out + j]));
                (a, DVector::from_fn(d_out, |j, _| f64::from(b[s * d_out + j])))
            })
            .collect()
    }
}

/// The Neural eKSVD network: feature maps, projections `W_q`, `log gamma`
/// and the classifier (Section 3.4).
///
/// A batch of samples is one `[B, d_q]` tensor per source, each of its own
/// width. The first layer of each feature map is the source's own
/// [`Dense`] layer (`d_q x h_1`: no padding, no work on absent columns);
/// its outputs are stacked into one `[Q, B, h_1]` tensor and the layers
/// after it are [`StackedDense`] ones, the projections one `[Q, d_phi, k]`
/// tensor and the scores `E_q` one `[Q, B, k]` tensor, so that beyond the
/// first products a training step is a fixed number of kernels whatever
/// `Q`. The per-source methods ([`NeuralEksvdNet::features`],
/// [`NeuralEksvdNet::scores`]) run the same layers on one source's slice
/// of the weights.
#[derive(Module, Debug)]
pub struct NeuralEksvdNet {
    /// The first layer of each source's feature map (`d_q x h_1`).
    first: Vec<Dense>,
    /// The layers after the first, stacked over the sources.
    layers: Vec<StackedDense>,
    pub(super) projections: Param<Tensor<3>>,
    pub(super) log_gamma: Param<Tensor<1>>,
    pub(super) classifier: Dense,
    #[module(skip)]
    activation: Activation,
    #[module(skip)]
    input_dims: Vec<usize>,
}

/// All weights of a network in f64 (for checks against the CPU formulas).
#[derive(Debug, Clone)]
pub struct NeuralWeights {
    /// Per source, the MLP layers `(A, b)` (`A` is `d_in x d_out`).
    pub feature_maps: Vec<Vec<(DMatrix<f64>, DVector<f64>)>>,
    /// Per source, `W_q` (`d_phi x k`).
    pub projections: Vec<DMatrix<f64>>,
    /// `gamma` (already positive: `exp(log_gamma)`).
    pub gamma: f64,
    /// Classifier `(C, c)` on `[E_1 ... E_Q]`: logits `= [E_1 ... E_Q] C + c`.
    pub classifier: (DMatrix<f64>, DVector<f64>),
    /// The activation.
    pub activation: Activation,
}

impl NeuralWeights {
    /// `phi_q(x)` in f64 for rows `x` (the CPU reference of the MLP).
    pub fn features(&self, q: usize, x: &DMatrix<f64>) -> DMatrix<f64> {
        let mut h = x.clone();
        for (a, b) in &self.feature_maps[q] {
            h = &h * a;
            for mut row in h.row_iter_mut() {
                for (j, v) in row.iter_mut().enumerate() {
                    *v = self.activation.apply_f64(*v + b[j]);
                }
            }
        }
        h
    }

    /// Scores `E_q = phi_q(x) W_q` in f64.
    pub fn scores(&self, q: usize, x: &DMatrix<f64>) -> DMatrix<f64> {
        self.features(q, x) * &self.projections[q]
    }

    /// Checks that the shapes fit one architecture and `gamma > 0` (see
    /// [`NeuralEksvdNet::from_weights`]).
    fn check_shapes(&self) -> Result<()> {
        let bad = |reason: String| Err(Error::InvalidParameter { name: "weights", reason });
        let q = self.feature_maps.len();
        if q < 2 || self.projections.len() != q {
            return bad(format!("{q} feature maps and {} projections (need the same number, at least 2)", self.projections.len()));
        }
        let depth = self.feature_maps[0].len();
        for (s, layers) in self.feature_maps.iter().enumerate() {
            if layers.len() != depth || depth == 0 {
                return bad(format!("source {s} has {} layers, source 0 {depth} (need the same positive number)", layers.len()));
            }
            for (l, (a, b)) in layers.iter().enumerate() {
                let reference = &self.feature_maps[0][l].0;
                let fits_previous = l == 0 || a.nrows() == layers[l - 1].0.ncols();
                if a.nrows() == 0 || a.ncols() != reference.ncols() || b.len() != a.ncols() || !fits_previous {
                    return bad(format!("layer {l} of source {s} is {}x{} with a bias of {}", a.nrows(), a.ncols(), b.len()));
                }
            }
        }
        let d_phi = self.feature_maps[0][depth - 1].0.ncols();
        let k = self.projections[0].ncols();
        if k == 0 || self.projections.iter().any(|p| p.shape() != (d_phi, k)) {
            return bad(format!("every W_q must be {d_phi}x{k} (d_phi x k, k > 0)"));
        }
        let (c, c_bias) = &self.classifier;
        if c.nrows() != q * k || c.ncols() < 2 || c_bias.len() != c.ncols() {
            return bad(format!("the classifier is {}x{} with a bias of {}, needs {} rows and at least 2 columns", c.nrows(), c.ncols(), c_bias.len(), q * k));
        }
        if !(self.gamma.is_finite() && self.gamma > 0.0) {
            return bad(format!("gamma must be finite and > 0, got {}", self.gamma));
        }
        Ok(())
    }

    /// Every weight in one vector (feature maps, projections, `gamma`,
    /// classifier), in a fixed order for a given architecture.
    pub(crate) fn values(&self) -> Vec<f64> {
        let mut v = Vec::new();
        for (w, b) in self.feature_maps.iter().flatten() {
            v.extend_from_slice(w.as_slice());
            v.extend_from_slice(b.as_slice());
        }
        self.projections.iter().for_each(|w| v.extend_from_slice(w.as_slice()));
        v.push(self.gamma);
        v.extend_from_slice(self.classifier.0.as_slice());
        v.extend_from_slice(self.classifier.1.as_slice());
        v
    }

    /// `self <- decay self + (1 - decay) other`, weight by weight (`gamma`
    /// through `log gamma`, so it stays positive): one step of an
    /// exponential moving average of the weights. Both networks must have
    /// the same architecture.
    pub(crate) fn blend(&mut self, other: &NeuralWeights, decay: f64) {
        let mix = |a: &mut [f64], b: &[f64]| a.iter_mut().zip(b).for_each(|(x, y)| *x = decay * *x + (1.0 - decay) * y);
        for (layers, other_layers) in self.feature_maps.iter_mut().zip(&other.feature_maps) {
            for ((a, b), (oa, ob)) in layers.iter_mut().zip(other_layers) {
                mix(a.as_mut_slice(), oa.as_slice());
                mix(b.as_mut_slice(), ob.as_slice());
            }
        }
        for (w, ow) in self.projections.iter_mut().zip(&other.projections) {
            mix(w.as_mut_slice(), ow.as_slice());
        }
        self.gamma = (decay * self.gamma.ln() + (1.0 - decay) * other.gamma.ln()).exp();
        mix(self.classifier.0.as_mut_slice(), other.classifier.0.as_slice());
        mix(self.classifier.1.as_mut_slice(), other.classifier.1.as_slice());
    }
}

impl NeuralEksvdNet {
    /// A freshly initialised network: Glorot-uniform MLP and classifier
    /// weights and `W_q` entries uniform in `+-sqrt(3/d_phi)`, all drawn on
    /// the host from `seed` (so every backend starts from the same weights),
    /// and `gamma = gamma_init`.
    pub fn init(arch: &Architecture, gamma_init: f64, seed: u64, device: &Device) -> Result<Self> {
        arch.validate()?;
        if !(gamma_init.is_finite() && gamma_init > 0.0) {
            return Err(Error::InvalidParameter { name: "gamma_init", reason: format!("must be finite and > 0, got {gamma_init}") });
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let feature_maps = (0..arch.n_sources())
            .map(|q| {
                let w = arch.widths(q);
                w.windows(2).map(|p| (glorot(p[0], p[1], &mut rng), DVector::zeros(p[1]))).collect()
            })
            .collect();
        let limit = (3.0 / arch.d_phi as f64).sqrt();
        let projections = (0..arch.n_sources()).map(|_| DMatrix::from_fn(arch.d_phi, arch.components, |_, _| rng.random_range(-limit..limit))).collect();
        let classifier = (glorot(arch.n_sources() * arch.components, arch.n_classes, &mut rng), DVector::zeros(arch.n_classes));
        let weights = NeuralWeights { feature_maps, projections, gamma: gamma_init, classifier, activation: arch.activation };
        Self::from_weights(&weights, device)
    }

    /// Rebuilds a network from f64 weights (e.g. a checkpoint); `gamma` is
    /// stored as `log gamma`.
    ///
    /// Errors: [`Error::InvalidParameter`] (`weights`) unless the
    /// shapes fit one architecture (at least two sources, the same positive
    /// number of layers and the same widths after the first layer for every
    /// source, biases as wide as their layers, `W_q` of `d_phi` rows and the
    /// same `k` columns, a classifier of `Q k` rows) and `gamma` is finite
    /// and positive.
    pub fn from_weights(weights: &NeuralWeights, device: &Device) -> Result<Self> {
        weights.check_shapes()?;
        let input_dims: Vec<usize> = weights.feature_maps.iter().map(|layers| layers[0].0.nrows()).collect();
        let depth = weights.feature_maps[0].len();
        let first = weights.feature_maps.iter().map(|layers| Dense::from_host(&layers[0].0, &layers[0].1, device)).collect();
        let layers = (1..depth)
            .map(|l| {
                let per_source: Vec<(&DMatrix<f64>, &DVector<f64>)> = weights.feature_maps.iter().map(|layers| (&layers[l].0, &layers[l].1)).collect();
                StackedDense::from_host(&per_source, device)
            })
            .collect();
        let (d_phi, k) = weights.projections[0].shape();
        let mut w = Vec::with_capacity(weights.projections.len() * d_phi * k);
        for p in &weights.projections {
            for row in p.row_iter() {
                w.extend(row.iter().map(|&x| x as f32));
            }
        }
        Ok(NeuralEksvdNet {
            first,
            layers,
            projections: Param::from_tensor(Tensor::from_data(TensorData::new(w, [weights.projections.len(), d_phi, k]), device)),
            log_gamma: Param::from_tensor(vector_to_tensor(&DVector::from_element(1, weights.gamma.ln()), device)),
            classifier: Dense::from_host(&weights.classifier.0, &weights.classifier.1, device),
            activation: weights.activation,
            input_dims,
        })
    }

    /// Number of sources `Q`.
    pub fn n_sources(&self) -> usize {
        self.input_dims.len()
    }

    /// Input dimension `d_q` of every source.
    pub fn input_dims(&self) -> &[usize] {
        &self.input_dims
    }

    /// The activation after a layer (the `i`-th of `layers` layers), then
    /// inverted dropout of probability `p` on a hidden layer's output (each
    /// unit kept with probability `1 - p` and scaled by `1 / (1 - p)`; the
    /// feature map's output layer has none).
    fn activate<const D: usize>(&self, pre: Tensor<D>, i: usize, layers: usize, p: f64) -> Tensor<D> {
        let h = self.activation.apply(pre);
        let hidden = i + 1 < layers;
        if p >= 1.0 && hidden {
            h.zeros_like()
        } else if p > 0.0 && hidden {
            let mask = h.random_like(Distribution::Bernoulli(1.0 - p));
            (h * mask).mul_scalar(1.0 / (1.0 - p))
        } else {
            h
        }
    }

    /// The layers after the first on stacked inputs `[S, B, h_1]` (the
    /// first layer's activated outputs) with one `(A, b)` pair per layer
    /// (`[S, d_in, d_out]`, `[S, 1, d_out]`), dropout `p` as in
    /// [`NeuralEksvdNet::activate`].
    fn deeper(&self, h: Tensor<3>, layers: Vec<(Tensor<3>, Tensor<3>)>, p: f64) -> Tensor<3> {
        let depth = layers.len() + 1;
        layers.into_iter().enumerate().fold(h, |h, (i, (a, b))| self.activate(h.matmul(a) + b, i + 1, depth, p))
    }

    /// `phi_q(X_q)` of every source at once: per-source inputs `[B, d_q]`
    /// (in source order, the same `B`) to the stacked `[Q, B, d_phi]`, with
    /// inverted dropout of probability `p` on every hidden layer's output
    /// (`p <= 0` or NaN: none; `p >= 1` drops every hidden unit). The
    /// dropout masks are drawn on the tensors' device from its random
    /// state, one mask for the stacked `[Q, B, h]` output of each hidden
    /// layer.
    ///
    /// Panics unless there is one input per source with `d_q` columns and
    /// all have the same rows (the fit and the model's methods check them
    /// first).
    pub fn stacked_features(&self, xs: Vec<Tensor<2>>, p: f64) -> Tensor<3> {
        assert_eq!(xs.len(), self.first.len(), "one input per source");
        let pre: Vec<Tensor<2>> = xs.into_iter().zip(&self.first).map(|(x, layer)| layer.forward(x)).collect();
        self.features_after_first(Tensor::stack::<3>(pre, 0), p)
    }

    /// [`NeuralEksvdNet::stacked_features`] from the first layer's outputs
    /// before its activation, `X_q A_q + b_q` stacked over the sources
    /// (`[Q, B, h_1]`, computed elsewhere: the sparse first layer of a CPU
    /// fit).
    pub(crate) fn features_after_first(&self, pre: Tensor<3>, p: f64) -> Tensor<3> {
        let h = self.activate(pre, 0, self.layers.len() + 1, p);
        self.deeper(h, self.layers.iter().map(|l| (l.weight.val(), l.bias.val())).collect(), p)
    }

    /// The first layer `(A_q, b_q)` of source `q` as row-major f32
    /// (`d_q x h_1` and `h_1`).
    pub(crate) fn first_layer_f32(&self, q: usize) -> (Vec<f32>, Vec<f32>) {
        (tensor_to_f32(self.first[q].weight.val()), tensor_to_f32(self.first[q].bias.val()))
    }

    /// Writes the first layer of source `q` (row-major f32 `A_q`,
    /// `d_q x h_1`, and `b_q`), keeping the parameters' identities.
    pub(crate) fn set_first_layer_f32(&mut self, q: usize, weight: &[f32], bias: &[f32]) {
        let layer = &mut self.first[q];
        let dims = layer.weight.dims();
        let device = layer.weight.device();
        let w = Tensor::<2>::from_data(TensorData::new(weight.to_vec(), dims), &device);
        let b = Tensor::<1>::from_data(TensorData::new(bias.to_vec(), [bias.len()]), &device);
        layer.weight = replaced(&layer.weight, w);
        layer.bias = replaced(&layer.bias, b);
    }

    /// The scores `E_q = phi_q(X_q) W_q` of every source at once
    /// (per-source `[B, d_q]` -> `[Q, B, k]`), with dropout `p` as in
    /// [`NeuralEksvdNet::stacked_features`].
    pub fn stacked_scores(&self, xs: Vec<Tensor<2>>, p: f64) -> Tensor<3> {
        self.stacked_features(xs, p).matmul(self.projections.val())
    }

    /// [`NeuralEksvdNet::stacked_scores`] from the first layer's outputs
    /// before its activation (see [`NeuralEksvdNet::features_after_first`]).
    pub(crate) fn scores_after_first(&self, pre: Tensor<3>, p: f64) -> Tensor<3> {
        self.features_after_first(pre, p).matmul(self.projections.val())
    }

    /// `phi_q(x)` for rows `x` of source `q` (`n x d_q` -> `n x d_phi`).
    pub fn features(&self, q: usize, x: Tensor<2>) -> Tensor<2> {
        let n = x.dims()[0];
        let h = self.activate(self.first[q].forward(x), 0, self.layers.len() + 1, 0.0);
        let h = self.deeper(h.unsqueeze::<3>(), self.layers.iter().map(|l| l.of_source(q)).collect(), 0.0);
        let d_phi = h.dims()[2];
        h.reshape([n, d_phi])
    }

    /// `W_q` (`d_phi x k`).
    pub fn projection(&self, q: usize) -> Tensor<2> {
        let [_, d_phi, k] = self.projections.dims();
        self.projections.val().narrow(0, q, 1).reshape([d_phi, k])
    }

    /// All `W_q` stacked, `[Q, d_phi, k]`.
    pub fn projections(&self) -> Tensor<3> {
        self.projections.val()
    }

    /// The projection scores `E_q = phi_q(X_q) W_q` of source `q` (`n x k`).
    pub fn scores(&self, q: usize, x: Tensor<2>) -> Tensor<2> {
        self.features(q, x).matmul(self.projection(q))
    }

    /// `gamma = exp(log_gamma) > 0` (shape `[1]`).
    pub fn gamma(&self) -> Tensor<1> {
        self.log_gamma.val().exp()
    }

    /// Class logits `[E_1 ... E_Q] C + c` from the stacked scores
    /// `[Q, B, k]`, computed as `sum_q E_q C_q + c` with `C_q` the rows
    /// `q k .. (q + 1) k` of `C` (no concatenation of the scores).
    pub fn logits(&self, scores: Tensor<3>) -> Tensor<2> {
        let [q, b, k] = scores.dims();
        let c = self.classifier.weight.dims()[1];
        let per_source = scores.matmul(self.classifier.weight.val().reshape([q, k, c]));
        per_source.sum_dim(0).reshape([b, c]) + self.classifier.bias.val().unsqueeze::<2>()
    }

    /// Class logits from concatenated scores `[E_1 ... E_Q]` (`n x Qk`).
    pub fn classifier_forward(&self, concatenated: Tensor<2>) -> Tensor<2> {
        self.classifier.forward(concatenated)
    }

    /// All weights in f64.
    pub fn export(&self) -> NeuralWeights {
        let mut feature_maps: Vec<Vec<(DMatrix<f64>, DVector<f64>)>> = self.first.iter().map(|layer| vec![layer.export()]).collect();
        for layer in &self.layers {
            for (maps, ab) in feature_maps.iter_mut().zip(layer.export()) {
                maps.push(ab);
            }
        }
        let [q, d_phi, k] = self.projections.dims();
        let w = tensor_to_f32(self.projections.val());
        NeuralWeights {
            feature_maps,
            projections: (0..q).map(|s| DMatrix::from_fn(d_phi, k, |i, j| f64::from(w[(s * d_phi + i) * k + j]))).collect(),
            gamma: tensor_to_vector(self.gamma())[0],
            classifier: self.classifier.export(),
            activation: self.activation,
        }
    }
}

/// `param` holding `value` (same identity; tracked for gradients where
/// `param` was).
fn replaced<const D: usize>(param: &Param<Tensor<D>>, value: Tensor<D>) -> Param<Tensor<D>> {
    param.clone().map(|old| if old.is_require_grad() { value.require_grad() } else { value })
}

/// The entries of a tensor in row-major order, as f32.
pub(crate) fn tensor_to_f32<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().expect("f32 tensor data")
}

/// A row-major f32 tensor from an f64 matrix (values must fit in f32).
pub(crate) fn matrix_to_tensor(m: &DMatrix<f64>, device: &Device) -> Tensor<2> {
    let mut v = Vec::with_capacity(m.len());
    for row in m.row_iter() {
        v.extend(row.iter().map(|&x| x as f32));
    }
    Tensor::from_data(TensorData::new(v, [m.nrows(), m.ncols()]), device)
}

fn vector_to_tensor(v: &DVector<f64>, device: &Device) -> Tensor<1> {
    Tensor::from_data(TensorData::new(v.iter().map(|&x| x as f32).collect::<Vec<f32>>(), [v.len()]), device)
}

/// An f64 matrix from a rank-2 tensor.
pub(crate) fn tensor_to_matrix(t: Tensor<2>) -> DMatrix<f64> {
    let [r, c] = t.dims();
    DMatrix::from_row_iterator(r, c, tensor_to_f32(t).into_iter().map(f64::from))
}

/// An f64 vector from a rank-1 tensor.
pub(crate) fn tensor_to_vector(t: Tensor<1>) -> DVector<f64> {
    let v = tensor_to_f32(t);
    DVector::from_iterator(v.len(), v.into_iter().map(f64::from))
}
