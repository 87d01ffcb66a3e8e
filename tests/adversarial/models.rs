//! Saved model files as untrusted input: a fuzz harness over the loaders of
//! every model kind. Each kind is fitted small and saved as JSON and CBOR;
//! the cases are mutated files: byte flips, truncations and insertions of
//! both encodings, and structure-aware edits of the decoded JSON value
//! (matrix shapes set to 0, 1, 2^32, 2^40, 2^63, `usize::MAX` or swapped,
//! entries dropped or duplicated, numbers replaced by extremes — 1e300,
//! 1e-320, x 1e160, -x, 0, 2^62 — kernels swapped, fields deleted or
//! duplicated), written back as JSON or as CBOR. Every loaded model then
//! runs all its methods on small valid inputs. A case ends in a typed error
//! (at load, or from a method) or in `Ok` with finite numbers; a panic, a
//! hang or NaN/Inf in an `Ok` fails the suite (counts printed as
//! `ADVERSARIAL SUITE models`).
//!
//! Cases: 20,000 by default (CI); `GRAMIAN_MODEL_FUZZ_CASES=<n>` for a long
//! run. Replay: `GRAMIAN_TEST_SEED=<n> cargo test --all-features --test integration adversarial_models:: -- --nocapture`.
#![cfg(feature = "serde")]

use crate::harness::{Tally, Values};

use std::sync::Arc;

use gramian::eksvd::{Eigensolver, FeatureMap};
use gramian::io::SavedModel;
use gramian::mklaren::{FullKernelRidge, FullKernelRidgeParams, KernelCombination, LowRankMethod, LowRankRidge, LowRankRidgeParams};
use gramian::prelude::*;
use gramian::psd::{
    BaseMeasure, BaselineDensity, BaselineHeteroscedastic, BaselineHeteroscedasticParams, BaselineKind, BaselineParams, BaselineQuantile, BaselineQuantileParams, DensityParams, HeteroscedasticRegression, PsdDensity,
    QuantileParams, QuantileRegression,
};
use nalgebra::{DMatrix, DVector};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

/// Cases of a CI run (all kinds together).
const DEFAULT_CASES: usize = 20_000;

/// The outputs of every method of a loaded model (method errors are typed
/// outcomes too: they are skipped, not counted as failures).
type Outputs = Vec<f64>;

/// Loads bytes (JSON when `json`) as one model kind and runs its methods.
type Exercise = fn(&[u8], bool) -> Result<Outputs, Error>;

/// One saved model: its kind's name, files and exercise.
struct Saved {
    name: String,
    json: String,
    cbor: Vec<u8>,
    exercise: Exercise,
}

fn load<M: SavedModel>(bytes: &[u8], json: bool) -> Result<M, Error> {
    if json {
        let text = std::str::from_utf8(bytes).map_err(|e| Error::Record(format!("not UTF-8: {e}")))?;
        M::from_json(text)
    } else {
        M::from_cbor(bytes)
    }
}

/// Adds the values of `r` to `out` when `Ok` (a method's typed error is an
/// allowed outcome).
fn keep<T: Values>(out: &mut Outputs, r: Result<T, Error>) {
    if let Ok(v) = r {
        out.extend(v.values());
    }
}

fn inputs(rows: usize, cols: usize, seed: u64) -> DMatrix<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    DMatrix::from_fn(rows, cols, |_, _| rng.random_range(-1.5..1.5))
}

fn exercise_eksvd(bytes: &[u8], json: bool) -> Result<Outputs, Error> {
    let m: Eksvd = load(bytes, json)?;
    let mut out = Vec::new();
    for q in 0..m.n_sources().min(4) {
        let d = m.feature_map(q).map_or(3, |f| f.input_dim().min(64));
        let x = inputs(5, d, q as u64);
        keep(&mut out, m.transform_source(q, &x));
        keep(&mut out, m.transform_dual(q, &x));
        keep(&mut out, m.features_of(q, &x));
        keep(&mut out, m.training_scores(q));
    }
    for k in 0..m.n_components().min(3) {
        if let Ok(t) = m.objective(k) {
            out.extend([t.weight_norms, t.coupling, t.variance]);
        }
        if let Ok(r) = m.kkt(k) {
            out.extend([r.stationarity, r.dual_scaling]);
        }
    }
    out.extend(m.gammas().iter());
    Ok(out)
}

