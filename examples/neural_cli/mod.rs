//! What the Neural eKSVD reproductions share (`eksvd_neural_mfeat`,
//! `eksvd_neural_3sources`): the training settings and their command-line
//! flags, the `k:eta:lr[:wd]` candidate lists, and the choice of a candidate
//! on validation.

use gramian::datasets::macro_f1;
use gramian::eksvd::MultiSource;
use nalgebra::DMatrix;
use gramian::eksvd::evaluation::{linear_svm_classifier, select_on_validation as select_classifier, Representation, SplitData};
use gramian::eksvd::neural::{EarlyStopping, LearningRateSchedule, NeuralBackend, NeuralEksvd, NeuralEksvdParams};

pub type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// One hyper-parameter candidate: components `k`, `eta`, learning rate,
/// weight decay.
pub type Candidate = (usize, f64, f64, f64);

/// Parses one `k:eta:lr[:wd]` of `--candidates` (weight decay 0 when left
/// out); clap splits the list at the commas.
pub fn parse_candidate(text: &str) -> Result<Candidate, String> {
    let parts: Vec<&str> = text.split(':').collect();
    if !(3..=4).contains(&parts.len()) {
        return Err("expected k:eta:lr[:wd]".into());
    }
    let number = |name: &str, part: &str| part.parse::<f64>().map_err(|e| format!("{name} {part:?}: {e}"));
    let k = parts[0].parse().map_err(|e| format!("k {:?}: {e}", parts[0]))?;
    let wd = if parts.len() == 4 { number("wd", parts[3])? } else { 0.0 };
    Ok((k, number("eta", parts[1])?, number("lr", parts[2])?, wd))
}

/// The candidates as `--candidates` takes them, for `--help`.
fn candidates_flag(candidates: &[Candidate]) -> String {
    candidates.iter().map(|(k, eta, lr, wd)| format!("{k}:{eta}:{lr}:{wd}")).collect::<Vec<_>>().join(",")
}

fn parse_backend(text: &str) -> Result<NeuralBackend, String> {
    NeuralBackend::parse(text).ok_or_else(|| "ndarray or wgpu".into())
}

fn parse_stopping(text: &str) -> Result<EarlyStopping, String> {
    match text {
        "f1" => Ok(EarlyStopping::ValidationF1),
        "ce" => Ok(EarlyStopping::ValidationCrossEntropy),
        _ => Err("f1 or ce".into()),
    }
}

fn parse_schedule(text: &str) -> Result<LearningRateSchedule, String> {
    match text {
        "constant" => Ok(LearningRateSchedule::Constant),
        "cosine" => Ok(LearningRateSchedule::Cosine),
        _ => Err("constant or cosine".into()),
    }
}

/// `W1,W2,...`, or the empty string for no hidden layer.
fn parse_widths(text: &str) -> Result<Vec<usize>, String> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    text.split(',').map(|w| w.parse().map_err(|e| format!("width {w:?}: {e}"))).collect()
}

/// The training flags of the neural examples. A flag left out keeps the
/// example's default ([`TrainingArgs::resolve`]).
#[derive(clap::Args, Debug)]
pub struct TrainingArgs {
    /// Training backend: ndarray (CPU) or wgpu (GPU).
    #[arg(long, value_parser = parse_backend)]
    backend: Option<NeuralBackend>,
    /// Most epochs per fit.
    #[arg(long, value_name = "E")]
    epochs: Option<usize>,
    /// Dropout probability of the MLP's hidden layers.
    #[arg(long, value_name = "P")]
    dropout: Option<f64>,
    /// Early stopping on validation macro-F1 (f1) or validation cross-entropy (ce).
    #[arg(long, value_parser = parse_stopping)]
    stopping: Option<EarlyStopping>,
    /// Mini-batch size.
    #[arg(long, value_name = "B")]
    batch: Option<usize>,
    /// Hidden layer widths of each feature map, W1,W2,... ('' for none).
    // `std::vec::Vec`, not `Vec`: clap then parses the whole list from one value.
    #[arg(long, value_name = "W1,W2,...", value_parser = parse_widths)]
    hidden: Option<std::vec::Vec<usize>>,
    /// Output dimension d_phi of each feature map.
    #[arg(long = "dphi", value_name = "D")]
    d_phi: Option<usize>,
    /// Early-stopping patience in epochs.
    #[arg(long, value_name = "E")]
    patience: Option<usize>,
    /// Learning-rate schedule: constant or cosine.
    #[arg(long, value_parser = parse_schedule)]
    schedule: Option<LearningRateSchedule>,
    /// Decay of the moving average of the weights (0: off).
    #[arg(long, value_name = "DECAY")]
    ema: Option<f64>,
    /// Initial value of the learned gamma.
    #[arg(long, value_name = "G")]
    gamma_init: Option<f64>,
}

