//! Fuzzing the data loaders: generated malformed CSV input —
//! ragged rows, non-numeric and empty fields, huge and tiny numbers, NaN and
//! infinities, missing label column, empty files, byte-order marks, CRLF
//! line ends, invalid UTF-8 — against [`read_csv_table`] and
//! [`MultiViewData::load_csv_views`]. Every case must end in a typed error
//! or in a valid dataset (finite values, consistent shapes, labels in
//! range), under a time bound; the counts are printed.
//!
//! Replay: `GRAMIAN_TEST_SEED=<n> cargo test -p gramian-repro --test integration adversarial_loaders:: -- --nocapture`.

use crate::harness;

use std::path::PathBuf;

use gramian_repro::datasets::{read_csv_table, LabelColumn};
use gramian_repro::evaluation::{MultiViewData, MAX_LABEL};
use harness::Tally;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// One CSV field: numbers of every kind and things that are not numbers.
fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        60 => (-100.0..100.0f64).prop_map(|v| format!("{v}")),
        20 => (0..4u32).prop_map(|v| v.to_string()),
        1 => Just("1e400".to_string()),
        1 => Just("-1e400".to_string()),
        1 => Just("1e308".to_string()),
        1 => Just("1e-320".to_string()),
        1 => Just("NaN".to_string()),
        1 => Just("inf".to_string()),
        1 => Just("-infinity".to_string()),
        1 => Just("abc".to_string()),
        1 => Just(String::new()),
        1 => Just(" 3 ".to_string()),
        1 => Just("\"1,5\"".to_string()),
        1 => Just("\"2\"".to_string()),
        1 => Just("0x10".to_string()),
        1 => Just("1_000".to_string()),
        1 => Just("+5".to_string()),
        1 => Just("\u{661}".to_string()),
        1 => Just("1e12".to_string()),
        1 => Just("4294967296".to_string()),
        1 => Just("-1".to_string()),
        1 => Just("\"unterminated".to_string()),
    ]
}

#[derive(Debug, Clone)]
struct CsvSpec {
    bom: bool,
    header: Option<Vec<String>>,
    rows: Vec<Vec<String>>,
    crlf: bool,
    trailing_newline: bool,
    garbage: Option<Vec<u8>>,
}

fn csv_spec() -> impl Strategy<Value = CsvSpec> {
    (1..5usize, 0..7usize)
        .prop_flat_map(|(cols, nrows)| {
            let header = prop_oneof![
                8 => Just(Some((0..cols).map(|c| format!("c{c}")).collect::<Vec<_>>())),
                1 => proptest::collection::vec(field(), 0..=cols + 1).prop_map(Some),
                1 => Just(None),
            ];
            // Rows: mostly `cols` fields, sometimes ragged.
            let row = prop_oneof![8 => Just(cols), 1 => 0..=cols + 2].prop_flat_map(|len| proptest::collection::vec(field(), len));
            let garbage = prop_oneof![12 => Just(None), 1 => Just(Some(vec![0xff, 0xfe, b'a'])), 1 => Just(Some(vec![0u8, b',', b'1']))];
            (prop_oneof![6 => Just(false), 1 => Just(true)], header, proptest::collection::vec(row, nrows), any::<bool>(), any::<bool>(), garbage)
        })
        .prop_map(|(bom, header, rows, crlf, trailing_newline, garbage)| CsvSpec { bom, header, rows, crlf, trailing_newline, garbage })
}

fn render(spec: &CsvSpec) -> Vec<u8> {
    let eol = if spec.crlf { "\r\n" } else { "\n" };
    let mut lines: Vec<String> = Vec::new();
    if let Some(h) = &spec.header {
        lines.push(h.join(","));
    }
    lines.extend(spec.rows.iter().map(|r| r.join(",")));
    let mut text = lines.join(eol);
    if spec.trailing_newline && !text.is_empty() {
        text.push_str(eol);
    }
    let mut bytes = Vec::new();
    if spec.bom {
        bytes.extend_from_slice(&[0xef, 0xbb, 0xbf]);
    }
    bytes.extend_from_slice(text.as_bytes());
    if let Some(g) = &spec.garbage {
        bytes.extend_from_slice(g);
    }
    bytes
}

