//! Reproduction of the eKSVD paper's UCI Digit experiment (Table 1) and its
//! Dual-vs-Covariance timing (Table 2) on UCI Multiple Features.
//!
//! ```text
//! cargo run -p gramian-repro --example eksvd_mfeat [-- DATA_DIR] [--splits N] [--timing-only [--repeat N]] [--out FILE.png]
//! ```
//!
//! DATA_DIR defaults to `../shared/data/multiview/mfeat` (the CSVs
//! `mfeat-{fac,fou,kar,pix,zer,mor}.csv`). Protocol: stratified 60/20/20
//! splits, each view standardised on its training part, kernel widths,
//! number of components and the classifier's penalty chosen on validation, a
//! linear classifier downstream (the paper's linear SVM, one-vs-rest,
//! `gramian_repro::evaluation::linear_svm_classifier`), test macro-F1 in percent.
//! The choice is made by `gramian_repro::evaluation::choose_representation`:
//! the grids of the components (64, 128) and of `C` (0.1, 1) are extended
//! where the choice sits on their edge (a larger `k` is fitted again), and
//! the choices printed say where one still sits on an edge.

use std::time::Instant;

#[path = "psd_plot/mod.rs"]
mod psd_plot;

use clap::Parser;
use gramian_repro::datasets::mean_std;
use std::rc::Rc;

use gramian_repro::evaluation::{choose_representation, kernel_pca as kernel_pca_representation, linear_svm_classifier, score_choice, FitCache, MultiViewData, Representation, RepresentationFamily, SelectionGrid, SplitData};
use gramian::eksvd::{Eigensolver, EksvdParams, FeatureMap, FittedFeatureMap, Solver};
use gramian::MultiSource;
use gramian::Error;
use gramian::{Device, Kernel};
use nalgebra::DMatrix;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Kernel widths of the KPCA baseline: gamma = scale / d on the concatenated views.
const GAMMA_SCALES: [f64; 3] = [0.015, 0.06, 0.25];
/// Kernel widths of eKSVD: gamma_q = scale / d_q on each standardised view.
const EKSVD_GAMMA_SCALES: [f64; 3] = [1.0, 2.0, 4.0];
/// Components per source (nested: the leading components of one fit).
const COMPONENTS: [usize; 2] = [64, 128];
/// Penalties `C` of the linear SVM.
const CLASSIFIER_CS: [f64; 2] = [0.1, 1.0];
/// Nystrom features per view (landmarks: all training rows).
const D_PHI: usize = 512;

#[derive(Parser)]
#[command(about = "eKSVD on UCI Multiple Features: Table 1 (UCI Digit) and the Dual-vs-Covariance timing of Table 2")]
struct Args {
    /// Folder holding mfeat-*.csv (UCI Multiple Features).
    #[arg(default_value = "../shared/data/multiview/mfeat")]
    data_dir: String,
    /// Number of stratified 60/20/20 splits (seeds 0..N).
    #[arg(long, value_name = "N", default_value_t = 5)]
    splits: u64,
    /// Only the timing table (Table 2).
    #[arg(long)]
    timing_only: bool,
    /// Fits (and inference passes) per solver in the timing table: each
    /// cell gives the median and, in brackets, the minimum.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    repeat: u32,
    /// Instead of the tables: write a figure (PNG) of the first two eKSVD
    /// scores of the test samples of each view (fac, fou, kar), coloured by
    /// digit, from one fit on the first split (about 10 s on two cores).
    #[arg(long, value_name = "FILE.png")]
    out: Option<String>,
}

/// Colours of the ten digits (tab10).
const DIGIT_COLOURS: [(u8, u8, u8); 10] = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207)];

/// The figure of `--out`: per view, the test samples' first two eKSVD scores
/// (Covariance solver, the per-view Nystrom features of Table 1 with
/// `gamma_q = 1 / d_q`), one colour per digit.
fn score_figure(device: &Device, data: &MultiViewData, out: &str) -> AnyResult<()> {
    let split = data.split(0.6, 0.2, 0)?;
    let maps = fit_nystrom_maps(device, &split.train, EKSVD_GAMMA_SCALES[0])?;
    let model = EksvdParams::new(2).solver(Solver::Covariance(Eigensolver::Dense)).seed(3).fit_features(device, features(&maps, &split.train)?)?;
    let test = features(&maps, &split.test)?;
    let mut panels = Vec::new();
    for (q, name) in data.view_names.iter().enumerate() {
        let scores = model.transform_features(q, &test[q])?;
        let range = |c: usize| {
            let (lo, hi) = scores.column(c).iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
            let pad = 0.05 * (hi - lo).max(1e-12);
            (lo - pad, hi + pad)
        };
        let curves = DIGIT_COLOURS
            .iter()
            .enumerate()
            .map(|(digit, &(r, g, b))| psd_plot::Curve {
                points: (0..scores.nrows()).filter(|&i| split.test_labels[i] == digit).map(|i| (scores[(i, 0)], scores[(i, 1)])).collect(),
                colour: plotters::style::RGBColor(r, g, b),
                dots: true,
            })
            .collect();
        panels.push(psd_plot::Panel { title: format!("view {name}: test scores e1 (x), e2 (y)"), curves, x_range: range(0), y_range: range(1) });
    }
    psd_plot::draw_panels(out, &panels, (540, 380))?;
    println!("figure written to {out} ({} test samples, colour = digit 0-9)", split.test_labels.len());
    Ok(())
}

