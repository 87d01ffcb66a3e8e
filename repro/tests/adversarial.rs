//! Adversarial inputs to the data loaders, splits, metrics and the
//! evaluation harness: each call must end in `Err` with a sensible variant
//! or in `Ok` with finite output, never panic and never hang. Every call
//! runs in its own thread with a time bound, so a hang is a test failure,
//! not a stuck CI job. Inputs are seeded with fixed seeds.

use crate::harness::{bounded, run_bounded};

use gramian_repro::datasets::{macro_f1, rmse, select_entries, select_rows, stratified_split, try_macro_f1, try_rmse, DatasetError, Split};
use gramian_repro::evaluation::{select_on_validation, EvaluationError, MultiViewData, Representation};
use gramian::Error;
use nalgebra::{DMatrix, DVector};
use rand::{rngs::StdRng, Rng, SeedableRng};

fn random_matrix(rng: &mut StdRng, rows: usize, cols: usize) -> DMatrix<f64> {
    DMatrix::from_fn(rows, cols, |_, _| rng.random_range(-1.0..1.0))
}

// ---------------------------------------------------------------- hangs

#[test]
fn stratified_split_with_huge_labels_is_bounded_and_partitions() {
    // Loops up to the largest label used to run ~1e12 iterations here, and
    // `usize::MAX + 1` overflowed.
    let mut rng = StdRng::seed_from_u64(16);
    let mut labels: Vec<usize> = (0..60).map(|_| [0usize, 7, 1_000_000_000_000, usize::MAX][rng.random_range(0..4)]).collect();
    labels.extend([0, 7, 1_000_000_000_000, usize::MAX].iter().flat_map(|&c| [c; 5]));
    let n = labels.len();
    let l = labels.clone();
    let split = bounded("stratified_split", move || stratified_split(&l, 0.6, 0.2, 3)).unwrap();
    let mut all: Vec<usize> = split.train.iter().chain(&split.validation).chain(&split.test).copied().collect();
    all.sort();
    assert_eq!(all, (0..n).collect::<Vec<_>>());
    for c in [0, 7, 1_000_000_000_000, usize::MAX] {
        assert!(split.train.iter().any(|&i| labels[i] == c), "class {c} missing from the training part");
    }
}

#[test]
fn stratified_split_result_does_not_depend_on_label_values() {
    // Relabelling classes monotonically keeps the split (same order of draws).
    let labels: Vec<usize> = (0..50).map(|i| i % 3).collect();
    let relabelled: Vec<usize> = labels.iter().map(|&c| [2usize, 1_000_000_000_000, usize::MAX][c]).collect();
    let a = stratified_split(&labels, 0.5, 0.25, 9).unwrap();
    let b = bounded("stratified_split", move || stratified_split(&relabelled, 0.5, 0.25, 9)).unwrap();
    assert_eq!(a, b);
}

#[test]
fn macro_f1_with_huge_labels_is_bounded_and_exact() {
    // class usize::MAX: tp 1, fp 0, fn 1 -> 2/3; class 1e12: tp 0, fp 1, fn 0 -> 0; class 0: tp 1 -> 1.
    let f1 = bounded("macro_f1", || macro_f1(&[usize::MAX, usize::MAX, 0], &[usize::MAX, 1_000_000_000_000, 0]));
    assert!((f1 - (2.0 / 3.0 + 0.0 + 1.0) / 3.0).abs() < 1e-12, "{f1}");
    assert_eq!(bounded("try_macro_f1", || try_macro_f1(&[], &[])).unwrap(), 0.0);
}

#[test]
fn macro_f1_with_predictions_of_the_wrong_length_is_an_error() {
    let r = bounded("try_macro_f1", || try_macro_f1(&[0, 1, 1], &[0, 1]));
    assert!(matches!(r, Err(DatasetError::LengthMismatch { expected: 3, found: 2, .. })), "{r:?}");
    // The panicking form says so instead of failing an assertion deep inside.
    let p = run_bounded("macro_f1", || macro_f1(&[0, 1, 1], &[0, 1]));
    assert!(p.is_err_and(|m| m.contains("length mismatch")));
    // Same for rmse.
    let (a, b) = (DVector::from_element(3, 1.0), DVector::from_element(4, 1.0));
    assert!(matches!(try_rmse(&a, &b), Err(DatasetError::LengthMismatch { expected: 3, found: 4, .. })));
    assert_eq!(try_rmse(&a, &a).unwrap(), 0.0);
    assert!(run_bounded("rmse", move || rmse(&a, &b)).is_err_and(|m| m.contains("length mismatch")));
}