fn exercise_ksvd(bytes: &[u8], json: bool) -> Result<Outputs, Error> {
    let m: Ksvd = load(bytes, json)?;
    let mut out: Outputs = m.singular_values().iter().copied().collect();
    keep(&mut out, m.transform_x(&inputs(4, 3, 1)));
    keep(&mut out, m.transform_z(&inputs(4, 3, 2)));
    Ok(out)
}

fn exercise_mklaren(bytes: &[u8], json: bool) -> Result<Outputs, Error> {
    let m: Mklaren = load(bytes, json)?;
    let x = inputs(6, 3, 3);
    let mut out = Vec::new();
    keep(&mut out, m.predict(&x));
    for step in 0..m.coefficient_path().len().min(3) {
        keep(&mut out, m.predict_at_step(&[&x], step));
    }
    Ok(out)
}

fn exercise_low_rank(bytes: &[u8], json: bool) -> Result<Outputs, Error> {
    let m: LowRankRidge = load(bytes, json)?;
    let mut out = Vec::new();
    keep(&mut out, m.predict(&inputs(6, 3, 4)));
    Ok(out)
}

fn exercise_full(bytes: &[u8], json: bool) -> Result<Outputs, Error> {
    let m: FullKernelRidge = load(bytes, json)?;
    let mut out = Vec::new();
    keep(&mut out, m.predict(&inputs(6, 3, 5)));
    Ok(out)
}

fn exercise_density(bytes: &[u8], json: bool) -> Result<Outputs, Error> {
    let m: PsdDensity = load(bytes, json)?;
    let cpu = Device::cpu();
    let d = m.model().dimension().min(8);
    let x = inputs(6, d, 6);
    let mut out = Vec::new();
    keep(&mut out, m.density(&x));
    keep(&mut out, m.integral());
    keep(&mut out, m.model().gradient(&cpu, &x));
    keep(&mut out, m.box_probability(&vec![-1.0; d], &vec![0.5; d]));
    if d >= 2 {
        if let Ok(marginal) = m.marginal(&[0]) {
            keep(&mut out, marginal.density(&inputs(3, 1, 7)));
            keep(&mut out, marginal.integral());
        }
    }
    let (mean, var) = m.moments();
    out.extend(mean.iter().chain(var.iter()));
    keep(&mut out, m.sample(2, &mut StdRng::seed_from_u64(8)));
    Ok(out)
}

fn exercise_quantile(bytes: &[u8], json: bool) -> Result<Outputs, Error> {
    let m: QuantileRegression = load(bytes, json)?;
    let mut out = Vec::new();
    keep(&mut out, m.predict(&inputs(6, 1, 9)));
    Ok(out)
}

fn exercise_heteroscedastic(bytes: &[u8], json: bool) -> Result<Outputs, Error> {
    let m: HeteroscedasticRegression = load(bytes, json)?;
    let x = inputs(6, 1, 10);
    let mut out = Vec::new();
    keep(&mut out, m.predict_mean(&x));
    keep(&mut out, m.predict_variance(&x));
    Ok(out)
}

fn exercise_baseline_density(bytes: &[u8], json: bool) -> Result<Outputs, Error> {
    let m: BaselineDensity = load(bytes, json)?;
    let mut out = Vec::new();
    keep(&mut out, m.density(&inputs(6, 1, 11)));
    keep(&mut out, m.integral());
    Ok(out)
}

