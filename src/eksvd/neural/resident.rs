//! Data sets on a burn device and the evaluation passes over them: the
//! sources checked and converted to f32 on the host, each at its own width
//! ([`HostData`]), uploaded once ([`ResidentData`]), and evaluated in
//! chunks with every output read back in one transfer ([`queue_pass`],
//! [`read_passes`]).

use burn::tensor::{Device, Int, Tensor, TensorData, Transaction};
use nalgebra::DMatrix;

use super::loss::{cross_entropy, objective_from_squared_scores, LossValues};
use super::model::NeuralEksvdNet;
use super::Result;
use crate::data::{check_source_matrix, MultiSource};
use crate::error::Error;

/// Row-major f32 copies of the sources, checked to be finite in f32.
pub(super) fn to_f32_rows(q: usize, x: &DMatrix<f64>) -> Result<Vec<f32>> {
    check_source_matrix("data", q, x)?;
    let mut v = Vec::with_capacity(x.len());
    for row in x.row_iter() {
        for &value in row.iter() {
            let f = value as f32;
            if !f.is_finite() {
                return Err(Error::SourceNotRepresentable { what: "data", source_index: q, value });
            }
            v.push(f);
        }
    }
    Ok(v)
}

/// A data set on the host, checked and in f32, before its upload: each
/// source row-major at its own width `d_q` (`n x d_q`, no padding), and
/// the labels if any.
pub(super) struct HostData {
    pub(super) n: usize,
    pub(super) dims: Vec<usize>,
    pub(super) sources: Vec<Vec<f32>>,
    pub(super) labels: Option<Vec<usize>>,
    pub(super) n_classes: usize,
}

impl HostData {
    pub(super) fn new(data: &MultiSource, labels: Option<&[usize]>, n_classes: usize) -> Result<Self> {
        let dense = data.try_sources()?;
        let n = dense[0].nrows();
        let dims: Vec<usize> = dense.iter().map(|x| x.ncols()).collect();
        let sources = dense.iter().enumerate().map(|(q, x)| to_f32_rows(q, x)).collect::<Result<Vec<_>>>()?;
        Ok(HostData { n, dims, sources, labels: labels.map(<[usize]>::to_vec), n_classes })
    }

    /// The sources and the one-hot labels as tensors on `device` (one
    /// upload each).
    pub(super) fn upload(&self, device: &Device) -> ResidentData {
        let xs = self.sources.iter().zip(&self.dims).map(|(rows, &d)| Tensor::from_data(TensorData::new(rows.clone(), [self.n, d]), device)).collect();
        let all: Vec<usize> = (0..self.n).collect();
        ResidentData { n: self.n, xs, one_hot: self.one_hot_rows(&all, device) }
    }

    /// The one-hot labels of the samples `rows` (`[rows.len(), C]` on
    /// `device`), if labelled.
    pub(super) fn one_hot_rows(&self, rows: &[usize], device: &Device) -> Option<Tensor<2>> {
        self.labels.as_ref().map(|labels| {
            let mut one_hot = vec![0f32; rows.len() * self.n_classes];
            for (i, &r) in rows.iter().enumerate() {
                one_hot[i * self.n_classes + labels[r]] = 1.0;
            }
            Tensor::from_data(TensorData::new(one_hot, [rows.len(), self.n_classes]), device)
        })
    }
}

/// A data set resident on a burn device, one `[n, d_q]` tensor per source:
/// minibatches are gathered (`select`) or sliced (`narrow`) there, with no
/// host transfer.
pub(super) struct ResidentData {
    pub(super) n: usize,
    pub(super) xs: Vec<Tensor<2>>,
    pub(super) one_hot: Option<Tensor<2>>,
}

impl ResidentData {
    /// The samples `idx` of every source and their one-hot labels.
    pub(super) fn gather(&self, idx: Tensor<1, Int>) -> (Vec<Tensor<2>>, Option<Tensor<2>>) {
        (self.xs.iter().map(|x| x.clone().select(0, idx.clone())).collect(), self.one_hot.clone().map(|t| t.select(0, idx)))
    }

    /// Samples `start .. start + len` of every source and their one-hot labels.
    pub(super) fn rows(&self, start: usize, len: usize) -> (Vec<Tensor<2>>, Option<Tensor<2>>) {
        (self.xs.iter().map(|x| x.clone().narrow(0, start, len)).collect(), self.one_hot.clone().map(|t| t.narrow(0, start, len)))
    }
}

/// One pass of a model over resident data, read back in one transfer.
pub(super) struct Evaluation {
    /// The loss terms (labelled data only).
    pub(super) loss: Option<LossValues>,
    /// The predicted classes (when asked for).
    pub(super) predictions: Vec<usize>,
    /// `gamma`.
    pub(super) gamma: f64,
}

