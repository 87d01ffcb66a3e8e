//! Reproduction of Tables 1 and 2 of the mklaren paper on the DELVE
//! regression sets: test RMSE of mklaren, ICD, CSI, Nystrom and uniform
//! kernel ridge regression at ranks K = 2..10 per kernel (mklaren: 7K total).
//!
//! Protocol: up to 1000 rows sampled, 5 random 60/20/20 splits, inputs
//! standardised on the training part, 7 Gaussian kernels gamma = 2^-3..2^3,
//! lambda chosen on validation from 10^-3..10^3 (the validation RMSE of fits
//! on the training part, [`gramian::estimator::cross_validate`] with
//! [`gramian::estimator::Splits::holdout`]), look-ahead delta = 10.
//!
//! Usage: `cargo run -p gramian-repro --example mklaren_regression [DATA_DIR] [MAX_ROWS] [SPLITS]`
//! (default `../shared/data/regression`, 1000, 5).

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use gramian_repro::datasets::{mean_std, LabelColumn, random_split, read_csv_table, rmse, select_entries, select_rows, Standardizer};
use gramian::estimator::{cross_validate, Fit, Predict, Samples, Splits, Supervised};
use gramian::mklaren::{FullKernelRidgeParams, KernelCombination, LowRankMethod, LowRankRidgeParams, MklarenParams};
use gramian::{Device, Kernel};
use nalgebra::{DMatrix, DVector};
use rand::seq::index::sample;
use rand::{rngs::StdRng, SeedableRng};

const DATASETS: [&str; 4] = ["boston", "abalone", "bank-8fm", "comp-activ"];
const RANKS: [usize; 5] = [2, 4, 6, 8, 10];
const METHODS: [&str; 5] = ["mklaren", "icd", "csi", "nystrom", "uniform"];

#[derive(Parser)]
#[command(about = "mklaren and the baselines on the DELVE regression sets: test RMSE at ranks 2..10 per kernel (Tables 1 and 2)")]
struct Args {
    /// Folder holding boston.csv, abalone.csv, bank-8fm.csv, comp-activ.csv.
    #[arg(default_value = "../shared/data/regression")]
    data_dir: PathBuf,
    /// Most rows sampled from each data set.
    #[arg(default_value_t = 1000)]
    max_rows: usize,
    /// Number of random 60/20/20 splits.
    #[arg(default_value_t = 5)]
    splits: u64,
}

/// The lambdas searched: 10^-3..10^3.
/// Test RMSE `(mean, std)` over splits, per method and rank.
type MethodSummary = Vec<Vec<(f64, f64)>>;

const LAMBDAS: [i32; 7] = [-3, -2, -1, 0, 1, 2, 3];

/// One random split: training and validation samples (standardised) with the
/// holdout between them, and the test part.
struct Split {
    data: Supervised,
    holdout: Splits,
    train: Supervised,
    test: Supervised,
}