fn exercise_baseline_heteroscedastic(bytes: &[u8], json: bool) -> Result<Outputs, Error> {
    let m: BaselineHeteroscedastic = load(bytes, json)?;
    let x = inputs(6, 1, 12);
    let mut out = Vec::new();
    keep(&mut out, m.predict_mean(&x));
    keep(&mut out, m.predict_variance(&x));
    Ok(out)
}

fn exercise_baseline_quantile(bytes: &[u8], json: bool) -> Result<Outputs, Error> {
    let m: BaselineQuantile = load(bytes, json)?;
    let mut out = Vec::new();
    keep(&mut out, m.predict(&inputs(6, 1, 13)));
    Ok(out)
}

fn saved<M: SavedModel>(name: impl Into<String>, model: &M, exercise: Exercise) -> Saved {
    Saved { name: name.into(), json: model.to_json().unwrap(), cbor: model.to_cbor().unwrap(), exercise }
}

/// A small fitted model of every kind.
fn models() -> Vec<Saved> {
    let cpu = Device::cpu();
    let mut rng = StdRng::seed_from_u64(16);
    let mut out = Vec::new();

    let data = MultiSource::paired(vec![inputs(12, 3, 20), inputs(12, 4, 21), inputs(12, 6, 22)]).unwrap();
    let params = EksvdParams::new(2)
        .feature_maps(vec![FeatureMap::random_fourier(0.5, 6).unwrap(), FeatureMap::nystrom(Kernel::rbf(0.3).unwrap(), 6, 8).unwrap(), FeatureMap::Linear])
        .solver(Solver::Dual(Eigensolver::Dense))
        .seed(3);
    out.push(saved("eksvd", &params.fit(&cpu, &data).unwrap(), exercise_eksvd));
    let projection = EksvdParams::new(2).feature_maps(vec![FeatureMap::projection(inputs(3, 3, 23)).unwrap(), FeatureMap::Linear]).seed(4);
    out.push(saved("eksvd projection", &projection.fit(&cpu, &MultiSource::paired(vec![inputs(10, 3, 24), inputs(10, 3, 25)]).unwrap()).unwrap(), exercise_eksvd));
    out.push(saved("ksvd", &KsvdParams::new(2).fit_pair(&cpu, &inputs(9, 3, 26), &inputs(8, 3, 27)).unwrap(), exercise_ksvd));

    let x = inputs(24, 3, 28);
    let y = DVector::from_fn(24, |i, _| (2.0 * x[(i, 0)]).sin() + x[(i, 1)]);
    let supervised = Supervised::new(x.clone(), y).unwrap();
    let kernels = [Kernel::rbf(0.5).unwrap(), Kernel::linear()];
    out.push(saved("mklaren", &MklarenParams::new(5).lookahead(2).kernels(&kernels).fit(&cpu, &supervised).unwrap(), exercise_mklaren));
    out.push(saved("low-rank ridge", &LowRankRidgeParams::new(LowRankMethod::Icd, 3).lambda(0.1).kernels(&kernels).fit(&cpu, &supervised).unwrap(), exercise_low_rank));
    out.push(saved("full kernel ridge", &FullKernelRidgeParams::new(KernelCombination::Uniform).lambda(0.1).kernels(&kernels).fit(&cpu, &supervised).unwrap(), exercise_full));

    let x2 = inputs(14, 2, 29);
    out.push(saved("psd density gaussian base", &DensityParams::new(gramian::Kernel::gaussian_with_width(0.7).unwrap()).unwrap().base_measure(BaseMeasure::isotropic_gaussian(2, 2.0).unwrap()).fit(&cpu, &x2).unwrap(), exercise_density));
    out.push(saved("psd density lebesgue", &DensityParams::new(gramian::Kernel::gaussian_with_width(0.7).unwrap()).unwrap().fit(&cpu, &x2).unwrap(), exercise_density));

    let (xq, yq) = crate::common::quantile_appendix_e(16, &mut rng);
    let quantile_data = Supervised::new(xq, yq).unwrap();
    out.push(saved("psd quantile", &QuantileParams::new(gramian::Kernel::gaussian_with_width(0.2).unwrap(), &[0.25, 0.5, 0.75]).unwrap().fit(&cpu, &quantile_data).unwrap(), exercise_quantile));
    let x1 = inputs(16, 1, 30);
    let noise = inputs(16, 1, 31);
    let y1 = DVector::from_fn(16, |i, _| (3.0 * x1[(i, 0)]).sin() + (0.1 + 0.3 * x1[(i, 0)].abs()) * noise[(i, 0)]);
    let het_data = Supervised::new(x1.clone(), y1).unwrap();
    out.push(saved("psd heteroscedastic", &HeteroscedasticParams::new(gramian::Kernel::gaussian_with_width(0.3).unwrap()).unwrap().fit(&cpu, &het_data).unwrap(), exercise_heteroscedastic));
    for kind in [BaselineKind::Pnm, BaselineKind::Ncm, BaselineKind::Glm] {
        out.push(saved(format!("baseline density {}", kind.name()), &BaselineParams::new(kind, gramian::Kernel::gaussian_with_width(0.5).unwrap()).unwrap().monte_carlo(200, 1).fit(&cpu, &x1).unwrap(), exercise_baseline_density));
        out.push(saved(format!("baseline heteroscedastic {}", kind.name()), &BaselineHeteroscedasticParams::new(kind, gramian::Kernel::gaussian_with_width(0.3).unwrap()).unwrap().restarts(2, 1).fit(&cpu, &het_data).unwrap(), exercise_baseline_heteroscedastic));
        out.push(saved(format!("baseline quantile {}", kind.name()), &BaselineQuantileParams::new(kind, gramian::Kernel::gaussian_with_width(0.2).unwrap(), &[0.25, 0.5, 0.75]).unwrap().restarts(2, 1).fit(&cpu, &quantile_data).unwrap(), exercise_baseline_quantile));
    }
    let gaussian = BaseMeasure::isotropic_gaussian(1, 2.0).unwrap();
    out.push(saved("baseline density GLM gaussian base", &BaselineParams::new(BaselineKind::Glm, gramian::Kernel::gaussian_with_width(0.5).unwrap()).unwrap().base_measure(gaussian).monte_carlo(200, 1).fit(&cpu, &x1).unwrap(), exercise_baseline_density));
    out
}