/// Samples per forward pass when evaluating on a whole data set.
pub(super) const EVAL_CHUNK: usize = 4096;

/// The outputs of one pass of a network over resident data, queued on the
/// device and not read yet ([`read_passes`]).
pub(super) struct QueuedPass {
    /// `J_k / N` (`[k]`) and the sum of the per-sample cross-entropies
    /// (`[1]`), on labelled data.
    pub(super) loss: Option<(Tensor<1>, Tensor<1>)>,
    /// The predicted classes of each chunk (when asked for).
    pub(super) classes: Vec<Tensor<2, Int>>,
    /// Samples.
    pub(super) n: usize,
}

/// One pass of `net` over `data` in chunks of [`EVAL_CHUNK`] samples: the
/// `J_k` need only the per-component sums of squared scores
/// ([`objective_from_squared_scores`]), the cross-entropy the sum of the
/// per-sample terms. Nothing is read: the outputs stay on the device.
pub(super) fn queue_pass(net: &NeuralEksvdNet, data: &ResidentData, predictions: bool) -> QueuedPass {
    let n = data.n;
    let mut sums: Option<(Tensor<2>, Tensor<1>)> = None;
    let mut classes = Vec::new();
    for start in (0..n).step_by(EVAL_CHUNK) {
        let len = EVAL_CHUNK.min(n - start);
        let (x, one_hot) = data.rows(start, len);
        let scores = net.stacked_scores(x, 0.0);
        let logits = net.logits(scores.clone());
        if let Some(one_hot) = one_hot {
            let [q, _, k] = scores.dims();
            let squared = scores.reshape([q * len, k]).square().sum_dim(0);
            let ce = cross_entropy(logits.clone(), one_hot).mul_scalar(len as f64);
            sums = Some(match sums.take() {
                None => (squared, ce),
                Some((s, c)) => (s + squared, c + ce),
            });
        }
        if predictions {
            classes.push(logits.argmax(1));
        }
    }
    let loss = sums.map(|(squared, ce)| (objective_from_squared_scores(net.projections(), squared, n, net.gamma(), n), ce));
    QueuedPass { loss, classes, n }
}

/// `gamma` and one [`QueuedPass`] per data set evaluated.
pub(super) type EvaluationOutputs = (Tensor<1>, Vec<QueuedPass>);

/// The per-epoch evaluation of `net`, queued: `gamma` and a pass over each
/// of `targets` (the training set, then the validation set with
/// predictions).
pub(super) fn queue_evaluation(net: &NeuralEksvdNet, targets: &[&ResidentData]) -> EvaluationOutputs {
    (net.gamma(), targets.iter().enumerate().map(|(i, d)| queue_pass(net, d, i > 0)).collect())
}


/// Reads `gamma` (`[1]`) and the queued passes back in one transfer.
pub(super) fn read_passes(gamma: &Tensor<1>, passes: &[QueuedPass], eta: f64) -> Result<Vec<Evaluation>> {
    let mut read = Transaction::default().register(gamma.clone());
    for pass in passes {
        if let Some((objective, ce)) = &pass.loss {
            read = read.register(objective.clone()).register(ce.clone());
        }
        for c in &pass.classes {
            read = read.register(c.clone());
        }
    }
    let mut data = read.try_execute().map_err(|e| Error::Execution(format!("{e:?}")))?.into_iter();
    let read_error = |e: burn::tensor::DataError| Error::Execution(format!("{e:?}"));
    let mut next = || data.next().ok_or_else(|| Error::Execution("the read returned fewer tensors than registered".into()));
    let floats = |d: TensorData| -> Result<Vec<f64>> { Ok(d.convert::<f32>().try_to_vec::<f32>().map_err(read_error)?.into_iter().map(f64::from).collect()) };
    let gamma = floats(next()?)?.first().copied().unwrap_or(f64::NAN);
    let mut out = Vec::with_capacity(passes.len());
    for pass in passes {
        let loss = match pass.loss {
            Some(_) => {
                let objective = floats(next()?)?;
                let cross_entropy = floats(next()?)?.first().copied().unwrap_or(f64::NAN) / pass.n as f64;
                let objective_squared = objective.iter().map(|j| j * j).sum::<f64>();
                Some(LossValues { objective_squared, cross_entropy, total: objective_squared + eta * cross_entropy, objective })
            }
            None => None,
        };
        let mut predictions = Vec::with_capacity(if pass.classes.is_empty() { 0 } else { pass.n });
        for _ in &pass.classes {
            let v = next()?.convert::<i64>().try_to_vec::<i64>().map_err(read_error)?;
            predictions.extend(v.into_iter().map(|c| usize::try_from(c).unwrap_or(usize::MAX)));
        }
        out.push(Evaluation { loss, predictions, gamma });
    }
    Ok(out)
}