/// `median (min)` of `seconds`, scaled by `scale`, with `digits` decimals.
fn median_min(seconds: &mut [f64], scale: f64, digits: usize) -> String {
    seconds.sort_by(f64::total_cmp);
    let n = seconds.len();
    let median = if n % 2 == 1 { seconds[n / 2] } else { 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]) };
    format!("{:.digits$} ({:.digits$})", median * scale, seconds[0] * scale)
}

/// Baseline: RBF kernel PCA of the concatenated views (centred in feature
/// space), one kernel width per [`GAMMA_SCALES`]; `k` per source (`Q k`
/// components of the concatenation), fitted again when a larger `k` is
/// asked for.
fn kernel_pca_family<'f>(device: &'f Device, split: &'f SplitData) -> RepresentationFamily<'f> {
    let d: usize = split.train.sources().iter().map(|x| x.ncols()).sum();
    let q = split.train.n_sources();
    let k_all = split.train.source(0).nrows() - 1;
    let cache = FitCache::new();
    RepresentationFamily {
        kernels: GAMMA_SCALES.iter().map(|g| format!("g={g}")).collect(),
        forms: vec!["concatenation".into()],
        k_max: k_all / q,
        build: Box::new(move |kernel, _, k| {
            let fit = |k: usize| Ok((kernel_pca_representation(device, &Kernel::rbf(GAMMA_SCALES[kernel] / d as f64)?, split, k * q)?, k));
            let (rep, _) = cache.get(&kernel, k.max(*COMPONENTS.last().unwrap()), fit)?;
            Ok(rep.leading_columns(k * q))
        }),
    }
}

/// The first `k` components of every source from concatenated scores `[e^(1) ... e^(Q)]`.
fn leading_components(scores: &DMatrix<f64>, n_sources: usize, k_fit: usize, k: usize) -> DMatrix<f64> {
    let mut out = DMatrix::zeros(scores.nrows(), n_sources * k);
    for q in 0..n_sources {
        out.columns_mut(q * k, k).copy_from(&scores.columns(q * k_fit, k));
    }
    out
}

/// Per-view Nystrom maps (all training rows as landmarks) with `gamma_q =
/// scale / d_q`, fitted on the training views; `d_phi` starts at [`D_PHI`]
/// and drops to the lowest numerical rank among the views' kernel matrices
/// when one is rank-deficient (the 6-dimensional `mor` view is), since all
/// sources need the same `d_phi`.
fn fit_nystrom_maps(device: &Device, train: &MultiSource, scale: f64) -> AnyResult<Vec<FittedFeatureMap>> {
    let landmarks = train.source(0).nrows();
    let mut dim = D_PHI.min(landmarks);
    'retry: loop {
        let mut maps = Vec::new();
        for (q, x) in train.sources().iter().enumerate() {
            let map = FeatureMap::nystrom(Kernel::rbf(scale / x.ncols() as f64)?, dim, landmarks)?;
            match map.fit(device, x, q, 7) {
                Ok(m) => maps.push(m),
                Err(Error::RankDeficientKernel { rank, .. }) if rank > 0 && rank < dim => {
                    dim = rank;
                    continue 'retry;
                }
                Err(e) => return Err(e.into()),
            }
        }
        return Ok(maps);
    }
}

fn features(maps: &[FittedFeatureMap], data: &MultiSource) -> AnyResult<Vec<DMatrix<f64>>> {
    maps.iter().zip(data.sources()).map(|(m, x)| Ok(m.transform(x)?)).collect()
}

/// The per-view Nystrom features of a split for each of
/// [`EKSVD_GAMMA_SCALES`]: `[train, validation, test]` per width.
type SplitFeatures = Vec<[Vec<DMatrix<f64>>; 3]>;

