//! What the Neural eKSVD reproductions share (`eksvd_neural_mfeat`,
//! `eksvd_neural_3sources`): the training settings and their command-line
//! flags, the `k:eta:lr[:wd[:activation]]` candidate lists, and the choice of a candidate
//! on validation.

use gramian_repro::datasets::macro_f1;
use nalgebra::DMatrix;
use gramian_repro::evaluation::{linear_svm_classifier, select_on_validation as select_classifier, Representation, SplitData};
use gramian::eksvd::neural::{Activation, EarlyStopping, LearningRateSchedule, NeuralBackend, NeuralEksvd, NeuralEksvdParams};
use gramian::estimator::{Fit, Predict, Transform};
use gramian::{Device, Labelled};

pub type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// One hyper-parameter candidate: components `k`, `eta`, learning rate,
/// weight decay, and optionally the activation of the feature maps (the
/// training settings' activation when `None`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    pub k: usize,
    pub eta: f64,
    pub lr: f64,
    pub wd: f64,
    pub activation: Option<Activation>,
}

impl Candidate {
    /// `k`, `eta`, learning rate and weight decay, with the training
    /// settings' activation.
    pub const fn new(k: usize, eta: f64, lr: f64, wd: f64) -> Self {
        Candidate { k, eta, lr, wd, activation: None }
    }
}

impl std::fmt::Display for Candidate {
    /// The candidate as `--candidates` takes it, `k:eta:lr:wd[:activation]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}:{}", self.k, self.eta, self.lr, self.wd)?;
        match self.activation {
            Some(a) => write!(f, ":{}", a.name()),
            None => Ok(()),
        }
    }
}

/// Parses one `k:eta:lr[:wd[:activation]]` of `--candidates` (weight decay
/// 0 and the `--activation` setting when left out); clap splits the list at
/// the commas.
pub fn parse_candidate(text: &str) -> Result<Candidate, String> {
    let parts: Vec<&str> = text.split(':').collect();
    if !(3..=5).contains(&parts.len()) {
        return Err("expected k:eta:lr[:wd[:activation]]".into());
    }
    let number = |name: &str, part: &str| part.parse::<f64>().map_err(|e| format!("{name} {part:?}: {e}"));
    let k = parts[0].parse().map_err(|e| format!("k {:?}: {e}", parts[0]))?;
    let wd = if parts.len() >= 4 { number("wd", parts[3])? } else { 0.0 };
    let activation = parts.get(4).map(|a| parse_activation(a)).transpose()?;
    Ok(Candidate { k, eta: number("eta", parts[1])?, lr: number("lr", parts[2])?, wd, activation })
}

/// The candidates as `--candidates` takes them, for `--help`.
pub fn candidates_flag(candidates: &[Candidate]) -> String {
    candidates.iter().map(Candidate::to_string).collect::<Vec<_>>().join(",")
}

