//! The training curves of a Neural eKSVD fit: one [`EpochRecord`] per
//! epoch in a [`TrainingHistory`], with the time spent and the steps and
//! evaluations replayed, written as CSV by [`TrainingHistory::write_csv`].

use std::io::Write;
use std::path::Path;

/// Per-epoch training curve values (Figure 1 of the paper).
#[derive(Debug, Clone, PartialEq)]
pub struct EpochRecord {
    /// Epoch, from 1.
    pub epoch: usize,
    /// `sum_k (J_k / N)^2` on the whole training set at the end of the epoch.
    pub objective_squared: f64,
    /// Mean cross-entropy on the whole training set at the end of the epoch.
    pub cross_entropy: f64,
    /// `gamma` at the end of the epoch.
    pub gamma: f64,
    /// Validation macro-F1 (when a validation set was given).
    pub validation_f1: Option<f64>,
    /// Mean validation cross-entropy (when a validation set was given).
    pub validation_cross_entropy: Option<f64>,
    /// Wall-clock seconds of the epoch's Adam steps.
    pub seconds: f64,
    /// Wall-clock seconds after the steps: keeping the network, weight
    /// averaging, the training loss, the validation scores and the
    /// early-stopping bookkeeping (each evaluation waits for its read).
    pub evaluation_seconds: f64,
}

/// The training curves.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TrainingHistory {
    /// One record per epoch run.
    pub epochs: Vec<EpochRecord>,
    /// Adam steps replayed from a captured one (see
    /// [`NeuralEksvdParams::graph_replay`](super::NeuralEksvdParams::graph_replay)); 0 where every step ran eagerly.
    pub replayed_steps: usize,
    /// Per-epoch evaluations (training loss and validation scores) replayed
    /// from a captured one: with replayed steps, every epoch's after the
    /// first; 0 where every evaluation ran eagerly.
    pub replayed_evaluations: usize,
    /// Wall-clock seconds before the first epoch: checks, uploads, the
    /// network's initialisation and the initial loss (which waits for the
    /// device, and so includes its first shader compilations).
    pub setup_seconds: f64,
}

impl TrainingHistory {
    /// Writes `epoch,objective_squared,cross_entropy,gamma,validation_f1,validation_cross_entropy,seconds,evaluation_seconds` as CSV.
    pub fn write_csv(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        writeln!(f, "epoch,objective_squared,cross_entropy,gamma,validation_f1,validation_cross_entropy,seconds,evaluation_seconds")?;
        for e in &self.epochs {
            let f1 = e.validation_f1.map_or(String::new(), |v| v.to_string());
            let ce = e.validation_cross_entropy.map_or(String::new(), |v| v.to_string());
            writeln!(f, "{},{},{},{},{},{},{},{}", e.epoch, e.objective_squared, e.cross_entropy, e.gamma, f1, ce, e.seconds, e.evaluation_seconds)?;
        }
        f.flush()
    }

    /// Mean seconds per epoch, leaving out the first epoch when there are
    /// more (it includes warm-up such as shader compilation).
    pub fn seconds_per_epoch(&self) -> f64 {
        let e = if self.epochs.len() > 1 { &self.epochs[1..] } else { &self.epochs[..] };
        if e.is_empty() { 0.0 } else { e.iter().map(|r| r.seconds).sum::<f64>() / e.len() as f64 }
    }
}
