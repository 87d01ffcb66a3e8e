//! A fitted Neural eKSVD model, [`NeuralEksvd`]: the trained network, the
//! device it computes on ([`OnDevice`]), its scores ([`Transform`]), classes
//! ([`Predict`]), logits and loss, and its saved form (the weights as a
//! burnpack file and the architecture as text).

use std::path::Path;

use burn::module::Module;
use burn::store::ModuleRecord;
use burn::tensor::Bytes;
use burn::tensor::{Device as BurnDevice, Tensor, TensorData};
use nalgebra::DMatrix;

use super::history::TrainingHistory;
use super::loss::LossValues;
use super::model::{tensor_to_f32, tensor_to_matrix, tensor_to_vector, Activation, Architecture, NeuralEksvdNet, NeuralWeights};
use super::format1::PaddedNet;
use super::placement::burn_device;
use super::resident::{queue_pass, read_passes, to_f32_rows, Evaluation, HostData, ResidentData, EVAL_CHUNK};
use super::{NeuralBackend, Result};
use crate::input::AsMatrix;
use crate::data::{check_shape, Labelled, MultiSource};
use crate::error::Error;
use crate::estimator::{OnDevice, Predict, Transform};
use crate::Device;

/// A Neural eKSVD model, trained by [`Fit::fit`](crate::estimator::Fit::fit)
/// or [`NeuralEksvdParams::fit_with_validation`](super::NeuralEksvdParams::fit_with_validation),
/// fresh from [`NeuralEksvdParams::init`](super::NeuralEksvdParams::init),
/// or loaded by [`NeuralEksvd::load`]. It computes on its gramian
/// [`Device`] ([`OnDevice::device`]): the CPU path on burn's Flex backend, a
/// GPU on burn's Wgpu backend on that GPU's own wgpu device and queue.
#[derive(Debug, Clone)]
pub struct NeuralEksvd {
    pub(super) net: NeuralEksvdNet,
    burn: BurnDevice,
    device: Device,
    /// Why the network could not be moved to `device` by
    /// [`OnDevice::to_device`] (it then stays where it was, and the
    /// computing methods return [`Error::BackendUnavailable`]).
    unplaced: Option<String>,
    arch: Architecture,
    pub(super) history: TrainingHistory,
    pub(super) best_epoch: usize,
}

impl NeuralEksvd {
    /// An untrained model: `net` on `burn`, the burn device of `device`.
    pub(super) fn untrained(net: NeuralEksvdNet, burn: BurnDevice, device: Device, arch: Architecture) -> Self {
        NeuralEksvd { net, burn, device, unplaced: None, arch, history: TrainingHistory::default(), best_epoch: 0 }
    }

    /// The network's shapes.
    pub fn architecture(&self) -> &Architecture {
        &self.arch
    }
    /// The burn backend of its device: [`NeuralBackend::Wgpu`] on a GPU,
    /// [`NeuralBackend::Cpu`] (burn's Flex) on the CPU path.
    pub fn backend(&self) -> NeuralBackend {
        NeuralBackend::of(&self.device)
    }
    /// Per-epoch curves of the training run (empty for an untrained or
    /// loaded model).
    pub fn history(&self) -> &TrainingHistory {
        &self.history
    }
    /// The epoch whose weights were kept (0 when untrained or loaded).
    pub fn best_epoch(&self) -> usize {
        self.best_epoch
    }
    /// The burn device (without autodiff) the network lives on.
    pub fn burn_device(&self) -> &BurnDevice {
        &self.burn
    }
    /// The burn network.
    pub fn net(&self) -> &NeuralEksvdNet {
        &self.net
    }
    /// `gamma > 0`.
    pub fn gamma(&self) -> f64 {
        tensor_to_vector(self.net.gamma())[0]
    }
    /// All weights in f64.
    pub fn weights(&self) -> NeuralWeights {
        self.net.export()
    }

    /// The same model (the same weights) on `device`: the network rebuilt
    /// on that device's burn backend from its weights, read back to the host
    /// (burn's own `Module::to_device` does not move a network between the
    /// Flex and Wgpu backends of one dispatch device). The weights are
    /// f32 values and come back exactly; `gamma` is stored as
    /// `log gamma`, to f32 rounding.
    ///
    /// Errors: [`Error::BackendUnavailable`] when burn cannot run on
    /// `device` (see [`super::burn_device`]); [`Error::InvalidParameter`]
    /// (`weights`) if the read-back weights do not rebuild a network.
    pub fn try_to_device(&self, device: &Device) -> Result<Self> {
        let burn = burn_device(device)?;
        let net = NeuralEksvdNet::from_weights(&self.net.export(), &burn)?;
        Ok(NeuralEksvd { net, burn, device: device.clone(), unplaced: None, arch: self.arch.clone(), history: self.history.clone(), best_epoch: self.best_epoch })
    }

