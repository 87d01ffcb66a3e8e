//! Memory of a Dual eKSVD fit on 3Sources with sparse (CSR) views against
//! the same fit on dense views: run it under `/usr/bin/time -v` and read
//! "Maximum resident set size".
//!
//! ```text
//! cargo run -p gramian-repro --example eksvd_sparse_memory [-- DATA_DIR] [--dense] [--lanczos]
//! /usr/bin/time -v target/debug/examples/eksvd_sparse_memory [--dense]
//! ```
//!
//! DATA_DIR defaults to `../shared/data/multiview/3sources`. Each view's term
//! counts are read straight into the chosen layout (a CSR matrix, or a
//! dense one with `--dense`; the other layout is never built), log-scaled
//! and cosine-normalised per story (`log(1 + counts)` over its L2 norm, as
//! `eksvd_3sources` does). The fit: Dual eKSVD (Eq. 4), dense eigensolver
//! (or Lanczos with `--lanczos`), per-view Nystrom features of the RBF
//! kernel `exp(-0.5 ||x - z||^2)` with all 169 stories as landmarks and 120
//! features, 20 components, on the CPU. It prints the views' shapes and
//! stored entries, the leading eigenvalues and the fit's wall time.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use gramian::eksvd::{Eigensolver, EksvdParams, FeatureMap, Solver};
use gramian::sparse::CsrMatrix;
use gramian::{AsMatrix, Device, Kernel, MultiSource};
use nalgebra::DMatrix;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Parser)]
#[command(about = "Peak memory of a Dual eKSVD fit on 3Sources, sparse or dense views")]
struct Args {
    /// Folder holding the 3Sources files.
    #[arg(default_value = "../shared/data/multiview/3sources")]
    data_dir: PathBuf,
    /// Dense views instead of CSR.
    #[arg(long)]
    dense: bool,
    /// The Lanczos eigensolver instead of the dense one.
    #[arg(long)]
    lanczos: bool,
}

/// One view as per-story sparse rows (column, value), log-scaled and
/// cosine-normalised, and its number of term columns (the label column,
/// the last one, dropped).
fn read_view(path: &PathBuf) -> AnyResult<(Vec<Vec<(usize, f64)>>, usize)> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e} (is the 3Sources folder at this path?)", path.display()))?;
    let mut lines = text.lines();
    let header = lines.next().ok_or("empty file")?;
    let terms = header.split(',').count().checked_sub(1).ok_or("no columns")?;
    let mut rows = Vec::new();
    for (i, line) in lines.enumerate() {
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() != terms + 1 {
            return Err(format!("{}: row {i} has {} fields, expected {}", path.display(), fields.len(), terms + 1).into());
        }
        let mut row = Vec::new();
        for (c, f) in fields[..terms].iter().enumerate() {
            let count: f64 = f.trim().parse()?;
            if count != 0.0 {
                row.push((c, count.ln_1p()));
            }
        }
        let norm = row.iter().map(|(_, v)| v * v).sum::<f64>().sqrt();
        if norm > 0.0 {
            row.iter_mut().for_each(|(_, v)| *v /= norm);
        }
        rows.push(row);
    }
    Ok((rows, terms))
}

fn csr(rows: &[Vec<(usize, f64)>], cols: usize) -> AnyResult<CsrMatrix<f64>> {
    let mut offsets = vec![0];
    let (mut indices, mut values) = (Vec::new(), Vec::new());
    for row in rows {
        for &(c, v) in row {
            indices.push(c);
            values.push(v);
        }
        offsets.push(indices.len());
    }
    Ok(CsrMatrix::try_from_csr_data(rows.len(), cols, offsets, indices, values)?)
}

fn dense(rows: &[Vec<(usize, f64)>], cols: usize) -> DMatrix<f64> {
    let mut m = DMatrix::zeros(rows.len(), cols);
    for (i, row) in rows.iter().enumerate() {
        for &(c, v) in row {
            m[(i, c)] = v;
        }
    }
    m
}

fn main() -> AnyResult<()> {
    let args = Args::parse();
    let mut views: Vec<Box<dyn AsMatrix<Elem = f64>>> = Vec::new();
    for name in ["bbc", "guardian", "reuters"] {
        let (rows, cols) = read_view(&args.data_dir.join(format!("3sources-{name}.csv")))?;
        let nnz: usize = rows.iter().map(Vec::len).sum();
        println!("{name}: {} x {cols}, {nnz} stored entries ({:.2} %)", rows.len(), 100.0 * nnz as f64 / (rows.len() * cols) as f64);
        if args.dense {
            views.push(Box::new(dense(&rows, cols)));
        } else {
            views.push(Box::new(csr(&rows, cols)?));
        }
    }
    let data = MultiSource::paired(views)?;
    let eigensolver = if args.lanczos { Eigensolver::lanczos() } else { Eigensolver::Dense };
    let params = EksvdParams::new(20).feature_map(FeatureMap::nystrom(Kernel::rbf(0.5)?, 120, 169)?).solver(Solver::Dual(eigensolver)).seed(7);
    let start = Instant::now();
    let model = params.fit(&Device::cpu(), &data)?;
    let elapsed = start.elapsed();
    let values: Vec<String> = model.eigenvalues().iter().take(5).map(|v| format!("{v:.6}")).collect();
    println!("{} views, Dual eKSVD ({}): leading eigenvalues {}; fit {:.3} s", if args.dense { "dense" } else { "sparse" }, if args.lanczos { "Lanczos" } else { "dense eigensolver" }, values.join(" "), elapsed.as_secs_f64());
    Ok(())
}