fn parse_backend(text: &str) -> Result<NeuralBackend, String> {
    NeuralBackend::parse(text).ok_or_else(|| "cpu or wgpu".into())
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

fn parse_activation(text: &str) -> Result<Activation, String> {
    Activation::parse(text).ok_or_else(|| "relu, tanh or gelu".into())
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
    /// Training backend: cpu (burn Flex) or wgpu (GPU).
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
    /// Activation of the feature maps: relu, tanh or gelu.
    #[arg(long, value_parser = parse_activation)]
    activation: Option<Activation>,
    /// Standard deviation of Gaussian noise on the (standardised) inputs of every training step (0: off).
    #[arg(long, value_name = "S")]
    input_noise: Option<f64>,
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
    /// Hyper-parameter candidates k:eta:lr[:wd[:activation]],... chosen on validation (weight decay 0 and --activation when left out).
    #[arg(long, value_name = "K:ETA:LR[:WD[:ACT]]", value_delimiter = ',', value_parser = parse_candidate)]
    pub candidates: Option<Vec<Candidate>>,
    /// Also refit the chosen candidate on the training and validation rows
    /// together for the kept number of epochs, and report its test macro-F1.
    #[arg(long)]
    pub refit: bool,
    /// Also choose the candidate, its epochs and the SVM penalties by
    /// F-fold cross-validation over the training and validation rows (fold
    /// 0 is the split's own validation set), refit on those rows and
    /// report the test macro-F1.
    #[arg(long, value_name = "F", value_parser = clap::value_parser!(u64).range(2..=20))]
    pub cv: Option<u64>,
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
            activation: self.activation.unwrap_or(defaults.activation),
            input_noise: self.input_noise.unwrap_or(defaults.input_noise),
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
        "Defaults: --backend {} --epochs {} --dropout {} --stopping {stopping} --batch {} --hidden '{hidden}' --dphi {} --patience {} --schedule {schedule} --ema {} --gamma-init {} --activation {} --input-noise {} --candidates {}",
        t.backend.name(),
        t.epochs,
        t.dropout,
        t.batch,
        t.d_phi,
        t.patience,
        t.ema,
        t.gamma_init,
        t.activation.name(),
        t.input_noise,
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
    pub activation: Activation,
    pub input_noise: f64,
}

impl Training {
    /// The parameters of one candidate.
    pub fn params(&self, c: Candidate, seed: u64) -> NeuralEksvdParams {
        NeuralEksvdParams::new(c.k)
            .hidden(self.hidden.clone())
            .d_phi(self.d_phi)
            .eta(c.eta)
            .learning_rate(c.lr)
            .weight_decay(c.wd)
            .batch_size(self.batch)
            .max_epochs(self.epochs)
            .patience(self.patience)
            .dropout(self.dropout)
            .early_stopping(self.stopping)
            .schedule(self.schedule)
            .weight_averaging(self.ema)
            .gamma_init(self.gamma_init)
            .activation(c.activation.unwrap_or(self.activation))
            .input_noise(self.input_noise)
            .seed(seed)
    }

    /// The device of `--backend`: the CPU, or the process's shared GPU.
    pub fn device(&self) -> AnyResult<Device> {
        Ok(self.backend.device()?)
    }
}

/// Penalties `C` of the linear SVM on the learned scores.
pub const SVM_CS: [f64; 4] = [0.01, 0.1, 1.0, 10.0];

/// Test macro-F1 of the paper's downstream classifier, a linear SVM, on the
/// learned scores `[E_1 ... E_Q]` of `model` (standardised on the training
/// rows, `C` from [`SVM_CS`] chosen on validation), and that `C`.
pub fn svm_on_scores(split: &SplitData, model: &NeuralEksvd) -> AnyResult<(f64, f64)> {
    let rep = Representation { train: model.transform(&split.train)?, validation: model.transform(&split.validation)?, test: model.transform(&split.test)? };
    let choice = select_classifier(split, &[("-", rep)], &SVM_CS, &linear_svm_classifier)?;
    Ok((choice.test_f1, choice.classifier_c))
}

/// One candidate fitted on one split (or fold), with its validation and
/// test scores.
pub struct NeuralRun {
    pub model: NeuralEksvd,
    pub validation_f1: f64,
    pub validation_cross_entropy: f64,
    pub test_f1: f64,
    pub label: String,
    /// The candidate fitted.
    pub candidate: Candidate,
}

/// Fits every candidate on `split.train`, early-stopped on `split.validation`.
pub fn fit_candidates(split: &SplitData, candidates: &[Candidate], t: &Training, seed: u64, progress: bool) -> AnyResult<Vec<NeuralRun>> {
    let mut runs = Vec::with_capacity(candidates.len());
    let device = t.device()?;
    let train = Labelled::new(split.train.clone(), split.train_labels.clone())?;
    let validation = Labelled::new(split.validation.clone(), split.validation_labels.clone())?;
    for &candidate in candidates {
        let model = t.params(candidate, seed).progress(progress).fit_with_validation(&device, &train, &validation)?;
        let validation_f1 = macro_f1(&split.validation_labels, &model.predict(&split.validation)?);
        let validation_cross_entropy = model.loss(&validation, 1.0)?.cross_entropy;
        let test_f1 = macro_f1(&split.test_labels, &model.predict(&split.test)?);
        let Candidate { k, eta, lr, wd, activation } = candidate;
        let activation = activation.map_or(String::new(), |a| format!(" {}", a.name()));
        let label = format!("k={k} eta={eta} lr={lr} wd={wd}{activation} best epoch {}", model.best_epoch());
        eprintln!(
            "    {label}: validation {:.2} (CE {validation_cross_entropy:.4}) test {:.2}, {:.3} s/epoch",
            100.0 * validation_f1,
            100.0 * test_f1,
            model.history().seconds_per_epoch()
        );
        runs.push(NeuralRun { model, validation_f1, validation_cross_entropy, test_f1, label, candidate });
    }
    Ok(runs)
}

/// The run with the highest validation macro-F1 (ties: the lower validation
/// cross-entropy, as the early stopping does; then the earlier run).
pub fn best_on_validation(runs: Vec<NeuralRun>) -> AnyResult<NeuralRun> {
    let mut best: Option<NeuralRun> = None;
    for run in runs {
        let better = best.as_ref().is_none_or(|b| run.validation_f1 > b.validation_f1 || (run.validation_f1 == b.validation_f1 && run.validation_cross_entropy < b.validation_cross_entropy));
        if better {
            best = Some(run);
        }
    }
    best.ok_or_else(|| "no candidates".into())
}

/// What cross-validation chose: the candidate with the best mean
/// held-out macro-F1 over the folds (ties: the lower mean held-out
/// cross-entropy), the mean of its kept epochs (rounded, at least 1), and
/// the SVM penalty with the best mean held-out macro-F1 on its scores.
#[derive(Debug, Clone)]
pub struct CrossValidated {
    pub candidate: Candidate,
    pub epochs: usize,
    pub svm_c: f64,
    /// Test-row classes of the chosen candidate's fold models together: the
    /// class of highest mean softmax probability over the folds (the models
    /// are scored on the test rows, never chosen by them).
    pub fold_ensemble: Vec<usize>,
}

/// Row-wise softmax of `logits`.
fn softmax_rows(logits: &DMatrix<f64>) -> DMatrix<f64> {
    let mut p = logits.clone();
    for mut row in p.row_iter_mut() {
        let top = row.max();
        row.apply(|v| *v = (*v - top).exp());
        let total = row.sum();
        row /= total;
    }
    p
}

/// Held-out macro-F1 of a linear SVM trained on `train` (the fold's
/// training rows of some representation) and scored on `validation`, one
/// per penalty of `cs`; both standardised on `train` when `standardize`.
fn held_out_f1_per_penalty(fold: &SplitData, train: DMatrix<f64>, validation: DMatrix<f64>, cs: &[f64], standardize: bool) -> AnyResult<Vec<f64>> {
    let rep = Representation { test: DMatrix::zeros(0, train.ncols()), validation, train };
    let rep = if standardize { rep.standardized() } else { rep };
    cs.iter()
        .map(|&c| {
            let predicted = linear_svm_classifier(c, &rep.train, &fold.train_labels, &[&rep.validation])?;
            Ok(macro_f1(&fold.validation_labels, &predicted[0]))
        })
        .collect()
}

/// Index of the largest of `values` (ties: the first).
fn first_argmax(values: &[f64]) -> usize {
    (1..values.len()).fold(0, |best, i| if values[i] > values[best] { i } else { best })
}

/// Chooses a candidate, its epochs and the SVM penalty on its scores by
/// cross-validation over `folds` (from `SplitData::cross_validation_folds`), the
/// protocol the paper names ("selected by cross validation"). `first_fold`
/// may hold fits of `folds[0]` made already (as [`fit_candidates`] returns
/// them); the other folds are fitted here. No choice looks at the test
/// rows; they are scored only for [`CrossValidated::fold_ensemble`].
pub fn choose_by_cross_validation(folds: &[SplitData], first_fold: Option<&[NeuralRun]>, candidates: &[Candidate], t: &Training, seed: u64) -> AnyResult<CrossValidated> {
    let m = candidates.len();
    if m == 0 || folds.is_empty() {
        return Err("cross-validation needs candidates and folds".into());
    }
    let (mut f1, mut ce, mut epochs) = (vec![0.0; m], vec![0.0; m], vec![0.0; m]);
    let mut svm = vec![vec![0.0; SVM_CS.len()]; m];
    let mut test_probabilities: Vec<Option<DMatrix<f64>>> = vec![None; m];
    for (f, fold) in folds.iter().enumerate() {
        eprintln!("  cross-validation fold {f} of {}", folds.len());
        let fitted;
        let runs = match (f, first_fold) {
            (0, Some(runs)) => runs,
            _ => {
                fitted = fit_candidates(fold, candidates, t, seed, false)?;
                &fitted[..]
            }
        };
        if runs.len() != m {
            return Err(format!("{} fits of fold {f} for {m} candidates", runs.len()).into());
        }
        for (i, run) in runs.iter().enumerate() {
            f1[i] += run.validation_f1;
            ce[i] += run.validation_cross_entropy;
            epochs[i] += run.model.best_epoch().max(1) as f64;
            let p = softmax_rows(&run.model.logits(&fold.test)?);
            test_probabilities[i] = Some(match test_probabilities[i].take() {
                None => p,
                Some(total) => total + p,
            });
            let scores = held_out_f1_per_penalty(fold, run.model.transform(&fold.train)?, run.model.transform(&fold.validation)?, &SVM_CS, true)?;
            for (total, value) in svm[i].iter_mut().zip(scores) {
                *total += value;
            }
        }
    }
    let mut best = 0;
    for i in 1..m {
        if f1[i] > f1[best] || (f1[i] == f1[best] && ce[i] < ce[best]) {
            best = i;
        }
    }
    let best_c = first_argmax(&svm[best]);
    let n = folds.len() as f64;
    let fold_ensemble = match &test_probabilities[best] {
        Some(p) => p.row_iter().map(|r| r.transpose().argmax().0).collect(),
        None => return Err("no folds".into()),
    };
    let chosen = CrossValidated { candidate: candidates[best], epochs: ((epochs[best] / n).round() as usize).max(1), svm_c: SVM_CS[best_c], fold_ensemble };
    eprintln!(
        "  cross-validation: mean held-out F1 per candidate {:?}, chosen {}, {} epochs, SVM C {}",
        f1.iter().map(|v| format!("{:.2}", 100.0 * v / n)).collect::<Vec<_>>(),
        chosen.candidate,
        chosen.epochs,
        chosen.svm_c
    );
    Ok(chosen)
}

/// The penalty of [`SVM_CS`]-like `cs` with the best mean held-out macro-F1
/// of a linear SVM on the concatenated views over `folds` (standardised per
/// fold when `standardize`; ties: the earlier penalty).
pub fn concatenation_c_by_cross_validation(folds: &[SplitData], cs: &[f64], standardize: bool) -> AnyResult<f64> {
    let mut totals = vec![0.0; cs.len()];
    for fold in folds {
        let scores = held_out_f1_per_penalty(fold, fold.train.concatenated()?, fold.validation.concatenated()?, cs, standardize)?;
        for (total, value) in totals.iter_mut().zip(scores) {
            *total += value;
        }
    }
    cs.get(first_argmax(&totals)).copied().ok_or_else(|| "no penalties".into())
}

/// Test macro-F1 of concatenation + linear SVM, of the network's own head
/// and of the linear SVM on its scores, each refitted on the training and
/// validation rows, and of the chosen candidate's fold models together
/// ([`CrossValidated::fold_ensemble`]), after every choice was made by `folds`-fold
/// cross-validation ([`choose_by_cross_validation`],
/// [`concatenation_c_by_cross_validation`] with `concat_cs`). `split_fits`
/// are the candidates fitted on `split` ([`fit_candidates`]), reused as
/// fold 0 when that fold is the split itself.
#[allow(clippy::too_many_arguments)]
pub fn cross_validated_refit(split: &SplitData, folds: usize, split_fits: &[NeuralRun], candidates: &[Candidate], t: &Training, seed: u64, concat_cs: &[f64], standardize_concat: bool) -> AnyResult<[f64; 4]> {
    let fold_data = split.cross_validation_folds(folds)?;
    // Fold 0 trains on the first rows of [training; validation]; it is the
    // split itself exactly when it trains on as many rows as the split.
    let fold_zero_is_split = fold_data[0].train_labels.len() == split.train_labels.len();
    let chosen = choose_by_cross_validation(&fold_data, fold_zero_is_split.then_some(split_fits), candidates, t, seed)?;
    let (head, svm) = refit_on_train_and_validation(split, chosen.candidate, chosen.epochs, chosen.svm_c, t, seed)?;
    let concat_c = concatenation_c_by_cross_validation(&fold_data, concat_cs, standardize_concat)?;
    let concat = svm_refit_f1(split, concatenated_train_and_validation(split)?, split.test.concatenated()?, concat_c, standardize_concat)?;
    let ensemble = macro_f1(&split.test_labels, &chosen.fold_ensemble);
    eprintln!("  cross-validated refit: concatenation (C = {concat_c}) {:.2}, own head {:.2}, scores + SVM {:.2}; fold models together {:.2}", 100.0 * concat, 100.0 * head, 100.0 * svm, 100.0 * ensemble);
    Ok([concat, head, svm, ensemble])
}

/// Test macro-F1 of the network's own head and of the linear SVM on its
/// scores after refitting on the training and validation rows together.
/// `candidate` is retrained for `epochs` (at least 1) without early
/// stopping; the SVM uses `svm_c` on scores standardised on the refit rows.
/// Every choice was made before, on validation or by cross-validation; the
/// test rows are only scored. The views stay standardised on the training
/// part alone.
pub fn refit_on_train_and_validation(split: &SplitData, candidate: Candidate, epochs: usize, svm_c: f64, t: &Training, seed: u64) -> AnyResult<(f64, f64)> {
    let (sources, labels) = split.train_and_validation()?;
    let model = t.params(candidate, seed).max_epochs(epochs.max(1)).fit(&t.device()?, &Labelled::new(sources.clone(), labels)?)?;
    let head_f1 = macro_f1(&split.test_labels, &model.predict(&split.test)?);
    let svm_f1 = svm_refit_f1(split, model.transform(&sources)?, model.transform(&split.test)?, svm_c, true)?;
    Ok((head_f1, svm_f1))
}

/// Test macro-F1 of a linear SVM with the penalty `c` chosen on validation,
/// retrained on `train_and_validation` (the training rows, then the
/// validation rows, of some representation; standardised on them when
/// `standardize`) and scored on `test`.
pub fn svm_refit_f1(split: &SplitData, train_and_validation: DMatrix<f64>, test: DMatrix<f64>, c: f64, standardize: bool) -> AnyResult<f64> {
    let labels = split.train_and_validation_labels();
    let rep = Representation { train: train_and_validation, validation: DMatrix::zeros(0, test.ncols()), test };
    let rep = if standardize { rep.standardized() } else { rep };
    let predicted = linear_svm_classifier(c, &rep.train, &labels, &[&rep.test])?;
    Ok(macro_f1(&split.test_labels, &predicted[0]))
}

/// The concatenated views of the training and validation rows, stacked.
pub fn concatenated_train_and_validation(split: &SplitData) -> AnyResult<DMatrix<f64>> {
    Ok(split.train_and_validation()?.0.concatenated()?)
}