    /// Fails with the reason a move by [`OnDevice::to_device`] did not take place.
    fn check_placed(&self) -> Result<()> {
        match &self.unplaced {
            Some(reason) => Err(Error::BackendUnavailable { backend: "wgpu", reason: reason.clone() }),
            None => Ok(()),
        }
    }

    fn check_input(&self, q: usize, x: &DMatrix<f64>) -> Result<Vec<f32>> {
        self.check_placed()?;
        if q >= self.arch.n_sources() {
            return Err(Error::InvalidParameter { name: "source", reason: format!("source {q} of a model with {} sources", self.arch.n_sources()) });
        }
        check_shape(format!("columns of source {q}"), self.arch.input_dims[q], x.ncols())?;
        to_f32_rows(q, x)
    }

    /// Projection scores `E_q = phi_q(X_q) W_q` of new samples of source `q`
    /// (`n x k`).
    pub fn transform_source(&self, q: usize, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<DMatrix<f64>> {
        let x = x.as_matrix()?;
        let x = &*x;
        let rows = self.check_input(q, x)?;
        let d = x.ncols();
        let mut out = DMatrix::zeros(x.nrows(), self.arch.components);
        for start in (0..x.nrows()).step_by(EVAL_CHUNK) {
            let len = EVAL_CHUNK.min(x.nrows() - start);
            let t = Tensor::from_data(TensorData::new(rows[start * d..(start + len) * d].to_vec(), [len, d]), &self.burn);
            out.rows_mut(start, len).copy_from(&tensor_to_matrix(self.net.scores(q, t)));
        }
        Ok(out)
    }

    /// Scores of all sources side by side, `[E_1 ... E_Q]` (`N x Qk`).
    fn scores(&self, data: &MultiSource) -> Result<DMatrix<f64>> {
        let resident = self.upload_unlabelled(data)?;
        let (q, k) = (self.arch.n_sources(), self.arch.components);
        let mut out = DMatrix::zeros(resident.n, q * k);
        for start in (0..resident.n).step_by(EVAL_CHUNK) {
            let len = EVAL_CHUNK.min(resident.n - start);
            let scores = tensor_to_f32(self.net.stacked_scores(resident.rows(start, len).0, 0.0));
            for s in 0..q {
                for i in 0..len {
                    for c in 0..k {
                        out[(start + i, s * k + c)] = f64::from(scores[(s * len + i) * k + c]);
                    }
                }
            }
        }
        Ok(out)
    }

    fn check_paired(&self, data: &MultiSource) -> Result<()> {
        self.check_placed()?;
        if !data.is_paired() {
            return Err(Error::Labels("prediction needs paired sources".into()));
        }
        check_shape("number of sources", self.arch.n_sources(), data.n_sources())?;
        for q in 0..data.n_sources() {
            check_shape(format!("columns of source {q}"), self.arch.input_dims[q], data.input(q).shape().1)?;
        }
        Ok(())
    }

    /// Paired samples, checked and uploaded to the model's device.
    fn upload_unlabelled(&self, data: &MultiSource) -> Result<ResidentData> {
        self.check_paired(data)?;
        Ok(HostData::new(data, None, self.arch.n_classes)?.upload(&self.burn))
    }

    /// Class logits of paired samples (`N x C`).
    pub fn logits(&self, data: &MultiSource) -> Result<DMatrix<f64>> {
        let resident = self.upload_unlabelled(data)?;
        let mut out = DMatrix::zeros(resident.n, self.arch.n_classes);
        for start in (0..resident.n).step_by(EVAL_CHUNK) {
            let len = EVAL_CHUNK.min(resident.n - start);
            out.rows_mut(start, len).copy_from(&tensor_to_matrix(self.net.logits(self.net.stacked_scores(resident.rows(start, len).0, 0.0))));
        }
        Ok(out)
    }

    /// `J_k / N` (Eq. 3 on all `N` samples given, per sample),
    /// `sum_k (J_k / N)^2`, the mean cross-entropy and
    /// `sum_k (J_k / N)^2 + eta L_CE` on labelled samples.
    ///
    /// Errors: data that do not fit the model (sources, columns, a label
    /// beyond its classes), values that overflow f32.
    pub fn loss(&self, data: &Labelled, eta: f64) -> Result<LossValues> {
        if data.labels().iter().any(|&l| l >= self.arch.n_classes) {
            return Err(Error::Labels(format!("label beyond the model's {} classes", self.arch.n_classes)));
        }
        self.check_paired(data.sources())?;
        let host = HostData::new(data.sources(), Some(data.labels()), self.arch.n_classes)?;
        self.evaluate(&host.upload(&self.burn), eta, false)?.loss.ok_or_else(|| Error::Execution("no loss read for labelled data".into()))
    }

    /// The loss (labelled data), the predicted classes (`predictions`) and
    /// `gamma` on resident data ([`queue_pass`], one read).
    pub(super) fn evaluate(&self, data: &ResidentData, eta: f64, predictions: bool) -> Result<Evaluation> {
        let mut read = read_passes(&self.net.gamma(), &[queue_pass(&self.net, data, predictions)], eta)?;
        read.pop().ok_or_else(|| Error::Execution("no pass read".into()))
    }

    /// Saves the weights (burnpack `model.bpk`) and the architecture
    /// (`architecture.txt`, with `format=2`: the network of
    /// [`NeuralEksvdNet`], each source's first layer its own `d_q x h_1`
    /// tensor) into directory `dir` (created if missing).
    pub fn save(&self, dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        let io = |e: std::io::Error| Error::Record(format!("{}: {e}", dir.display()));
        std::fs::create_dir_all(dir).map_err(io)?;
        let a = &self.arch;
        let list = |v: &[usize]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(" ");
        let text = format!(
            "format={SAVE_FORMAT}\ninput_dims={}\nhidden={}\nd_phi={}\ncomponents={}\nn_classes={}\nactivation={}\n",
            list(&a.input_dims),
            list(&a.hidden),
            a.d_phi,
            a.components,
            a.n_classes,
            a.activation.name()
        );
        std::fs::write(dir.join("architecture.txt"), text).map_err(io)?;
        self.net.clone().save_file(dir.join("model.bpk")).map_err(|e| Error::Record(e.to_string()))
    }

    /// Loads a model written by [`NeuralEksvd::save`], on the CPU (burn's
    /// Flex backend), as the library's other saved models are;
    /// [`OnDevice::to_device`] or [`NeuralEksvd::try_to_device`] moves it.
    ///
    /// The whole of `model.bpk` is read before the network is built, so the
    /// loaded model does not need the directory afterwards.
    ///
    /// Both formats load: 2 (written by [`NeuralEksvd::save`]) and 1 (no
    /// `format` line: every layer stacked over the sources, the first one
    /// with each source's rows zero-padded to `max_q d_q`), whose padding
    /// rows are dropped.
    ///
    /// Errors: [`Error::Record`] for a missing or malformed file or an
    /// unknown format.
    pub fn load(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let text = std::fs::read_to_string(dir.join("architecture.txt")).map_err(|e| Error::Record(format!("{}: {e}", dir.display())))?;
        let arch = parse_architecture(&text)?;
        let device = Device::cpu();
        let burn = burn_device(&device)?;
        let path = dir.join("model.bpk");
        let bytes = std::fs::read(&path).map_err(|e| Error::Record(format!("{}: {e}", path.display())))?;
        let record = ModuleRecord::from_bytes(Bytes::from_bytes_vec(bytes)).map_err(|e| Error::Record(format!("{}: {e}", path.display())))?;
        let record_error = |e: burn::store::RecordError| Error::Record(format!("{}: {e}", path.display()));
        let net = match saved_format(&text)? {
            1 => NeuralEksvdNet::from_weights(&PaddedNet::zeros(&arch, &burn)?.try_load_record(record).map_err(record_error)?.into_weights(&arch)?, &burn)?,
            _ => NeuralEksvdNet::init(&arch, 1.0, 0, &burn)?.try_load_record(record).map_err(record_error)?,
        };
        Ok(NeuralEksvd::untrained(net, burn, device, arch))
    }
}

impl OnDevice for NeuralEksvd {
    fn device(&self) -> &Device {
        &self.device
    }

