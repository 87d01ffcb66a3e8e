//! The input generators of the adversarial suites (proptest strategies,
//! seeded and replayable): numbers, matrices and parameters from the
//! ordinary to every kind of extreme, and the seeded runner.
#![allow(dead_code)]

use gramian::Kernel;
use nalgebra::{DMatrix, DVector};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// Entries: ordinary values most of the time, then every kind of extreme.
pub fn entry() -> impl Strategy<Value = f64> {
    prop_oneof![
        30 => -2.0..2.0f64,
        1 => Just(0.0),
        1 => Just(1e200),
        1 => Just(-1e200),
        1 => Just(1e300),
        1 => Just(1e-300),
        1 => Just(f64::MAX),
        1 => Just(1e39), // beyond f32
        1 => Just(f64::MIN_POSITIVE),
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
    ]
}

/// A magnitude to scale a clean matrix by.
pub fn scale() -> impl Strategy<Value = f64> {
    prop_oneof![4 => Just(1.0), 1 => Just(1e-300), 1 => Just(1e-150), 1 => Just(1e20), 1 => Just(1e39), 1 => Just(1e154), 1 => Just(1e200), 1 => Just(1e300)]
}

/// An `r x c` matrix: raw extreme entries, a scaled clean matrix, duplicated
/// rows, or constant columns.
pub fn matrix_of(r: usize, c: usize) -> BoxedStrategy<DMatrix<f64>> {
    let raw = proptest::collection::vec(entry(), r * c).prop_map(move |v| DMatrix::from_vec(r, c, v));
    let clean = (proptest::collection::vec(-1.0..1.0f64, r * c), scale()).prop_map(move |(v, s)| DMatrix::from_vec(r, c, v) * s);
    let duplicated = (proptest::collection::vec(-1.0..1.0f64, c), scale()).prop_map(move |(row, s)| DMatrix::from_fn(r, c, |_, j| row[j] * s));
    let constant_cols = (proptest::collection::vec(-1.0..1.0f64, r * c), -3.0..3.0f64).prop_map(move |(v, k)| {
        let mut m = DMatrix::from_vec(r, c, v);
        if c > 0 {
            m.column_mut(0).fill(k);
        }
        m
    });
    prop_oneof![3 => raw, 3 => clean, 1 => duplicated, 1 => constant_cols].boxed()
}

/// Sizes: mostly small non-empty, sometimes 0 or 1.
pub fn size(max: usize) -> impl Strategy<Value = usize> {
    prop_oneof![1 => Just(0usize), 2 => Just(1usize), 6 => 2..=max.max(2)]
}

pub fn matrix(max_rows: usize, max_cols: usize) -> BoxedStrategy<DMatrix<f64>> {
    (size(max_rows), size(max_cols)).prop_flat_map(|(r, c)| matrix_of(r, c)).boxed()
}

pub fn vector_of(n: usize) -> BoxedStrategy<DVector<f64>> {
    prop_oneof![
        3 => proptest::collection::vec(-2.0..2.0f64, n).prop_map(DVector::from_vec),
        2 => proptest::collection::vec(entry(), n).prop_map(DVector::from_vec),
        1 => (proptest::collection::vec(-1.0..1.0f64, n), scale()).prop_map(|(v, s)| DVector::from_vec(v) * s),
        1 => (-1.0..1.0f64).prop_map(move |k| DVector::from_element(n, k)),
    ]
    .boxed()
}

/// A positive parameter (gamma, sigma, lambda): valid, extreme and invalid.
pub fn positive_param() -> impl Strategy<Value = f64> {
    prop_oneof![
        14 => 0.1..2.0f64,
        1 => Just(1e-300),
        1 => Just(1e-10),
        1 => Just(1e10),
        1 => Just(1e300),
        1 => Just(0.0),
        1 => Just(-1.0),
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
    ]
}

/// Counts and sizes: valid, 0, huge and `usize::MAX`.
pub fn count_param() -> impl Strategy<Value = usize> {
    prop_oneof![12 => 1..=4usize, 1 => Just(0usize), 1 => Just(100usize), 1 => Just(u32::MAX as usize), 1 => Just(usize::MAX)]
}

/// A kernel: built with the checked constructors (extreme but valid
/// parameters) or as an enum literal with invalid ones.
pub fn kernel() -> impl Strategy<Value = Kernel> {
    let coef0 = prop_oneof![Just(0.0), Just(1.0), Just(-1e10), Just(1e300)];
    let degree = prop_oneof![Just(1u32), Just(2), Just(3), Just(1000), Just(u32::MAX)];
    prop_oneof![
        6 => positive_param().prop_map(|g| Kernel::Rbf { gamma: g }),
        2 => positive_param().prop_map(|g| Kernel::Laplacian { gamma: g }),
        2 => Just(Kernel::Linear),
        2 => (positive_param(), coef0.clone(), degree).prop_map(|(gamma, coef0, degree)| Kernel::Polynomial { gamma, coef0, degree }),
        1 => (positive_param(), coef0).prop_map(|(gamma, coef0)| Kernel::Sigmoid { gamma, coef0 }),
    ]
}

/// Seeded runner: `GRAMIAN_TEST_SEED` or a fixed default, printed.
pub fn runner(which: &str) -> TestRunner {
    let seed: u64 = std::env::var("GRAMIAN_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(16);
    println!("{which}: seed {seed} (replay with GRAMIAN_TEST_SEED={seed})");
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRunner::new_with_rng(Config { failure_persistence: None, ..Config::default() }, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
}

pub fn draw<S: Strategy>(runner: &mut TestRunner, s: &S) -> S::Value {
    s.new_tree(runner).expect("strategy").current()
}

/// The inputs of the helper cases (labels, vectors, a matrix, split fractions).
#[derive(Debug, Clone)]
pub struct HelperInput {
    pub labels: Vec<usize>,
    pub predicted: Vec<usize>,
    pub a: DVector<f64>,
    pub b: DVector<f64>,
    pub m: DMatrix<f64>,
    pub fractions: (f64, f64),
    pub count: usize,
    pub gamma: f64,
}

pub fn helper_input() -> impl Strategy<Value = HelperInput> {
    let label = prop_oneof![4 => 0..4usize, 1 => Just(u32::MAX as usize), 1 => Just(usize::MAX)];
    let fraction = prop_oneof![4 => 0.1..0.6f64, 1 => Just(0.0), 1 => Just(1.0), 1 => Just(-0.5), 1 => Just(f64::NAN), 1 => Just(2.0)];
    let gamma = prop_oneof![3 => 0.1..2.0f64, 1 => Just(f64::NAN), 1 => Just(0.0), 1 => Just(1e300), 1 => Just(1e-300), 1 => Just(f64::INFINITY)];
    (size(12), prop_oneof![3 => Just(0usize), 1 => Just(1usize)], size(4))
        .prop_flat_map(move |(n, dn, d)| {
            (
                proptest::collection::vec(label.clone(), n),
                proptest::collection::vec(label.clone(), n + dn),
                vector_of(n),
                vector_of(n + dn),
                matrix_of(n, d),
                (fraction.clone(), fraction.clone()),
                count_param(),
                gamma.clone(),
            )
        })
        .prop_map(|(labels, predicted, a, b, m, fractions, count, gamma)| HelperInput { labels, predicted, a, b, m, fractions, count, gamma })
}
