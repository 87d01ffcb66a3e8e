//! The Neural eKSVD network (Section 3.4): per-source MLP feature maps
//! `phi_q : R^{d_q} -> R^{d_phi}`, projections `W_q` (`d_phi x k`), the
//! positive `gamma` and a linear classifier on the concatenated scores
//! `[E_1 ... E_Q]` (the task head of the supervised setting).

use burn::module::{Module, Param};
use burn::tensor::{activation, Device, Distribution, Tensor, TensorData};
use nalgebra::{DMatrix, DVector};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::Result;
use crate::eksvd::EksvdError;

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
            return Err(EksvdError::TooFewSources(self.input_dims.len()));
        }
        let bad = |name: &'static str, reason: String| Err(EksvdError::InvalidParameter { name, reason });
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

/// A dense layer `x A + b` (`A` is `d_in x d_out`).
#[derive(Module, Debug)]
pub struct Dense {
    weight: Param<Tensor<2>>,
    bias: Param<Tensor<1>>,
}

impl Dense {
    fn from_host(weight: &DMatrix<f64>, bias: &DVector<f64>, device: &Device) -> Self {
        Dense { weight: Param::from_tensor(matrix_to_tensor(weight, device)), bias: Param::from_tensor(vector_to_tensor(bias, device)) }
    }

    /// Glorot-uniform weights, zero bias.
    fn init(d_in: usize, d_out: usize, rng: &mut StdRng, device: &Device) -> Self {
        let limit = (6.0 / (d_in + d_out) as f64).sqrt();
        let w = DMatrix::from_fn(d_in, d_out, |_, _| rng.random_range(-limit..limit));
        Dense::from_host(&w, &DVector::zeros(d_out), device)
    }

    /// `x A + b` for rows `x`.
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        burn::tensor::module::linear(x, self.weight.val(), Some(self.bias.val()))
    }

    fn export(&self) -> (DMatrix<f64>, DVector<f64>) {
        (tensor_to_matrix(self.weight.val()), tensor_to_vector(self.bias.val()))
    }
}

/// The MLP feature map `phi_q` of one source.
#[derive(Module, Debug)]
pub struct FeatureNet {
    layers: Vec<Dense>,
}