#[test]
fn select_on_validation_with_a_classifier_of_wrong_length_is_an_error() {
    let mut rng = StdRng::seed_from_u64(4);
    let views = vec![random_matrix(&mut rng, 40, 3), random_matrix(&mut rng, 40, 2)];
    let data = MultiViewData { view_names: vec!["a".into(), "b".into()], views, labels: (0..40).map(|i| i % 2).collect() };
    let r = bounded("select_on_validation", move || {
        let split = data.split(0.5, 0.25, 1)?;
        let rep = Representation {
            train: DMatrix::from_element(split.train_labels.len(), 1, 1.0),
            validation: DMatrix::from_element(split.validation_labels.len(), 1, 1.0),
            test: DMatrix::from_element(split.test_labels.len(), 1, 1.0),
        };
        // One prediction too few for each evaluation set.
        let classify = |_c: f64, _x: &DMatrix<f64>, _y: &[usize], eval: &[&DMatrix<f64>]| -> Result<Vec<Vec<usize>>, EvaluationError> {
            Ok(eval.iter().map(|m| vec![0; m.nrows().saturating_sub(1)]).collect())
        };
        select_on_validation(&split, &[((), rep)], &[1.0], &classify).map(|_| ())
    });
    assert!(matches!(r, Err(EvaluationError::Dataset(DatasetError::LengthMismatch { .. }))), "{r:?}");
}

/// Writes views `dir/v-a.csv` and `dir/v-b.csv` with a header and the given label column.
fn write_view(tag: &str, labels: &[&str]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("gramian-adversarial-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut text = String::from("x0,x1,label\n");
    for (i, l) in labels.iter().enumerate() {
        text.push_str(&format!("{},{},{l}\n", i as f64 * 0.5, 1.0 - i as f64));
    }
    std::fs::write(dir.join("v-a.csv"), &text).unwrap();
    std::fs::write(dir.join("v-b.csv"), &text).unwrap();
    dir
}

#[test]
fn csv_labels_beyond_the_documented_range_are_rejected() {
    for (tag, big) in [("e12", "1e12"), ("e300", "1e300"), ("u32", "4294967296"), ("neg", "-1"), ("frac", "0.5")] {
        let mut labels = vec!["0", "1", "0", "1", "0", "1"];
        labels.push(big);
        let dir = write_view(tag, &labels);
        let d = dir.clone();
        let r = bounded("load_csv_views", move || MultiViewData::load_csv_views(&d, "v-", &["a", "b"]).map(|_| ()));
        assert!(matches!(r, Err(EvaluationError::InconsistentViews(_))), "label {big}: {r:?}");
        let _ = std::fs::remove_dir_all(dir);
    }
    // The bound itself is accepted, and splitting with it is fast.
    let mut labels = vec!["0"; 6];
    labels.extend(["4294967295"; 6]);
    let dir = write_view("max", &labels);
    let d = dir.clone();
    let r = bounded("load_csv_views + split", move || {
        let data = MultiViewData::load_csv_views(&d, "v-", &["a", "b"])?;
        assert_eq!(data.labels[11], u32::MAX as usize);
        let split = data.split(0.5, 0.2, 1)?;
        Ok::<_, EvaluationError>(split.train_labels.len() + split.validation_labels.len() + split.test_labels.len())
    });
    assert_eq!(r.unwrap(), 12);
    let _ = std::fs::remove_dir_all(dir);
}

// ---------------------------------------------------------------- panics

#[test]
fn multiview_split_with_inconsistent_views_or_labels_is_an_error() {
    let mut rng = StdRng::seed_from_u64(5);
    let a = random_matrix(&mut rng, 30, 3);
    let b = random_matrix(&mut rng, 30, 2);
    let short = random_matrix(&mut rng, 20, 2);
    let cases = vec![
        ("more labels than rows", vec![a.clone(), b.clone()], (0..45).map(|i| i % 3).collect::<Vec<_>>()),
        ("fewer labels than rows", vec![a.clone(), b.clone()], (0..20).map(|i| i % 3).collect()),
        ("views of unequal length", vec![a.clone(), short], (0..30).map(|i| i % 3).collect()),
        ("no views", vec![], (0..30).map(|i| i % 3).collect()),
    ];
    for (what, views, labels) in cases {
        let data = MultiViewData { view_names: vec!["a".into(); views.len()], views, labels };
        let r = bounded(what, move || data.split(0.5, 0.25, 2).map(|_| ()));
        assert!(matches!(r, Err(EvaluationError::InconsistentViews(_))), "{what}: {r:?}");
    }
    let data = MultiViewData { view_names: vec!["a".into(), "b".into()], views: vec![a, b], labels: (0..30).map(|i| i % 3).collect() };
    let bad = Split { train: vec![0, 1, 2, 30], validation: vec![3], test: vec![4] };
    let r = bounded("apply_split beyond the rows", move || data.apply_split(&bad).map(|_| ()));
    assert!(matches!(r, Err(EvaluationError::InconsistentViews(_))), "{r:?}");
}

// ---------------------------------------------------------------- typed errors

#[test]
fn selections_out_of_range_are_typed_errors() {
    let m = DMatrix::from_element(5, 2, 1.0);
    assert!(matches!(select_rows(&m, &[0, 5]), Err(Error::IndexOutOfRange { index: 5, len: 5, .. })));
    assert!(matches!(select_entries(&DVector::from_element(3, 1.0), &[3]), Err(Error::IndexOutOfRange { index: 3, len: 3, .. })));
    assert_eq!(select_rows(&m, &[4, 0]).unwrap().nrows(), 2);
}

#[test]
fn missing_data_files_are_reported() {
    let missing = MultiViewData::load_csv_views("/nonexistent/mfeat", "mfeat-", &["fac"]);
    assert!(matches!(missing, Err(EvaluationError::Dataset(DatasetError::Missing(_)))));
}