/// Fits `params(lambda)` for every lambda on the training part, keeps the one
/// with the lowest validation RMSE (refitted on the training part), returns
/// its test RMSE.
fn select_lambda<P>(device: &Device, split: &Split, params: impl Fn(f64) -> P) -> Result<f64, gramian::Error>
where
    P: Fit<Supervised>,
    P::Fitted: Predict<DMatrix<f64>, Output = DVector<f64>>,
{
    let candidates: Vec<P> = LAMBDAS.iter().map(|&e| params(10f64.powi(e))).collect();
    let cv = cross_validate(device, &candidates, &split.data, &split.holdout, |m: &P::Fitted, held: &Supervised| Ok(-rmse(&held.y, &m.predict(&held.x)?)))?;
    let model = candidates[cv.best].fit(device, &split.train)?;
    Ok(rmse(&split.test.y, &model.predict(&split.test.x)?))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let (dir, max_rows, splits) = (args.data_dir, args.max_rows, args.splits);
    if !dir.is_dir() {
        return Err(format!("data folder {} not found: pass the folder with {}.csv etc. as the first argument", dir.display(), DATASETS.join(".csv, ")).into());
    }
    let device = Device::auto();
    let kernels: Vec<Kernel> = (-3..=3).map(|e| Kernel::rbf(2f64.powi(e))).collect::<Result<_, _>>()?;
    let p = kernels.len();
    println!("mklaren reproduction: {} kernels, delta = 10, {splits} splits, up to {max_rows} rows, device {}", p, device.describe());
    // results[dataset][method][rank] = test RMSEs over splits (uniform: one entry per split, rank-independent)
    let mut table: Vec<(String, MethodSummary)> = Vec::new();
    for name in DATASETS {
        let path = dir.join(format!("{name}.csv"));
        let data = match read_csv_table(&path, LabelColumn::Last) {
            Ok(t) => t,
            Err(e) => {
                println!("skipping {name}: {e}");
                continue;
            }
        };
        let start = Instant::now();
        let n_all = data.features.nrows();
        let rows = sample(&mut StdRng::seed_from_u64(2017), n_all, max_rows.min(n_all)).into_vec();
        let x = select_rows(&data.features, &rows)?;
        let y = select_entries(data.target()?, &rows)?;
        let mut scores = vec![vec![Vec::new(); RANKS.len()]; METHODS.len()];
        for seed in 0..splits {
            let s = random_split(x.nrows(), 0.6, 0.2, seed)?;
            let xtrain = select_rows(&x, &s.train)?;
            let scaler = Standardizer::fit(&xtrain);
            // Standardising is per row: the whole sample at once, then the parts.
            let all = Supervised::new(scaler.transform(&x), y.clone())?;
            let split = Split { holdout: Splits::holdout(s.train.clone(), s.validation.clone())?, train: all.select(&s.train)?, test: all.select(&s.test)?, data: all };
            let uniform = select_lambda(&device, &split, |l| FullKernelRidgeParams::new(KernelCombination::Uniform).lambda(l).kernels(&kernels))?;
            for (r, &rank) in RANKS.iter().enumerate() {
                scores[0][r].push(select_lambda(&device, &split, |l| MklarenParams::new(p * rank).lookahead(10).lambda(l).kernels(&kernels))?);
                let methods = [LowRankMethod::Icd, LowRankMethod::Csi { lookahead: 10, kappa: 0.5 }, LowRankMethod::Nystrom { seed }];
                for (k, method) in methods.into_iter().enumerate() {
                    scores[k + 1][r].push(select_lambda(&device, &split, |l| LowRankRidgeParams::new(method, rank).lambda(l).kernels(&kernels))?);
                }
                scores[4][r].push(uniform);
            }
        }
        let summary: Vec<Vec<(f64, f64)>> = scores.iter().map(|m| m.iter().map(|v| mean_std(v)).collect()).collect();
        println!("\n{name} (n = {}, d = {}), {:.1} s", x.nrows(), x.ncols(), start.elapsed().as_secs_f64());
        print!("{:>8}", "K");
        for m in METHODS {
            print!(" {m:>17}");
        }
        println!();
        for (r, rank) in RANKS.iter().enumerate() {
            print!("{rank:>8}");
            let best = (0..4).map(|m| summary[m][r].0).fold(f64::INFINITY, f64::min);
            for (m, per_rank) in summary.iter().enumerate().take(METHODS.len()) {
                let (mean, std) = per_rank[r];
                let mark = if m < 4 && mean == best { "*" } else { " " };
                print!(" {:>9.3} +- {:<4.3}{mark}", mean, std);
            }
            println!();
        }
        table.push((name.to_string(), summary));
    }

    println!("\nTable 1 summary: best low-rank method per data set and K (* = mklaren best)");
    for (name, summary) in &table {
        let wins: Vec<String> = RANKS
            .iter()
            .enumerate()
            .map(|(r, k)| {
                let best = (0..4).min_by(|&a, &b| summary[a][r].0.total_cmp(&summary[b][r].0)).unwrap();
                format!("K={k}: {}{}", METHODS[best], if best == 0 { "*" } else { "" })
            })
            .collect();
        println!("{name:>12}: {}", wins.join(", "));
    }
    println!("\nTable 2: smallest K per kernel with mean test RMSE within one std of uniform ('-' = never)");
    print!("{:>12}", "data set");
    for m in &METHODS[..4] {
        print!(" {m:>8}");
    }
    println!();
    for (name, summary) in &table {
        print!("{name:>12}");
        let (u_mean, u_std) = summary[4][0];
        for per_rank in summary.iter().take(4) {
            let k = RANKS.iter().enumerate().find(|(r, _)| per_rank[*r].0 <= u_mean + u_std).map(|(_, k)| k.to_string());
            print!(" {:>8}", k.unwrap_or_else(|| "-".into()));
        }
        println!();
    }
    Ok(())
}