    /// The network moved to `device`'s burn backend. Where burn cannot run
    /// on `device` ([`NeuralEksvd::try_to_device`] gives the error), the
    /// returned model names `device` and its computing methods return
    /// [`Error::BackendUnavailable`].
    fn to_device(&self, device: &Device) -> Self {
        match self.try_to_device(device) {
            Ok(moved) => moved,
            Err(e) => NeuralEksvd { device: device.clone(), unplaced: Some(e.to_string()), ..self.clone() },
        }
    }
}

impl Transform<MultiSource> for NeuralEksvd {
    /// The scores of all sources side by side, `[E_1 ... E_Q]` (`N x Qk`).
    type Output = DMatrix<f64>;
    /// Scores of paired samples on the model's device.
    fn transform(&self, x: &MultiSource) -> Result<DMatrix<f64>> {
        self.scores(x)
    }
}

impl Predict<MultiSource> for NeuralEksvd {
    /// One class per sample.
    type Output = Vec<usize>;
    /// Predicted classes of paired samples (all sources of each sample): the
    /// arg max of the logits, computed on the model's device.
    fn predict(&self, x: &MultiSource) -> Result<Vec<usize>> {
        let resident = self.upload_unlabelled(x)?;
        Ok(self.evaluate(&resident, 0.0, true)?.predictions)
    }
}

/// The format [`NeuralEksvd::save`] writes (see [`NeuralEksvd::load`]).
const SAVE_FORMAT: u32 = 2;

/// The `format` of an `architecture.txt`: 1 where there is no such line.
///
/// Errors: [`Error::Record`] for a format other than 1 and 2.
fn saved_format(text: &str) -> Result<u32> {
    match text.lines().find_map(|l| l.strip_prefix("format=")).map(str::trim) {
        None => Ok(1),
        Some(v) => match v.parse::<u32>() {
            Ok(f @ 1..=SAVE_FORMAT) => Ok(f),
            _ => Err(Error::Record(format!("architecture.txt: format {v} is not 1 or {SAVE_FORMAT}"))),
        },
    }
}

fn parse_architecture(text: &str) -> Result<Architecture> {
    let bad = |what: &str| Error::Record(format!("architecture.txt: bad or missing {what}"));
    let get = |key: &str| text.lines().find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('='))).ok_or_else(|| bad(key));
    let list = |key: &str| -> Result<Vec<usize>> { get(key)?.split_whitespace().map(|s| s.parse().map_err(|_| bad(key))).collect() };
    let one = |key: &str| -> Result<usize> { get(key)?.trim().parse().map_err(|_| bad(key)) };
    let arch = Architecture {
        input_dims: list("input_dims")?,
        hidden: list("hidden")?,
        d_phi: one("d_phi")?,
        components: one("components")?,
        n_classes: one("n_classes")?,
        activation: Activation::parse(get("activation")?.trim()).ok_or_else(|| bad("activation"))?,
    };
    arch.validate()?;
    Ok(arch)
}