fn runner() -> TestRunner {
    let seed: u64 = std::env::var("GRAMIAN_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(16);
    println!("loaders: seed {seed} (replay with GRAMIAN_TEST_SEED={seed})");
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRunner::new_with_rng(Config { failure_persistence: None, ..Config::default() }, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
}

fn scratch_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gramian-loader-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn csv_loaders_end_in_typed_errors_or_valid_datasets() {
    let mut r = runner();
    let dir = scratch_dir();
    let strategy = csv_spec();
    let mut t = Tally::default();
    let mut invalid_ok = Vec::new();
    for case in 0..10_000usize {
        let spec = strategy.new_tree(&mut r).expect("strategy").current();
        let path = dir.join(format!("t{}.csv", case % 64));
        std::fs::write(&path, render(&spec)).expect("write");
        let (tx, rx) = std::sync::mpsc::channel();
        t.run(format!("read_csv_table {spec:?}"), move || {
            let table = read_csv_table(&path, LabelColumn::Last)?;
            let target = table.target()?.clone();
            let valid = table.features.nrows() == target.len()
                && table.feature_names.len() == table.features.ncols()
                && table.features.ncols() >= 1
                && !target.is_empty()
                && !table.feature_names.first().is_some_and(|n| n.starts_with('\u{feff}'));
            let _ = tx.send(valid);
            Ok::<_, gramian_repro::datasets::DatasetError>((table.features, target))
        });
        if rx.try_recv() == Ok(false) {
            invalid_ok.push(format!("{spec:?}"));
        }
    }
    // Two views per case for the multi-view loader, labels of every kind.
    let label = prop_oneof![6 => (0..3u32).prop_map(|v| v.to_string()), 1 => Just("1e12".to_string()), 1 => Just("-1".to_string()), 1 => Just("0.5".to_string()), 1 => Just(format!("{}", MAX_LABEL)), 1 => Just("4294967296".to_string()), 1 => Just("NaN".to_string())];
    let views = (1..6usize, any::<bool>()).prop_flat_map(move |(n, same)| {
        let rows = if same { Just(n).boxed() } else { (1..6usize).boxed() };
        (proptest::collection::vec(label.clone(), n), rows, proptest::collection::vec((-5.0..5.0f64, 0..3u32), n + 6))
    });
    for case in 0..2_000usize {
        let (labels, rows_b, values) = views.new_tree(&mut r).expect("strategy").current();
        let write = |name: &str, rows: usize| {
            let mut text = String::from("f0,f1,label\n");
            for (i, (value, kind)) in values.iter().take(rows).enumerate() {
                let l = labels.get(i).cloned().unwrap_or_else(|| "0".into());
                text.push_str(&format!("{value},{kind},{l}\n"));
            }
            std::fs::write(dir.join(format!("v{}-{name}.csv", case % 16)), text).expect("write");
        };
        write("a", labels.len());
        write("b", rows_b);
        let d = dir.clone();
        let prefix = format!("v{}-", case % 16);
        let (tx, rx) = std::sync::mpsc::channel();
        t.run(format!("load_csv_views labels {labels:?} rows_b {rows_b}"), move || {
            let data = MultiViewData::load_csv_views(&d, &prefix, &["a", "b", "missing"][..if case % 7 == 0 { 3 } else { 2 }])?;
            let valid = data.views.iter().all(|v| v.nrows() == data.labels.len()) && data.labels.iter().all(|&l| l as f64 <= MAX_LABEL);
            let _ = tx.send(valid);
            Ok::<_, gramian_repro::evaluation::EvaluationError>(data.views)
        });
        if rx.try_recv() == Ok(false) {
            invalid_ok.push(format!("load_csv_views case {case}"));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("loaders: {} datasets returned in Ok failed the validity checks", invalid_ok.len());
    for s in invalid_ok.iter().take(20) {
        println!("  INVALID OK: {s}");
    }
    t.report_and_check("loaders", 12_000);
    assert!(invalid_ok.is_empty(), "{} invalid datasets returned in Ok", invalid_ok.len());
}