/// Paths (object keys and array indices) to the nodes of a JSON value.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

fn node_mut<'a>(v: &'a mut Value, path: &[Step]) -> &'a mut Value {
    path.iter().fold(v, |v, s| match s {
        Step::Key(k) => &mut v[k.as_str()],
        Step::Index(i) => &mut v[*i],
    })
}

/// A stored matrix or vector: `[entries, rows, cols or null]`.
fn is_matrix(v: &Value) -> bool {
    matches!(v, Value::Array(a) if a.len() == 3 && a[0].is_array() && a[1].is_u64() && (a[2].is_u64() || a[2].is_null()))
}

/// Every node's path, by kind: matrices, numbers, objects, other arrays.
#[derive(Default)]
struct Nodes {
    matrices: Vec<Vec<Step>>,
    numbers: Vec<Vec<Step>>,
    objects: Vec<Vec<Step>>,
    arrays: Vec<Vec<Step>>,
}

fn collect(v: &Value, path: &mut Vec<Step>, nodes: &mut Nodes) {
    match v {
        Value::Number(_) => nodes.numbers.push(path.clone()),
        Value::Array(a) => {
            if is_matrix(v) {
                nodes.matrices.push(path.clone());
            } else {
                nodes.arrays.push(path.clone());
            }
            for (i, x) in a.iter().enumerate() {
                path.push(Step::Index(i));
                collect(x, path, nodes);
                path.pop();
            }
        }
        Value::Object(o) => {
            nodes.objects.push(path.clone());
            for (k, x) in o {
                path.push(Step::Key(k.clone()));
                collect(x, path, nodes);
                path.pop();
            }
        }
        _ => {}
    }
}

