//! What the Neural eKSVD reproductions share (`eksvd_neural_mfeat`,
//! `eksvd_neural_3sources`): the training settings and their command-line
//! flags, the `k:eta:lr[:wd]` candidate lists, and the choice of a candidate
//! on validation.

use gramian::datasets::macro_f1;
use gramian::eksvd::evaluation::{linear_svm_classifier, select_on_validation as select_classifier, Representation, SplitData};
use gramian::eksvd::neural::{EarlyStopping, LearningRateSchedule, NeuralBackend, NeuralEksvd, NeuralEksvdParams};

pub type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// One hyper-parameter candidate: components `k`, `eta`, learning rate,
/// weight decay.
pub type Candidate = (usize, f64, f64, f64);

/// Parses `k:eta:lr[:wd],...` (weight decay 0 when left out).
pub fn parse_candidates(text: &str) -> AnyResult<Vec<Candidate>> {
    text.split(',')
        .map(|c| {
            let parts: Vec<&str> = c.split(':').collect();
            if !(3..=4).contains(&parts.len()) {
                return Err(format!("candidate {c:?}: expected k:eta:lr[:wd]").into());
            }
            let wd = if parts.len() == 4 { parts[3].parse()? } else { 0.0 };
            Ok((parts[0].parse()?, parts[1].parse()?, parts[2].parse()?, wd))
        })
        .collect()
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
    /// Flags understood by [`Training::apply_flag`].
    pub const FLAGS: &'static str = "[--epochs E] [--backend ndarray|wgpu] [--dropout P] [--stopping f1|ce] [--batch B] [--hidden W1,W2,...|''] [--dphi D] [--patience E] [--schedule constant|cosine] [--ema DECAY] [--gamma-init G]";

    /// Applies `flag value` if it is one of [`Training::FLAGS`]; `Ok(false)`
    /// for any other flag.
    pub fn apply_flag(&mut self, flag: &str, value: &str) -> AnyResult<bool> {
        match flag {
            "--epochs" => self.epochs = value.parse()?,
            "--backend" => self.backend = NeuralBackend::parse(value).ok_or("--backend: ndarray or wgpu")?,
            "--dropout" => self.dropout = value.parse()?,
            "--stopping" => {
                self.stopping = match value {
                    "f1" => EarlyStopping::ValidationF1,
                    "ce" => EarlyStopping::ValidationCrossEntropy,
                    other => return Err(format!("--stopping: f1 or ce, got {other}").into()),
                }
            }
            "--batch" => self.batch = value.parse()?,
            "--hidden" => self.hidden = if value.is_empty() { Vec::new() } else { value.split(',').map(str::parse).collect::<Result<_, _>>()? },
            "--dphi" => self.d_phi = value.parse()?,
            "--patience" => self.patience = value.parse()?,
            "--ema" => self.ema = value.parse()?,
            "--gamma-init" => self.gamma_init = value.parse()?,
            "--schedule" => {
                self.schedule = match value {
                    "constant" => LearningRateSchedule::Constant,
                    "cosine" => LearningRateSchedule::Cosine,
                    other => return Err(format!("--schedule: constant or cosine, got {other}").into()),
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

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
/// rows, `C` from [`SVM_CS`] chosen on validation).
pub fn svm_on_scores(split: &SplitData, model: &NeuralEksvd) -> AnyResult<f64> {
    let rep = Representation { train: model.transform_all(&split.train)?, validation: model.transform_all(&split.validation)?, test: model.transform_all(&split.test)? };
    Ok(select_classifier(split, &[("-", rep)], &SVM_CS, &linear_svm_classifier)?.test_f1)
}

/// The candidate chosen on validation, with its test score.
pub struct NeuralRun {
    pub model: NeuralEksvd,
    pub validation_f1: f64,
    pub validation_cross_entropy: f64,
    pub test_f1: f64,
    pub label: String,
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
            best = Some(NeuralRun { model, validation_f1, validation_cross_entropy, test_f1, label });
        }
    }
    best.ok_or_else(|| "no candidates".into())
}