#[cfg(test)]
mod tests {
    use burn::module::Module;

    use super::NeuralEksvd;
    use crate::eksvd::neural::format1::PaddedNet;
    use crate::eksvd::neural::model::{Activation, Architecture, NeuralEksvdNet};
    use crate::eksvd::neural::placement::burn_device;
    use crate::error::Error;

    /// A model saved in format 1 (no `format` line, the first layer stacked
    /// and zero-padded to the widest source) loads with the same weights as
    /// the network it was written from; an unknown format is a typed error.
    #[test]
    fn format_1_models_load() {
        let device = burn_device(&crate::Device::Cpu).unwrap();
        let arch = Architecture { input_dims: vec![3, 7, 5], hidden: vec![4], d_phi: 6, components: 2, n_classes: 3, activation: Activation::Tanh };
        let weights = NeuralEksvdNet::init(&arch, 0.7, 11, &device).unwrap().export();
        let dir = std::env::temp_dir().join(format!("gramian-neural-format-1-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("architecture.txt"), "input_dims=3 7 5\nhidden=4\nd_phi=6\ncomponents=2\nn_classes=3\nactivation=tanh\n").unwrap();
        PaddedNet::from_weights(&weights, &device).save_file(dir.join("model.bpk")).unwrap();
        let loaded = NeuralEksvd::load(&dir).unwrap().weights();
        assert_eq!(loaded.values(), weights.values());
        assert_eq!(loaded.feature_maps.iter().map(|l| l[0].0.nrows()).collect::<Vec<_>>(), vec![3, 7, 5]);
        std::fs::write(dir.join("architecture.txt"), "format=3\ninput_dims=3 7 5\nhidden=4\nd_phi=6\ncomponents=2\nn_classes=3\nactivation=tanh\n").unwrap();
        assert!(matches!(NeuralEksvd::load(&dir), Err(Error::Record(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
