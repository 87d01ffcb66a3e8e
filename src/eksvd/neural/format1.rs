//! Format 1 of a saved Neural eKSVD network ([`super::NeuralEksvd::load`]):
//! every layer stacked over the sources, the first one `[Q, max_q d_q, h_1]`
//! with each source's rows beyond its `d_q` zero. Read, then converted to
//! [`NeuralEksvdNet`] by dropping those rows.

use burn::module::{Module, Param};
use burn::tensor::{Device, Tensor};
use nalgebra::DMatrix;
#[cfg(test)]
use nalgebra::DVector;

use super::model::{tensor_to_f32, tensor_to_vector, Architecture, Dense, NeuralWeights, StackedDense};
#[cfg(test)]
use super::model::NeuralEksvdNet;
use super::Result;
use crate::error::Error;

/// A network in format 1: the layers stacked over the sources, the first
/// one's `A_q` zero-padded to `max_q d_q` rows.
#[derive(Module, Debug)]
pub(crate) struct PaddedNet {
    layers: Vec<StackedDense>,
    projections: Param<Tensor<3>>,
    log_gamma: Param<Tensor<1>>,
    classifier: Dense,
}

impl PaddedNet {
    /// A network of `arch`'s shapes (all zero), to load a record into.
    pub(crate) fn zeros(arch: &Architecture, device: &Device) -> Result<Self> {
        arch.validate()?;
        let q = arch.n_sources();
        let width = arch.input_dims.iter().copied().max().unwrap_or(0);
        let mut widths = vec![width];
        widths.extend(&arch.hidden);
        widths.push(arch.d_phi);
        let layers = widths
            .windows(2)
            .map(|p| StackedDense { weight: Param::from_tensor(Tensor::zeros([q, p[0], p[1]], device)), bias: Param::from_tensor(Tensor::zeros([q, 1, p[1]], device)) })
            .collect();
        let classifier_rows = q.checked_mul(arch.components).ok_or(Error::InvalidParameter { name: "components", reason: "Q k overflows usize".into() })?;
        Ok(PaddedNet {
            layers,
            projections: Param::from_tensor(Tensor::zeros([q, arch.d_phi, arch.components], device)),
            log_gamma: Param::from_tensor(Tensor::zeros([1], device)),
            classifier: Dense { weight: Param::from_tensor(Tensor::zeros([classifier_rows, arch.n_classes], device)), bias: Param::from_tensor(Tensor::zeros([arch.n_classes], device)) },
        })
    }

    /// The weights, each source's first layer cut to its `d_q` rows.
    ///
    /// Errors: [`Error::Record`] where the loaded shapes do not fit `arch`.
    pub(crate) fn into_weights(self, arch: &Architecture) -> Result<NeuralWeights> {
        let mut feature_maps = vec![Vec::new(); arch.n_sources()];
        for (l, layer) in self.layers.iter().enumerate() {
            let [q, rows, _] = layer.weight.dims();
            if q != arch.n_sources() || (l == 0 && arch.input_dims.iter().any(|&d| d > rows)) {
                return Err(Error::Record(format!("layer {l} of the saved network is {:?}, which does not fit the architecture", layer.weight.dims())));
            }
            for (s, (maps, (a, b))) in feature_maps.iter_mut().zip(layer.export()).enumerate() {
                let a = if l == 0 { a.rows(0, arch.input_dims[s]).into_owned() } else { a };
                maps.push((a, b));
            }
        }
        let [q, d_phi, k] = self.projections.dims();
        let w = tensor_to_f32(self.projections.val());
        Ok(NeuralWeights {
            feature_maps,
            projections: (0..q).map(|s| DMatrix::from_fn(d_phi, k, |i, j| f64::from(w[(s * d_phi + i) * k + j]))).collect(),
            gamma: tensor_to_vector(self.log_gamma.val().exp())[0],
            classifier: self.classifier.export(),
            activation: arch.activation,
        })
    }
}

#[cfg(test)]
impl PaddedNet {
    /// `weights` in format 1's layout: the first layer stacked with each
    /// `A_q` zero-padded to `max_q d_q` rows.
    pub(crate) fn from_weights(weights: &NeuralWeights, device: &Device) -> Self {
        let width = weights.feature_maps.iter().map(|layers| layers[0].0.nrows()).max().unwrap_or(0);
        let layers = (0..weights.feature_maps[0].len())
            .map(|l| {
                let padded: Vec<(DMatrix<f64>, DVector<f64>)> = weights
                    .feature_maps
                    .iter()
                    .map(|layers| {
                        let (a, b) = &layers[l];
                        let rows = if l == 0 { width } else { a.nrows() };
                        (DMatrix::from_fn(rows, a.ncols(), |i, j| if i < a.nrows() { a[(i, j)] } else { 0.0 }), b.clone())
                    })
                    .collect();
                StackedDense::from_host(&padded.iter().map(|(a, b)| (a, b)).collect::<Vec<_>>(), device)
            })
            .collect();
        let net = NeuralEksvdNet::from_weights(weights, device).expect("valid weights");
        PaddedNet { layers, projections: net.projections, log_gamma: net.log_gamma, classifier: net.classifier }
    }
}