/// The flags of a table run shared by the reproductions: splits, curves
/// folder, candidates, refit, and the training flags.
#[derive(clap::Args, Debug)]
pub struct TableArgs {
    /// Number of stratified 60/20/20 splits (seeds 0..N).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub splits: u64,
    /// Folder for the training curves of split 0 (CSV and PNG).
    #[arg(long, value_name = "DIR", default_value = "target/neural_eksvd")]
    pub out: String,
    /// Hyper-parameter candidates k:eta:lr[:wd],... chosen on validation (weight decay 0 when left out).
    #[arg(long, value_name = "K:ETA:LR[:WD]", value_delimiter = ',', value_parser = parse_candidate)]
    pub candidates: Option<Vec<Candidate>>,
    /// Also refit the chosen candidate on the training and validation rows
    /// together for the kept number of epochs, and report its test macro-F1.
    #[arg(long)]
    pub refit: bool,
    #[command(flatten)]
    pub training: TrainingArgs,
}

impl TrainingArgs {
    /// `defaults` with the flags given on the command line.
    pub fn resolve(self, defaults: Training) -> Training {
        Training {
            backend: self.backend.unwrap_or(defaults.backend),
            epochs: self.epochs.unwrap_or(defaults.epochs),
            dropout: self.dropout.unwrap_or(defaults.dropout),
            stopping: self.stopping.unwrap_or(defaults.stopping),
            batch: self.batch.unwrap_or(defaults.batch),
            hidden: self.hidden.unwrap_or(defaults.hidden),
            d_phi: self.d_phi.unwrap_or(defaults.d_phi),
            patience: self.patience.unwrap_or(defaults.patience),
            schedule: self.schedule.unwrap_or(defaults.schedule),
            ema: self.ema.unwrap_or(defaults.ema),
            gamma_init: self.gamma_init.unwrap_or(defaults.gamma_init),
        }
    }
}

/// The text after `--help`: an example's training defaults and candidates,
/// as the flags that would give them.
pub fn defaults_help(t: &Training, candidates: &[Candidate]) -> String {
    let hidden = t.hidden.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    let stopping = match t.stopping {
        EarlyStopping::ValidationF1 => "f1",
        EarlyStopping::ValidationCrossEntropy => "ce",
    };
    let schedule = match t.schedule {
        LearningRateSchedule::Constant => "constant",
        LearningRateSchedule::Cosine => "cosine",
    };
    format!(
        "Defaults: --backend {} --epochs {} --dropout {} --stopping {stopping} --batch {} --hidden '{hidden}' --dphi {} --patience {} --schedule {schedule} --ema {} --gamma-init {} --candidates {}",
        t.backend.name(),
        t.epochs,
        t.dropout,
        t.batch,
        t.d_phi,
        t.patience,
        t.ema,
        t.gamma_init,
        candidates_flag(candidates)
    )
}

/// Training settings shared by every candidate.
#[derive(Debug, Clone)]
pub struct Training {
    pub backend: NeuralBackend,
    pub epochs: usize,
    pub dropout: f64,
    pub stopping: EarlyStopping,
    pub batch: usize,
    pub hidden: Vec<usize>,
    pub d_phi: usize,
    pub patience: usize,
    pub schedule: LearningRateSchedule,
    pub ema: f64,
    pub gamma_init: f64,
}

impl Training {
    /// The parameters of one candidate.
    pub fn params(&self, (k, eta, lr, wd): Candidate, seed: u64) -> NeuralEksvdParams {
        NeuralEksvdParams::new(k)
            .hidden(self.hidden.clone())
            .d_phi(self.d_phi)
            .eta(eta)
            .learning_rate(lr)
            .weight_decay(wd)
            .batch_size(self.batch)
            .max_epochs(self.epochs)
            .patience(self.patience)
            .dropout(self.dropout)
            .early_stopping(self.stopping)
            .schedule(self.schedule)
            .weight_averaging(self.ema)
            .gamma_init(self.gamma_init)
            .seed(seed)
            .backend(self.backend)
    }
}

/// Penalties `C` of the linear SVM on the learned scores.
pub const SVM_CS: [f64; 4] = [0.01, 0.1, 1.0, 10.0];

/// Test macro-F1 of the paper's downstream classifier, a linear SVM, on the
/// learned scores `[E_1 ... E_Q]` of `model` (standardised on the training
/// rows, `C` from [`SVM_CS`] chosen on validation), and that `C`.
pub fn svm_on_scores(split: &SplitData, model: &NeuralEksvd) -> AnyResult<(f64, f64)> {
    let rep = Representation { train: model.transform_all(&split.train)?, validation: model.transform_all(&split.validation)?, test: model.transform_all(&split.test)? };
    let choice = select_classifier(split, &[("-", rep)], &SVM_CS, &linear_svm_classifier)?;
    Ok((choice.test_f1, choice.classifier_c))
}