/// The Neural eKSVD network: feature maps, projections `W_q`, `log gamma`
/// and the classifier (Section 3.4).
#[derive(Module, Debug)]
pub struct NeuralEksvdNet {
    feature_maps: Vec<FeatureNet>,
    projections: Vec<Param<Tensor<2>>>,
    log_gamma: Param<Tensor<1>>,
    classifier: Dense,
    #[module(skip)]
    activation: Activation,
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
            return Err(EksvdError::InvalidParameter { name: "gamma_init", reason: format!("must be finite and > 0, got {gamma_init}") });
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let feature_maps = (0..arch.n_sources())
            .map(|q| {
                let w = arch.widths(q);
                FeatureNet { layers: w.windows(2).map(|p| Dense::init(p[0], p[1], &mut rng, device)).collect() }
            })
            .collect();
        let limit = (3.0 / arch.d_phi as f64).sqrt();
        let projections = (0..arch.n_sources())
            .map(|_| {
                let w = DMatrix::from_fn(arch.d_phi, arch.components, |_, _| rng.random_range(-limit..limit));
                Param::from_tensor(matrix_to_tensor(&w, device))
            })
            .collect();
        let classifier = Dense::init(arch.n_sources() * arch.components, arch.n_classes, &mut rng, device);
        let log_gamma = Param::from_tensor(vector_to_tensor(&DVector::from_element(1, gamma_init.ln()), device));
        Ok(NeuralEksvdNet { feature_maps, projections, log_gamma, classifier, activation: arch.activation })
    }

    /// Rebuilds a network from f64 weights (e.g. a checkpoint); `gamma` is
    /// stored as `log gamma`.
    pub fn from_weights(weights: &NeuralWeights, device: &Device) -> Self {
        NeuralEksvdNet {
            feature_maps: weights.feature_maps.iter().map(|layers| FeatureNet { layers: layers.iter().map(|(a, b)| Dense::from_host(a, b, device)).collect() }).collect(),
            projections: weights.projections.iter().map(|w| Param::from_tensor(matrix_to_tensor(w, device))).collect(),
            log_gamma: Param::from_tensor(vector_to_tensor(&DVector::from_element(1, weights.gamma.ln()), device)),
            classifier: Dense::from_host(&weights.classifier.0, &weights.classifier.1, device),
            activation: weights.activation,
        }
    }

    /// Number of sources `Q`.
    pub fn n_sources(&self) -> usize {
        self.projections.len()
    }

    /// `phi_q(x)` for rows `x` (`n x d_q` -> `n x d_phi`).
    pub fn features(&self, q: usize, x: Tensor<2>) -> Tensor<2> {
        self.feature_maps[q].layers.iter().fold(x, |h, layer| self.activation.apply(layer.forward(h)))
    }

    /// `phi_q(x)` with inverted dropout on every hidden layer's output
    /// (each unit kept with probability `1 - p` and scaled by `1 / (1 - p)`,
    /// so the expected activation is that of [`NeuralEksvdNet::features`]);
    /// `p <= 0` (or NaN) is `features`, `p >= 1` drops every hidden unit.
    /// Training only: the masks are drawn on the tensors' device from its
    /// random state.
    pub fn features_with_dropout(&self, q: usize, x: Tensor<2>, p: f64) -> Tensor<2> {
        let layers = &self.feature_maps[q].layers;
        let last = layers.len().saturating_sub(1);
        layers.iter().enumerate().fold(x, |h, (i, layer)| {
            let h = self.activation.apply(layer.forward(h));
            if p >= 1.0 && i < last {
                h.zeros_like()
            } else if p > 0.0 && i < last {
                let mask = h.random_like(Distribution::Bernoulli(1.0 - p));
                (h * mask).mul_scalar(1.0 / (1.0 - p))
            } else {
                h
            }
        })
    }

    /// `W_q` (`d_phi x k`).
    pub fn projection(&self, q: usize) -> Tensor<2> {
        self.projections[q].val()
    }

    /// The projection scores `E_q = phi_q(X_q) W_q` (`n x k`).
    pub fn scores(&self, q: usize, x: Tensor<2>) -> Tensor<2> {
        self.features(q, x).matmul(self.projection(q))
    }

    /// `gamma = exp(log_gamma) > 0` (shape `[1]`).
    pub fn gamma(&self) -> Tensor<1> {
        self.log_gamma.val().exp()
    }

    /// Class logits from the scores of all sources.
    pub fn logits(&self, scores: &[Tensor<2>]) -> Tensor<2> {
        self.classifier.forward(Tensor::cat(scores.to_vec(), 1))
    }

    /// Class logits from concatenated scores `[E_1 ... E_Q]` (`n x Qk`).
    pub fn classifier_forward(&self, concatenated: Tensor<2>) -> Tensor<2> {
        self.classifier.forward(concatenated)
    }

    /// All weights in f64.
    pub fn export(&self) -> NeuralWeights {
        NeuralWeights {
            feature_maps: self.feature_maps.iter().map(|f| f.layers.iter().map(Dense::export).collect()).collect(),
            projections: self.projections.iter().map(|w| tensor_to_matrix(w.val())).collect(),
            gamma: tensor_to_vector(self.gamma())[0],
            classifier: self.classifier.export(),
            activation: self.activation,
        }
    }
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
    let data = t.into_data().convert::<f32>();
    let v: Vec<f32> = data.try_to_vec::<f32>().expect("f32 tensor data");
    DMatrix::from_row_iterator(r, c, v.into_iter().map(f64::from))
}

/// An f64 vector from a rank-1 tensor.
pub(crate) fn tensor_to_vector(t: Tensor<1>) -> DVector<f64> {
    let data = t.into_data().convert::<f32>();
    let v: Vec<f32> = data.try_to_vec::<f32>().expect("f32 tensor data");
    DVector::from_iterator(v.len(), v.into_iter().map(f64::from))
}
