//! Neural eKSVD (Section 3.4, supervised) on 3Sources, the paper's Table 1
//! row (Neural eKSVD: 91.08), beside the concatenation baseline of
//! `eksvd_3sources` on the same splits.
//!
//! ```text
//! cargo run -p gramian-repro --features neural --example eksvd_neural_3sources -- [DATA_DIR] [--splits N] [--out DIR] \
//!     [--candidates k:eta:lr[:wd[:activation]],...] [--epochs E] [--dropout P] [--stopping f1|ce] [--batch B] \
//!     [--hidden W1,W2,...|''] [--dphi D] [--patience E] [--schedule constant|cosine] [--ema DECAY] [--gamma-init G] \
//!     [--activation relu|tanh|gelu] [--input-noise S] [--refit] [--cv F]
//! ```
//!
//! Protocol of `eksvd_3sources`: stratified 60/20/20 splits with seeds
//! `0..N`, each view log-scaled and cosine-normalised per story. Neural
//! eKSVD: one feature map per view, by default a single layer
//! `d_q -> d_phi = 64` with ReLU (`--hidden 128` adds a hidden layer: 102
//! training stories of 3000-3600 terms overfit it, 86.3 +- 8.2 against
//! 88.4 +- 2.9 on five splits), loss `sum_k (J_k / N)^2 + eta L_CE`, AdamW,
//! batches of 32, at most 200 epochs, early stopping on validation macro-F1
//! (ties: validation cross-entropy); its hyper-parameters are picked from
//! [`CANDIDATES`] on validation, and the test macro-F1 of its own linear
//! head and of a linear SVM on its learned scores are reported. n = 169
//! makes an epoch cheap on the CPU (burn's Flex backend, 0.024-0.028 s on 2 cores). The
//! curves of Figure 1 (`sum_k (J_k / N)^2` and the cross-entropy per epoch)
//! of split 0's chosen run go to `--out` (default `target/neural_eksvd/`).
//!
//! `--refit` adds rows refitted on the training and validation rows
//! together with the choices made on validation; `--cv F` adds rows whose
//! choices (candidate, epochs, the SVM penalties) are made by `F`-fold
//! cross-validation over those rows (`SplitData::cross_validation_folds`),
//! then refitted on them. The test rows are only scored.

use std::time::Instant;

use clap::Parser;

#[path = "neural_cli/mod.rs"]
mod neural_cli;
#[path = "neural_cli/curves.rs"]
mod neural_curves;
#[path = "psd_plot/mod.rs"]
mod psd_plot;

use gramian_repro::datasets::{load_three_sources, mean_std};
use gramian_repro::evaluation::{linear_svm_classifier, select_on_validation_scaled, MultiViewData, Representation};
use gramian::eksvd::neural::{Activation, EarlyStopping, LearningRateSchedule, NeuralBackend};
use neural_cli::{AnyResult, Candidate, TableArgs, Training};

/// Candidates `(components k, eta, learning rate, weight decay)`, chosen on
/// validation (`--candidates` replaces them).
const CANDIDATES: [Candidate; 4] = [Candidate::new(16, 1.0, 1e-3, 0.05), Candidate::new(16, 1.0, 3e-3, 0.05), Candidate::new(16, 0.1, 1e-3, 0.05), Candidate::new(32, 1.0, 1e-3, 0.05)];
/// Penalties `C` of the concatenation baseline's linear SVM.
const CLASSIFIER_CS: [f64; 4] = [0.1, 1.0, 10.0, 100.0];

/// The training settings of this example (`--epochs` etc. replace them).
fn default_training() -> Training {
    Training { backend: NeuralBackend::Cpu, epochs: 200, dropout: 0.0, stopping: EarlyStopping::ValidationF1, batch: 32, hidden: Vec::new(), d_phi: 64, patience: 30, schedule: LearningRateSchedule::Constant, ema: 0.0, gamma_init: 1.0, activation: Activation::Relu, input_noise: 0.0 }
}

#[derive(Parser)]
#[command(about = "Neural eKSVD (supervised) on 3Sources (Table 1) beside concatenation, with training curves", after_help = neural_cli::defaults_help(&default_training(), &CANDIDATES))]
struct Args {
    /// Folder holding the 3Sources files.
    #[arg(default_value = "../shared/data/multiview/3sources")]
    data_dir: String,
    #[command(flatten)]
    table: TableArgs,
}