fn split_features(device: &Device, split: &SplitData) -> AnyResult<SplitFeatures> {
    EKSVD_GAMMA_SCALES
        .iter()
        .map(|&scale| {
            let maps = fit_nystrom_maps(device, &split.train, scale)?;
            Ok([features(&maps, &split.train)?, features(&maps, &split.validation)?, features(&maps, &split.test)?])
        })
        .collect()
}

/// eKSVD scores of `solver` on the per-view Nystrom features, one kernel
/// width per [`EKSVD_GAMMA_SCALES`], the leading `k` components of every
/// source side by side; fitted with [`COMPONENTS`]' largest `k`, and again
/// when a larger `k` is asked for.
fn eksvd_family<'f>(device: &'f Device, features: Rc<SplitFeatures>, solver: Solver) -> RepresentationFamily<'f> {
    let q = features[0][0].len();
    let d_phi = features[0][0][0].ncols();
    let cache = FitCache::new();
    RepresentationFamily {
        kernels: EKSVD_GAMMA_SCALES.iter().map(|g| format!("g={g} d_phi={d_phi}")).collect(),
        forms: vec!["side by side".into()],
        k_max: d_phi,
        build: Box::new(move |kernel, _, k| {
            let fit = |k_fit: usize| {
                let parts = &features[kernel];
                let model = EksvdParams::new(k_fit).solver(solver).seed(7).fit_features(device, parts[0].clone())?;
                let scores = |phi: &[DMatrix<f64>]| -> Result<DMatrix<f64>, gramian::Error> {
                    let mut m = DMatrix::zeros(phi[0].nrows(), q * k_fit);
                    for (s, p) in phi.iter().enumerate() {
                        m.columns_mut(s * k_fit, k_fit).copy_from(&model.transform_features(s, p)?);
                    }
                    Ok(m)
                };
                Ok((Representation { train: scores(&parts[0])?, validation: scores(&parts[1])?, test: scores(&parts[2])? }, k_fit))
            };
            let (rep, k_fit) = cache.get(&kernel, k.max(*COMPONENTS.last().unwrap()), fit)?;
            let pick = |m: &DMatrix<f64>| leading_components(m, q, k_fit, k.min(k_fit));
            Ok(Representation { train: pick(&rep.train), validation: pick(&rep.validation), test: pick(&rep.test) })
        }),
    }
}

fn timing_table(device: &Device, data: &MultiViewData, repeat: u32) -> AnyResult<()> {
    let split = data.split(0.6, 0.2, 0)?;
    let n = split.train.source(0).nrows();
    let test_rows = split.test.source(0).nrows();
    println!("\nTable 2 (UCI Digit, views {}): N = {n}, d_phi = 512 random Fourier features, top 64 components, {} test rows; median (minimum) of {repeat} fits per solver", data.view_names.join("+"), test_rows);
    // Inference in the solver's own form (the dual form evaluates kernels
    // against every training sample, Eq. 7), and in the primal form, which
    // the Dual model also has: Eq. 5 recovers w_q from alpha^(p) at training.
    println!("| solver | training (s) | inference, solver's form (ms) | inference, primal form (ms) | paper training (s) | paper inference (ms) |");
    println!("|---|---|---|---|---|---|");
    let maps: Vec<FeatureMap> = split.train.sources().iter().map(|x| FeatureMap::random_fourier(1.0 / x.ncols() as f64, 512)).collect::<Result<_, _>>()?;
    let runs: [(&str, Solver, &str, &str); 4] = [
        ("Dual, dense (on the covariance form: Q d_phi < N)", Solver::Dual(Eigensolver::Dense), "6.180", "0.514"),
        ("Dual, Lanczos top-k", Solver::Dual(Eigensolver::Lanczos { tolerance: 1e-8, max_restarts: 1000 }), "6.180", "0.514"),
        ("Covariance, dense on H (order Q d_phi)", Solver::Covariance(Eigensolver::Dense), "0.917", "0.205"),
        ("Covariance, Lanczos top-k on H", Solver::Covariance(Eigensolver::Lanczos { tolerance: 1e-8, max_restarts: 1000 }), "0.917", "0.205"),
    ];
    for (name, solver, paper_train, paper_inf) in runs {
        let (mut train, mut solver_form, mut primal_form) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..repeat {
            let start = Instant::now();
            let model = EksvdParams::new(64).feature_maps(maps.clone()).solver(solver).seed(3).fit(device, &split.train)?;
            train.push(start.elapsed().as_secs_f64());
            let start = Instant::now();
            for q in 0..split.test.n_sources() {
                // The dual form evaluates kernels against all training
                // samples, the primal form only the explicit features.
                let scores = match solver {
                    Solver::Dual(_) => model.transform_dual(q, split.test.source(q))?,
                    Solver::Covariance(_) => model.transform_source(q, split.test.source(q))?,
                };
                std::hint::black_box(scores);
            }
            solver_form.push(start.elapsed().as_secs_f64());
            let start = Instant::now();
            for q in 0..split.test.n_sources() {
                std::hint::black_box(model.transform_source(q, split.test.source(q))?);
            }
            primal_form.push(start.elapsed().as_secs_f64());
        }
        println!(
            "| {name} | {} | {} | {} | {paper_train} | {paper_inf} |",
            median_min(&mut train, 1.0, 3),
            median_min(&mut solver_form, 1e3, 2),
            median_min(&mut primal_form, 1e3, 2)
        );
    }
    Ok(())
}