/// The candidate chosen on validation, with its test score.
pub struct NeuralRun {
    pub model: NeuralEksvd,
    pub validation_f1: f64,
    pub validation_cross_entropy: f64,
    pub test_f1: f64,
    pub label: String,
    /// The chosen candidate.
    pub candidate: Candidate,
}

/// Trains every candidate on `split` and keeps the one with the highest
/// validation macro-F1 (ties: the lower validation cross-entropy, as the
/// early stopping does).
pub fn select_on_validation(split: &SplitData, candidates: &[Candidate], t: &Training, seed: u64, progress: bool) -> AnyResult<NeuralRun> {
    let mut best: Option<NeuralRun> = None;
    for &candidate in candidates {
        let model = t.params(candidate, seed).progress(progress).fit(&split.train, &split.train_labels, Some((&split.validation, &split.validation_labels)))?;
        let validation_f1 = macro_f1(&split.validation_labels, &model.predict(&split.validation)?);
        let validation_cross_entropy = model.loss(&split.validation, &split.validation_labels, 1.0)?.cross_entropy;
        let test_f1 = macro_f1(&split.test_labels, &model.predict(&split.test)?);
        let (k, eta, lr, wd) = candidate;
        let label = format!("k={k} eta={eta} lr={lr} wd={wd} best epoch {}", model.best_epoch());
        eprintln!(
            "    {label}: validation {:.2} (CE {validation_cross_entropy:.4}) test {:.2}, {:.3} s/epoch",
            100.0 * validation_f1,
            100.0 * test_f1,
            model.history().seconds_per_epoch()
        );
        let better = best.as_ref().is_none_or(|b| validation_f1 > b.validation_f1 || (validation_f1 == b.validation_f1 && validation_cross_entropy < b.validation_cross_entropy));
        if better {
            best = Some(NeuralRun { model, validation_f1, validation_cross_entropy, test_f1, label, candidate });
        }
    }
    best.ok_or_else(|| "no candidates".into())
}

/// Test macro-F1 of the network's own head and of the linear SVM on its
/// scores after refitting on the training and validation rows together.
/// The chosen candidate is retrained for the number of epochs validation
/// kept (`run.model.best_epoch()`, at least 1) without early stopping; the
/// SVM uses `svm_c`, chosen on validation for the first fit, on scores
/// standardised on the refit rows. Every choice was made on validation
/// before; the test rows are only scored. The views stay standardised on
/// the training part alone.
pub fn refit_on_train_and_validation(split: &SplitData, run: &NeuralRun, svm_c: f64, t: &Training, seed: u64) -> AnyResult<(f64, f64)> {
    let stacked: Vec<DMatrix<f64>> = split.train.sources().iter().zip(split.validation.sources()).map(|(a, b)| stack_rows(a, b)).collect();
    let sources = MultiSource::paired(stacked)?;
    let labels = train_and_validation_labels(split);
    let epochs = run.model.best_epoch().max(1);
    let model = t.params(run.candidate, seed).max_epochs(epochs).fit(&sources, &labels, None)?;
    let head_f1 = macro_f1(&split.test_labels, &model.predict(&split.test)?);
    let svm_f1 = svm_refit_f1(split, model.transform_all(&sources)?, model.transform_all(&split.test)?, svm_c, true)?;
    Ok((head_f1, svm_f1))
}

/// Test macro-F1 of a linear SVM with the penalty `c` chosen on validation,
/// retrained on `train_and_validation` (the training rows, then the
/// validation rows, of some representation; standardised on them when
/// `standardize`) and scored on `test`.
pub fn svm_refit_f1(split: &SplitData, train_and_validation: DMatrix<f64>, test: DMatrix<f64>, c: f64, standardize: bool) -> AnyResult<f64> {
    let labels = train_and_validation_labels(split);
    let rep = Representation { train: train_and_validation, validation: DMatrix::zeros(0, test.ncols()), test };
    let rep = if standardize { rep.standardized() } else { rep };
    let predicted = linear_svm_classifier(c, &rep.train, &labels, &[&rep.test])?;
    Ok(macro_f1(&split.test_labels, &predicted[0]))
}

/// The concatenated views of the training and validation rows, stacked.
pub fn concatenated_train_and_validation(split: &SplitData) -> AnyResult<DMatrix<f64>> {
    Ok(stack_rows(&split.train.concatenated()?, &split.validation.concatenated()?))
}

/// The training labels, then the validation labels.
fn train_and_validation_labels(split: &SplitData) -> Vec<usize> {
    split.train_labels.iter().chain(&split.validation_labels).copied().collect()
}

/// `[a; b]`: the rows of `b` under those of `a`.
fn stack_rows(a: &DMatrix<f64>, b: &DMatrix<f64>) -> DMatrix<f64> {
    let mut m = DMatrix::zeros(a.nrows() + b.nrows(), a.ncols());
    m.rows_mut(0, a.nrows()).copy_from(a);
    m.rows_mut(a.nrows(), b.nrows()).copy_from(b);
    m
}
