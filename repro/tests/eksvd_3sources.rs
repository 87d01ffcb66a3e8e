//! The 3Sources loader (real files and malformed ones) and one small seeded
//! Dual eKSVD fit on a 3Sources split with the linear SVM downstream.
//!
//! The real data is read from `$GRAMIAN_DATA_DIR/multiview/3sources`
//! (default `../shared/data` beside the repository). Without it these tests
//! print SKIPPED, unless `GRAMIAN_REQUIRE_DATA=1` makes that a failure.

use std::path::PathBuf;

use gramian_repro::datasets::{load_term_count_views, load_three_sources, DatasetError, TermCountError, TermCountViews};
use gramian_repro::evaluation::{linear_svm_classifier, select_on_validation, select_on_validation_scaled, MultiViewData, Representation};
use gramian::eksvd::{Eigensolver, EksvdParams, FeatureMap, Solver};
use gramian::{Device, Kernel};
use nalgebra::DMatrix;

fn three_sources() -> Option<TermCountViews> {
    let root = std::env::var("GRAMIAN_DATA_DIR").map(PathBuf::from).unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"));
    match load_three_sources(root.join("multiview/3sources")) {
        Ok(d) => Some(d),
        Err(TermCountError::Dataset(DatasetError::Missing(p))) if std::env::var("GRAMIAN_REQUIRE_DATA").as_deref() != Ok("1") => {
            eprintln!("SKIPPED: {} not found; set GRAMIAN_DATA_DIR, or GRAMIAN_REQUIRE_DATA=1 to make this a failure", p.display());
            None
        }
        Err(e) => panic!("3Sources: {e}"),
    }
}

#[test]
fn three_sources_loads_169_stories_in_three_views() {
    let Some(data) = three_sources() else { return };
    assert_eq!(data.view_names, ["bbc", "guardian", "reuters"]);
    let dims: Vec<(usize, usize)> = data.views.iter().map(|v| v.shape()).collect();
    assert_eq!(dims, [(169, 3560), (169, 3631), (169, 3068)]);
    let mut counts = [0usize; 6];
    for &l in &data.labels {
        counts[l] += 1;
    }
    assert_eq!(counts, [56, 21, 11, 18, 51, 12]);
    assert_eq!(data.terms[0].len(), 3560);
    let scaled = data.log_cosine_normalized().unwrap();
    for v in &scaled.views {
        for row in v.row_iter() {
            assert!((row.norm() - 1.0).abs() < 1e-12);
        }
    }
}

/// Writes `{prefix}{name}.csv` files into a fresh folder.
fn write_views(tag: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gramian-term-counts-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, body) in files {
        std::fs::write(dir.join(format!("v-{name}.csv")), body).unwrap();
    }
    dir
}

#[test]
fn malformed_views_are_typed_errors() {
    let good_a = "t0,t1,label\n1,0,0\n0,2,1\n3,1,1\n";
    let good_b = "u0,label\n1,0\n1,1\n2,1\n";
    let ok = load_term_count_views(write_views("ok", &[("a", good_a), ("b", good_b)]), "v-", &["a", "b"]).unwrap();
    assert_eq!((ok.labels.clone(), ok.views[1].shape()), (vec![0, 1, 1], (3, 1)));

    type Case = (&'static str, &'static str, fn(&TermCountError) -> bool);
    let cases: [Case; 5] = [
        ("short", "u0,label\n1,0\n1,1\n", |e| matches!(e, TermCountError::StoryCount { expected: 3, found: 2, .. })),
        ("relabel", "u0,label\n1,0\n1,0\n2,1\n", |e| matches!(e, TermCountError::LabelMismatch { row: 1, expected: 1, found: 0, .. })),
        ("empty", "u0,label\n1,0\n0,1\n2,1\n", |e| matches!(e, TermCountError::EmptyStory { row: 1, .. })),
        ("negative", "u0,label\n1,0\n-1,1\n2,1\n", |e| matches!(e, TermCountError::NotACount { row: 1, column: 0, .. })),
        ("label", "u0,label\n1,0\n1,1.5\n2,1\n", |e| matches!(e, TermCountError::BadLabel { row: 1, .. })),
    ];
    for (tag, b, expected) in cases {
        let err = load_term_count_views(write_views(tag, &[("a", good_a), ("b", b)]), "v-", &["a", "b"]).unwrap_err();
        assert!(expected(&err), "{tag}: {err}");
    }
    let missing = load_term_count_views(write_views("missing", &[("a", good_a)]), "v-", &["a", "b"]).unwrap_err();
    assert!(matches!(missing, TermCountError::Dataset(DatasetError::Missing(_))));
    assert!(matches!(load_term_count_views(std::env::temp_dir(), "v-", &[]), Err(TermCountError::NoViews)));
}