fn main() -> AnyResult<()> {
    // `RUST_LOG=gramian=debug` shows the eigensolvers' restarts and product
    // columns.
    env_logger::init();
    let args = Args::parse();
    let (dir, splits, timing_only, repeat) = (args.data_dir, args.splits, args.timing_only, args.repeat);
    if !std::path::Path::new(&dir).is_dir() {
        return Err(format!("data folder {dir} not found: pass the folder holding mfeat-*.csv (UCI Multiple Features)").into());
    }
    let device = Device::auto();
    println!("device: {}", device.describe());
    let three = MultiViewData::load_csv_views(&dir, "mfeat-", &["fac", "fou", "kar"])?;
    if let Some(out) = &args.out {
        return score_figure(&device, &three, out);
    }
    if timing_only {
        return timing_table(&device, &three, repeat);
    }
    let six = MultiViewData::load_csv_views(&dir, "mfeat-", &["fac", "fou", "kar", "pix", "zer", "mor"])?;
    println!("\nTable 1 (UCI Digit): test macro-F1 %, mean +- std over {splits} stratified 60/20/20 splits");
    println!("| views | concatenation | RBF KPCA | Dual eKSVD | Covariance eKSVD | seconds |");
    println!("|---|---|---|---|---|---|");
    for data in [&three, &six] {
        let start = Instant::now();
        let mut f1 = vec![Vec::new(); 4];
        let mut chosen = vec![Vec::new(); 4];
        for seed in 0..splits {
            let split = data.split(0.6, 0.2, seed)?;
            let feats = Rc::new(split_features(&device, &split)?);
            let concatenation = Representation { train: split.train.concatenated()?, validation: split.validation.concatenated()?, test: split.test.concatenated()? };
            let families = [
                RepresentationFamily::single("views side by side", concatenation),
                kernel_pca_family(&device, &split),
                eksvd_family(&device, feats.clone(), Solver::Dual(Eigensolver::Lanczos { tolerance: 1e-8, max_restarts: 1000 })),
                eksvd_family(&device, feats, Solver::Covariance(Eigensolver::Dense)),
            ];
            // The views are standardised on their training part; the
            // representations are standardised column-wise before the SVM.
            let grid = SelectionGrid { components: COMPONENTS.to_vec(), classifier_cs: CLASSIFIER_CS.to_vec(), scalings: vec![true] };
            for (m, family) in families.iter().enumerate() {
                let t = Instant::now();
                let choice = choose_representation(&[(&split, family)], &grid, &linear_svm_classifier)?;
                if let Some(w) = &choice.outcome.warning {
                    eprintln!("WARNING: {w}");
                }
                let (_, test_f1) = score_choice(&split, family, &grid.scalings, &choice.point, &linear_svm_classifier)?;
                eprintln!("  method {m}: {} points, selection {:.1} s", choice.outcome.evaluated, t.elapsed().as_secs_f64());
                f1[m].push(100.0 * test_f1);
                chosen[m].push(choice.label);
            }
            eprintln!("{} split {seed}: {:?}", data.view_names.join("+"), f1.iter().map(|v| v.last().copied().unwrap_or(0.0)).collect::<Vec<_>>());
        }
        let cell = |v: &[f64]| {
            let (m, s) = mean_std(v);
            format!("{m:.2} +- {s:.2}")
        };
        println!(
            "| {} | {} | {} | {} | {} | {:.0} |",
            data.view_names.join("+"),
            cell(&f1[0]),
            cell(&f1[1]),
            cell(&f1[2]),
            cell(&f1[3]),
            start.elapsed().as_secs_f64()
        );
        for (name, c) in ["concatenation", "KPCA", "Dual", "Covariance"].iter().zip(&chosen) {
            eprintln!("  chosen for {name}: {}", c.join("; "));
        }
    }
    println!("| paper, 3 views | - | 97.36 (KPCA) | 97.80 | - | |");
    println!("| reference here (linear SVM), 6 views | 98.55 +- 0.24 | 98.10 +- 0.49 | - | - | |");
    timing_table(&device, &three, repeat)?;
    Ok(())
}