/// Sizes a malicious file declares.
const SIZES: [u64; 9] = [0, 1, 2, 3, 1 << 32, 1 << 40, 1 << 62, 1 << 63, u64::MAX];

fn extreme_number(rng: &mut StdRng, old: &Value) -> Value {
    let x = old.as_f64().unwrap_or(1.0);
    match rng.random_range(0..16) {
        0 => serde_json::json!(1e300),
        1 => serde_json::json!(-1e300),
        2 => serde_json::json!(1e-320),
        3 => serde_json::json!(x * 1e160),
        4 => serde_json::json!(-x),
        5 => serde_json::json!(0.0),
        6 => serde_json::json!(0),
        7 => serde_json::json!(1u64 << 62),
        8 => serde_json::json!(u64::MAX),
        9 => serde_json::json!(-1),
        10 => serde_json::json!(x * 1e-300),
        11 => serde_json::json!(1e-300),
        12 => Value::Null,
        13 => serde_json::json!(f64::MAX),
        14 => serde_json::json!(x * 1.5),
        _ => serde_json::json!(rng.random_range(0..8u64)),
    }
}

/// One structure-aware edit of the model value, described (or why there
/// was none: no node of the chosen kind).
fn edit(v: &mut Value, rng: &mut StdRng) -> String {
    let mut nodes = Nodes::default();
    collect(v, &mut Vec::new(), &mut nodes);
    let pick = |rng: &mut StdRng, list: &Vec<Vec<Step>>| list.get(rng.random_range(0..list.len().max(1))).cloned();
    match rng.random_range(0..10) {
        0..=3 => {
            let Some(path) = pick(rng, &nodes.matrices) else { return "no matrix".into() };
            let m = node_mut(v, &path);
            let what = match rng.random_range(0..7) {
                0 => {
                    let s = SIZES[rng.random_range(0..SIZES.len())];
                    m[1] = serde_json::json!(s);
                    format!("rows = {s}")
                }
                1 => {
                    let s = SIZES[rng.random_range(0..SIZES.len())];
                    m[2] = serde_json::json!(s);
                    format!("cols = {s}")
                }
                2 => {
                    let (r, c) = (m[1].clone(), m[2].clone());
                    if !c.is_null() {
                        m[1] = c;
                        m[2] = r;
                    }
                    "rows and cols swapped".into()
                }
                3 => {
                    // Shape and entries emptied together, or a huge shape whose product wraps to the entries.
                    let (rows, cols) = [(0u64, 0u64), (1 << 63, 2), (1 << 32, 1 << 32), (u64::MAX, 0), (0, u64::MAX)][rng.random_range(0..5)];
                    m[0] = serde_json::json!([]);
                    m[1] = serde_json::json!(rows);
                    if !m[2].is_null() {
                        m[2] = serde_json::json!(cols);
                    }
                    format!("{rows} x {cols} without entries")
                }
                4 => {
                    let e = m[0].as_array_mut().unwrap();
                    e.pop();
                    "an entry dropped".into()
                }
                5 => {
                    let e = m[0].as_array_mut().unwrap();
                    if let Some(last) = e.last().cloned() {
                        e.push(last);
                    }
                    "an entry duplicated".into()
                }
                _ => {
                    // Entries and shape consistent, a row or column removed.
                    let (rows, cols) = (m[1].as_u64().unwrap_or(0) as usize, m[2].as_u64().unwrap_or(1) as usize);
                    if rows > 0 && cols > 0 && Some(m[0].as_array().unwrap().len()) == rows.checked_mul(cols) {
                        let e: Vec<Value> = m[0].as_array().unwrap().clone();
                        let kept: Vec<Value> = (0..cols).flat_map(|j| e[j * rows..j * rows + rows - 1].to_vec()).collect();
                        m[0] = Value::Array(kept);
                        m[1] = serde_json::json!(rows - 1);
                    }
                    "a row removed".into()
                }
            };
            format!("matrix {path:?}: {what}")
        }
        4..=6 => {
            let Some(path) = pick(rng, &nodes.numbers) else { return "no number".into() };
            let n = node_mut(v, &path);
            *n = extreme_number(rng, n);
            format!("number {path:?} = {n}")
        }
        7 => {
            let Some(path) = pick(rng, &nodes.objects) else { return "no object".into() };
            let o = node_mut(v, &path).as_object_mut().unwrap();
            let keys: Vec<String> = o.keys().cloned().collect();
            if keys.is_empty() {
                return "empty object".into();
            }
            let k = keys[rng.random_range(0..keys.len())].clone();
            if rng.random::<bool>() {
                o.remove(&k);
                format!("field {path:?}.{k} deleted")
            } else {
                let other = keys[rng.random_range(0..keys.len())].clone();
                let value = o[&other].clone();
                o.insert(k.clone(), value);
                format!("field {path:?}.{k} = .{other}")
            }
        }
        8 => {
            let Some(path) = pick(rng, &nodes.arrays) else { return "no array".into() };
            let a = node_mut(v, &path).as_array_mut().unwrap();
            if a.is_empty() {
                return "empty array".into();
            }
            let i = rng.random_range(0..a.len());
            if rng.random::<bool>() {
                a.remove(i);
                format!("array {path:?}: element {i} removed")
            } else {
                let x = a[i].clone();
                a.push(x);
                format!("array {path:?}: element {i} duplicated")
            }
        }
        _ => {
            // Kernels: another kernel or parameters of a kernel.
            let kernels = [
                serde_json::json!("Linear"),
                serde_json::json!({"Rbf": {"gamma": 1e300}}),
                serde_json::json!({"Rbf": {"gamma": 1e-320}}),
                serde_json::json!({"Rbf": {"gamma": 3.0}}),
                serde_json::json!({"Laplacian": {"gamma": 0.5}}),
                serde_json::json!({"Polynomial": {"gamma": 1.0, "coef0": 1e300, "degree": 2147483647u32}}),
                serde_json::json!({"Polynomial": {"gamma": 0.5, "coef0": 1.0, "degree": 3}}),
                serde_json::json!({"Sigmoid": {"gamma": 1e300, "coef0": -1.0}}),
            ];
            let is_kernel = |x: &Value| x == &serde_json::json!("Linear") || x.as_object().is_some_and(|o| o.len() == 1 && ["Rbf", "Laplacian", "Polynomial", "Sigmoid"].iter().any(|k| o.contains_key(*k)));
            let mut found: Vec<Vec<Step>> = Vec::new();
            fn find(v: &Value, path: &mut Vec<Step>, out: &mut Vec<Vec<Step>>, is_kernel: &dyn Fn(&Value) -> bool) {
                if is_kernel(v) {
                    out.push(path.clone());
                    return;
                }
                match v {
                    Value::Array(a) => a.iter().enumerate().for_each(|(i, x)| {
                        path.push(Step::Index(i));
                        find(x, path, out, is_kernel);
                        path.pop();
                    }),
                    Value::Object(o) => o.iter().for_each(|(k, x)| {
                        path.push(Step::Key(k.clone()));
                        find(x, path, out, is_kernel);
                        path.pop();
                    }),
                    _ => {}
                }
            }
            find(v, &mut Vec::new(), &mut found, &is_kernel);
            let Some(path) = pick(rng, &found) else { return "no kernel".into() };
            let k = kernels[rng.random_range(0..kernels.len())].clone();
            *node_mut(v, &path) = k.clone();
            format!("kernel {path:?} = {k}")
        }
    }
}