fn main() -> AnyResult<()> {
    // burn's CPU backend allocates per operation: keep freed memory for reuse.
    gramian_repro::process::reuse_freed_memory();
    let args = Args::parse();
    let (dir, splits, out) = (args.data_dir, args.table.splits, args.table.out.clone());
    let refit = args.table.refit;
    let t = args.table.training.resolve(default_training());
    let candidates = args.table.candidates.unwrap_or_else(|| CANDIDATES.to_vec());
    let text = load_three_sources(&dir)?.log_cosine_normalized()?;
    let data = MultiViewData { view_names: text.view_names, views: text.views, labels: text.labels };
    let start = Instant::now();
    let (mut concat, mut neural_f1, mut svm_f1, mut chosen) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut refit_concat, mut refit_f1, mut refit_svm_f1) = (Vec::new(), Vec::new(), Vec::new());
    let mut cross_validated: [Vec<f64>; 4] = Default::default();
    for seed in 0..splits {
        let split = data.split_unscaled(0.6, 0.2, seed)?;
        let rep = Representation { train: split.train.concatenated()?, validation: split.validation.concatenated()?, test: split.test.concatenated()? };
        let concat_choice = select_on_validation_scaled(&split, &[("-", rep)], &CLASSIFIER_CS, &linear_svm_classifier, false)?;
        concat.push(100.0 * concat_choice.test_f1);
        let fits = neural_cli::fit_candidates(&split, &candidates, &t, seed, false)?;
        if let Some(folds) = args.table.cv {
            let scores = neural_cli::cross_validated_refit(&split, folds as usize, &fits, &candidates, &t, seed, &CLASSIFIER_CS, false)?;
            for (column, score) in cross_validated.iter_mut().zip(scores) {
                column.push(100.0 * score);
            }
        }
        let run = neural_cli::best_on_validation(fits)?;
        let label = format!("{}, gamma {:.3e}", run.label, run.model.gamma());
        neural_f1.push(100.0 * run.test_f1);
        let (svm, svm_c) = neural_cli::svm_on_scores(&split, &run.model)?;
        svm_f1.push(100.0 * svm);
        if refit {
            let (head, svm) = neural_cli::refit_on_train_and_validation(&split, run.candidate, run.model.best_epoch(), svm_c, &t, seed)?;
            refit_f1.push(100.0 * head);
            refit_svm_f1.push(100.0 * svm);
            refit_concat.push(100.0 * neural_cli::svm_refit_f1(&split, neural_cli::concatenated_train_and_validation(&split)?, split.test.concatenated()?, concat_choice.classifier_c, false)?);
            eprintln!("split {seed}: refit on training + validation for {} epochs: own head {:.2}, scores + SVM {:.2}; concatenation refit {:.2}", run.model.best_epoch().max(1), 100.0 * head, 100.0 * svm, refit_concat.last().unwrap());
        }
        eprintln!("split {seed}: concatenation {:.2}, Neural eKSVD {:.2}, its scores + SVM {:.2} ({label}) ({:.0} s)", concat.last().unwrap(), neural_f1.last().unwrap(), svm_f1.last().unwrap(), start.elapsed().as_secs_f64());
        if seed == 0 {
            neural_curves::write_curves(run.model.history(), std::path::Path::new(&out), "curves_3sources_split0")?;
        }
        chosen.push(label);
    }
    let cell = |v: &[f64]| {
        let (m, s) = mean_std(v);
        format!("{m:.2} +- {s:.2}")
    };
    println!("\nTable 1 (3Sources): test macro-F1 %, mean +- std over {splits} stratified 60/20/20 splits; candidates (k:eta:lr:wd[:activation]) {}, {t:?}", neural_cli::candidates_flag(&candidates));
    println!("| method | ours | paper |");
    println!("|---|---|---|");
    println!("| concatenation + linear SVM | {} | - |", cell(&concat));
    println!("| Neural eKSVD (supervised, own head) | {} | 91.08 |", cell(&neural_f1));
    println!("| Neural eKSVD scores + linear SVM | {} | - |", cell(&svm_f1));
    if refit {
        println!("| concatenation + linear SVM, refit on training + validation | {} | - |", cell(&refit_concat));
        println!("| Neural eKSVD refit on training + validation, own head | {} | - |", cell(&refit_f1));
        println!("| Neural eKSVD refit on training + validation, scores + linear SVM | {} | - |", cell(&refit_svm_f1));
    }
    if let Some(folds) = args.table.cv {
        let [c, h, s, e] = &cross_validated;
        println!("| concatenation + linear SVM, {folds}-fold cross-validation, refit | {} | - |", cell(c));
        println!("| Neural eKSVD, {folds}-fold cross-validation, refit, own head | {} | - |", cell(h));
        println!("| Neural eKSVD, {folds}-fold cross-validation, refit, scores + linear SVM | {} | - |", cell(s));
        println!("| Neural eKSVD, the {folds} cross-validation models of the chosen candidate together (mean softmax) | {} | - |", cell(e));
    }
    println!("({:.0} s in all; chosen: {})", start.elapsed().as_secs_f64(), chosen.join("; "));
    Ok(())
}