fn concatenate(views: &[DMatrix<f64>]) -> DMatrix<f64> {
    let cols: usize = views.iter().map(|x| x.ncols()).sum();
    let mut out = DMatrix::zeros(views[0].nrows(), cols);
    let mut c0 = 0;
    for x in views {
        out.columns_mut(c0, x.ncols()).copy_from(x);
        c0 += x.ncols();
    }
    out
}

/// Split 0 (seed 0) of the example's protocol at fixed hyper-parameters:
/// linear (cosine) Nystrom maps with all training stories as landmarks,
/// Dual eKSVD with 16 components per source, the linear SVM at C = 0.1.
/// Measured: test macro-F1 0.839 (and 0.871 for concatenation at C = 1);
/// the floors are conservative. Deterministic: no random draws but the SVM's
/// seeded coordinate order.
#[test]
fn dual_eksvd_on_one_3sources_split_beats_a_floor() {
    let Some(text) = three_sources() else { return };
    let text = text.log_cosine_normalized().unwrap();
    let data = MultiViewData { view_names: text.view_names, views: text.views, labels: text.labels };
    let split = data.split_unscaled(0.6, 0.2, 0).unwrap();
    let device = Device::cpu();
    let n = split.train.source(0).nrows();
    let maps: Vec<_> = split
        .train
        .sources()
        .iter()
        .enumerate()
        .map(|(q, x)| FeatureMap::nystrom(Kernel::linear(), n - 5, n).unwrap().fit(&device, x, q, 7).unwrap())
        .collect();
    let feats = |parts: &gramian::MultiSource| -> Vec<DMatrix<f64>> { maps.iter().zip(parts.sources()).map(|(m, x)| m.transform(x).unwrap()).collect() };
    let model = EksvdParams::new(16).solver(Solver::Dual(Eigensolver::Dense)).seed(7).fit_features(&device, feats(&split.train)).unwrap();
    let scores = |parts: &gramian::MultiSource| -> DMatrix<f64> {
        let per_source: Vec<DMatrix<f64>> = feats(parts).iter().enumerate().map(|(q, p)| model.transform_features(q, p).unwrap()).collect();
        concatenate(&per_source)
    };
    let rep = Representation { train: scores(&split.train), validation: scores(&split.validation), test: scores(&split.test) };
    let dual = select_on_validation(&split, &[("dual", rep)], &[0.1], &linear_svm_classifier).unwrap();
    eprintln!("Dual eKSVD test macro-F1 {:.4}", dual.test_f1);
    assert!(dual.test_f1 > 0.75, "Dual eKSVD test macro-F1 {}", dual.test_f1);

    let concat = Representation { train: concatenate(split.train.sources()), validation: concatenate(split.validation.sources()), test: concatenate(split.test.sources()) };
    let baseline = select_on_validation_scaled(&split, &[("concat", concat)], &[1.0], &linear_svm_classifier, false).unwrap();
    eprintln!("concatenation test macro-F1 {:.4}", baseline.test_f1);
    assert!(baseline.test_f1 > 0.75, "concatenation test macro-F1 {}", baseline.test_f1);
}