/// One byte-level mutation: flips, a truncation, or an insertion.
fn mutate_bytes(bytes: &mut Vec<u8>, rng: &mut StdRng) -> String {
    match rng.random_range(0..4) {
        0 => {
            let n = rng.random_range(1..=4);
            for _ in 0..n {
                if bytes.is_empty() {
                    break;
                }
                let i = rng.random_range(0..bytes.len());
                bytes[i] ^= 1 << rng.random_range(0..8);
            }
            format!("{n} bit flips")
        }
        1 => {
            let i = rng.random_range(0..=bytes.len());
            bytes.truncate(i);
            format!("truncated at {i}")
        }
        2 => {
            let i = rng.random_range(0..=bytes.len());
            let insert: Vec<u8> = match rng.random_range(0..3) {
                0 => (0..rng.random_range(1..8)).map(|_| rng.random()).collect(),
                1 => b"9999999999999999999999".to_vec(),
                _ => vec![0xff, 0xfe, 0x1b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            };
            bytes.splice(i..i, insert);
            format!("bytes inserted at {i}")
        }
        _ => {
            let i = rng.random_range(0..bytes.len().max(1));
            let v = rng.random();
            if let Some(b) = bytes.get_mut(i) {
                *b = v;
            }
            format!("byte {i} = {v:#x}")
        }
    }
}

/// The cases of one model, `count` of them, from `seed`.
fn run_kind(t: &mut Tally, saved: &Arc<Saved>, count: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let value: Value = serde_json::from_str(&saved.json).unwrap();
    // The unmodified files load and give finite results.
    for json in [true, false] {
        let s = Arc::clone(saved);
        t.run(format!("{}: the saved file (json {json})", s.name), move || (s.exercise)(if json { s.json.as_bytes() } else { s.cbor.as_slice() }, json));
    }
    for case in 0..count.saturating_sub(2) {
        let (bytes, json, what) = if rng.random_range(0..5) == 0 {
            // Byte-level, either encoding.
            let json = rng.random::<bool>();
            let mut bytes = if json { saved.json.clone().into_bytes() } else { saved.cbor.clone() };
            let what = (0..rng.random_range(1..=2)).map(|_| mutate_bytes(&mut bytes, &mut rng)).collect::<Vec<_>>().join(", ");
            (bytes, json, what)
        } else {
            let mut v = value.clone();
            let what = (0..rng.random_range(1..=3)).map(|_| edit(&mut v["model"], &mut rng)).collect::<Vec<_>>().join(", ");
            let json = rng.random::<bool>();
            let bytes = if json {
                serde_json::to_vec(&v).unwrap()
            } else {
                let mut out = Vec::new();
                ciborium::into_writer(&v, &mut out).unwrap();
                out
            };
            (bytes, json, what)
        };
        let s = Arc::clone(saved);
        t.run(format!("{} case {case} (seed {seed}, json {json}): {what}", s.name), move || (s.exercise)(&bytes, json));
    }
}

fn seed() -> u64 {
    std::env::var("GRAMIAN_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(17)
}

#[test]
fn mutated_model_files_end_in_typed_errors_or_finite_results() {
    let cases: usize = std::env::var("GRAMIAN_MODEL_FUZZ_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_CASES);
    let seed = seed();
    println!("models: seed {seed} (replay with GRAMIAN_TEST_SEED={seed}), {cases} cases");
    let start = std::time::Instant::now();
    let models: Vec<Arc<Saved>> = models().into_iter().map(Arc::new).collect();
    let per_kind = cases.div_ceil(models.len());
    let mut t = Tally::default();
    for (i, m) in models.iter().enumerate() {
        run_kind(&mut t, m, per_kind, seed.wrapping_mul(1000).wrapping_add(i as u64));
    }
    println!("models: {} kinds, {:.1} s", models.len(), start.elapsed().as_secs_f64());
    t.report_and_check("models", cases);
}
