//! The adversarial suite of the reproduction harness: property-based
//! (proptest strategies, seeded and replayable) inputs to the metrics,
//! splits, standardisation and the eKSVD evaluation harness, drawn from
//! empty, 1x1, mismatched, NaN/Inf, huge and tiny magnitudes, constant
//! columns and extreme labels and fractions (the generators of the
//! library's suite, `tests/common/strategies.rs`).
//!
//! Each case runs under a time bound (`tests/common/harness.rs`) and is
//! classified as a typed error, a finite `Ok`, a panic, a hang or an `Ok`
//! holding NaN/Inf; the suite prints the counts and fails on any of the last
//! three.
//!
//! Replay: `GRAMIAN_TEST_SEED=<n> cargo test -p gramian-repro --test integration adversarial_suite:: -- --nocapture`
//! (the seed is printed).

use crate::harness;
use crate::strategies::{draw, helper_input, runner, HelperInput};

use gramian_repro::datasets::{mean_std, random_split, stratified_split, try_macro_f1, try_rmse, Standardizer};
use gramian_repro::evaluation::{select_on_validation, MultiViewData, Representation};
use harness::Tally;
use nalgebra::DMatrix;

fn helper_cases(t: &mut Tally, input: &HelperInput) {
    let tag = |op: &str| format!("{op} {input:?}");
    macro_rules! case {
        ($op:expr, |$i:ident| $body:expr) => {{
            let $i = input.clone();
            t.run(tag($op), move || $body);
        }};
    }
    case!("try_macro_f1", |i| try_macro_f1(&i.labels, &i.predicted));
    case!("try_rmse", |i| try_rmse(&i.a, &i.b));
    case!("stratified_split", |i| stratified_split(&i.labels, i.fractions.0, i.fractions.1, i.count as u64).map(|s| s.train.len()));
    case!("random_split", |i| random_split(i.count.min(1 << 16), i.fractions.0, i.fractions.1, 3).map(|s| s.test.len()));
    case!("Standardizer", |i| Ok::<_, ()>(Standardizer::fit(&i.m).transform(&i.m)).and_then(|m| if i.m.iter().all(|v| v.is_finite() && v.abs() < 1e150) { Ok(m) } else { Err(()) }));
    case!("mean_std", |i| {
        let (m, s) = mean_std(i.a.as_slice());
        if i.a.iter().all(|v| v.is_finite() && v.abs() < 1e150) && !i.a.is_empty() { Ok(vec![m, s]) } else { Err("documented: not for non-finite or empty input") }
    });
    case!("MultiViewData::split", |i| {
        let data = MultiViewData { view_names: vec!["a".into(), "b".into()], views: vec![i.m.clone(), i.m.map(|v| -v)], labels: i.labels.clone() };
        data.split(i.fractions.0, i.fractions.1, 7).map(|s| s.train.n_sources())
    });
    case!("select_on_validation", |i| {
        let data = MultiViewData { view_names: vec!["a".into()], views: vec![i.m.clone()], labels: i.labels.clone() };
        let split = data.split(0.5, 0.25, 1)?;
        let rep = Representation { train: split.train.try_source(0)?.clone(), validation: split.validation.try_source(0)?.clone(), test: split.test.try_source(0)?.clone() };
        let predicted = i.predicted.clone();
        let classify = move |_c: f64, _x: &DMatrix<f64>, _y: &[usize], evals: &[&DMatrix<f64>]| Ok(evals.iter().map(|e| predicted.iter().copied().take(e.nrows()).collect()).collect());
        select_on_validation(&split, &[(0usize, rep)], &[1.0, i.gamma], &classify).map(|s| vec![s.validation_f1, s.test_f1])
    });
}

#[test]
fn evaluation_helpers() {
    let mut r = runner("helpers");
    let strategy = helper_input();
    let mut t = Tally::default();
    for _ in 0..120 {
        let input = draw(&mut r, &strategy);
        helper_cases(&mut t, &input);
    }
    t.report_and_check("evaluation helpers", 900);
}
