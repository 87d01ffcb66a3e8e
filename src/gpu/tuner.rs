//! The autotuner: on first use of a product's shape class on an adapter it
//! times the applicable variants of `variants.rs` on a synthetic problem of
//! that class (a bounded budget: [`TUNE_BUDGET`] of measured GPU time), keeps
//! the fastest, and caches the choice in memory and on disk, keyed by
//! adapter, driver and class, so later processes skip the timing.
//!
//! Every variant gives the same results to the same tolerance (each is
//! tested against the CPU `f64` path), so the choice changes speed only.
//! That is also checked where the tests cannot reach (a driver's compiler,
//! an adapter's cooperative matrices): before a variant is timed, its
//! output on sampled rows of the synthetic problem is compared with the
//! same rows computed in `f64` on the CPU ([`sampled_rows_agree`]); a
//! variant that disagrees is logged and never used on this context.
//! Variants of reduced precision ([`super::ProductVariant::is_opt_in`]) are
//! never timed: they run only when named.
//!
//! Environment:
//! - `GRAMIAN_TUNE`: `on` (default), `off` (always the default variant, no
//!   timing), `retune` (ignore the disk cache, time again and rewrite it);
//! - `GRAMIAN_TUNE_CACHE`: the cache file (default
//!   `$XDG_CACHE_HOME/gramian/tuning-v2.tsv`, else
//!   `$HOME/.cache/gramian/tuning-v2.tsv`); `none` keeps choices in memory;
//! - `GRAMIAN_VARIANT`: a variant name (see [`super::CATALOGUE`]) used for
//!   every product of its precision, no timing.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use super::buffers::GpuMatrix;
use super::plan::{Operand, ProductFlags};
use super::problem::KernelCode;
use super::variants::{self, Op, ShapeClass, CATALOGUE};
use super::{GpuContext, MATVEC_MAX_COLUMNS};
use crate::error::{Error, Result};
use crate::precision::Precision;

/// Measured GPU time one tuning may spend (compilation not included).
pub const TUNE_BUDGET: Duration = Duration::from_millis(300);

/// Environment variable selecting the tuning mode (`on`, `off`, `retune`).
pub const TUNE_ENV: &str = "GRAMIAN_TUNE";
/// Environment variable naming the tuning cache file (or `none`).
pub const TUNE_CACHE_ENV: &str = "GRAMIAN_TUNE_CACHE";
/// Environment variable forcing one variant.
pub const VARIANT_ENV: &str = "GRAMIAN_VARIANT";

/// Bumped when the catalogue or the class buckets change: older cache
/// entries are ignored.
const CACHE_VERSION: u32 = 2;

/// How the tuner chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TuningMode {
    /// Time unknown classes, reuse cached choices.
    On,
    /// Always the default variant.
    Off,
    /// Ignore cached choices from disk and time again.
    Retune,
}

/// A tuner's choice for one class.
#[derive(Debug, Clone, PartialEq)]
pub struct TunedChoice {
    /// The class key (see the module docs).
    pub class: String,
    /// The chosen variant's name.
    pub variant: &'static str,
    /// Its measured time on the synthetic problem, microseconds (0 when
    /// loaded from the cache without a time).
    pub micros: f64,
    /// Every variant timed, with microseconds (empty for cached choices).
    pub timings: Vec<(&'static str, f64)>,
}

/// Per-context tuner state.
#[derive(Debug)]
pub(crate) struct Tuner {
    pub(crate) mode: TuningMode,
    /// Forced variant per precision (f32, f64).
    forced: [Option<usize>; 2],
    cache_path: Option<PathBuf>,
    adapter_key: String,
    choices: HashMap<ShapeClass, (usize, TunedChoice)>,
    /// Classes loaded from disk: key -> variant index.
    cached: HashMap<String, usize>,
    /// Variants whose output disagreed with the CPU on this context.
    rejected: Vec<usize>,
}

fn precision_slot(p: Precision) -> usize {
    match p {
        Precision::F32 => 0,
        Precision::F64 => 1,
    }
}

fn default_cache_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()).map(PathBuf::from).or_else(|| std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("gramian").join(format!("tuning-v{CACHE_VERSION}.tsv")))
}

impl Tuner {
    /// From the environment (see the module docs). Errors: an unknown
    /// `GRAMIAN_TUNE` value or `GRAMIAN_VARIANT` name.
    pub(crate) fn from_env(adapter_key: String) -> Result<Self> {
        let mode = match std::env::var(TUNE_ENV).ok().as_deref().map(str::trim) {
            None | Some("") | Some("on") | Some("1") => TuningMode::On,
            Some("off") | Some("0") => TuningMode::Off,
            Some("retune") => TuningMode::Retune,
            Some(other) => return Err(Error::InvalidParameter { name: "GRAMIAN_TUNE", reason: format!("expected on, off or retune, got {other:?}") }),
        };
        let cache_path = match std::env::var(TUNE_CACHE_ENV).ok().as_deref().map(str::trim) {
            Some("none") => None,
            Some(path) if !path.is_empty() => Some(PathBuf::from(path)),
            _ => default_cache_path(),
        };
        let mut tuner = Tuner { mode, forced: [None, None], cache_path, adapter_key: adapter_key.replace(['\t', '\n'], " "), choices: HashMap::new(), cached: HashMap::new(), rejected: Vec::new() };
        if let Ok(name) = std::env::var(VARIANT_ENV) {
            if !name.trim().is_empty() {
                tuner.force(Some(name.trim()))?;
            }
        }
        if mode == TuningMode::On {
            tuner.load();
        }
        Ok(tuner)
    }

    /// Forces `name` for its precision, or clears every forced variant.
    pub(crate) fn force(&mut self, name: Option<&str>) -> Result<()> {
        match name {
            None => self.forced = [None, None],
            Some(name) => {
                let index = variants::index_of(name).ok_or_else(|| Error::InvalidParameter { name: "variant", reason: format!("no product variant called {name:?} (see gramian::gpu::CATALOGUE)") })?;
                self.forced[precision_slot(CATALOGUE[index].precision)] = Some(index);
            }
        }
        Ok(())
    }

    /// Changes the mode; `Retune` forgets every choice made or loaded.
    pub(crate) fn set_mode(&mut self, mode: TuningMode) {
        if mode == TuningMode::Retune {
            self.choices.clear();
            self.cached.clear();
        }
        self.mode = mode;
    }

    /// The variant to use without timing, if the class needs none.
    pub(crate) fn known(&self, class: &ShapeClass) -> Option<usize> {
        if let Some(f) = self.forced[precision_slot(class.precision)] {
            return Some(f);
        }
        if self.mode == TuningMode::Off {
            return Some(variants::default_index(class.precision));
        }
        if let Some((i, _)) = self.choices.get(class) {
            return Some(*i);
        }
        self.cached.get(&class.key()).copied().filter(|i| !self.rejected.contains(i))
    }

    /// Excludes variant `index` from this context's choices (its output
    /// disagreed with the CPU).
    pub(crate) fn reject(&mut self, index: usize) {
        if !self.rejected.contains(&index) {
            self.rejected.push(index);
        }
        self.choices.retain(|_, (i, _)| *i != index);
    }

    /// Whether variant `index` was rejected on this context.
    pub(crate) fn is_rejected(&self, index: usize) -> bool {
        self.rejected.contains(&index)
    }

    /// Records a timed choice (and appends it to the disk cache).
    pub(crate) fn record(&mut self, class: ShapeClass, index: usize, timings: Vec<(&'static str, f64)>) {
        let micros = timings.iter().find(|(n, _)| *n == CATALOGUE[index].name).map_or(0.0, |t| t.1);
        let key = class.key();
        if let Some(path) = &self.cache_path {
            let line = format!("{}\t{}\t{}\t{:.1}\n", self.adapter_key, key, CATALOGUE[index].name, micros);
            let write = || -> std::io::Result<()> {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                // One short append per choice: concurrent writers interleave whole lines.
                std::fs::OpenOptions::new().create(true).append(true).open(path)?.write_all(line.as_bytes())
            };
            if let Err(e) = write() {
                log::warn!("gramian tuner: cannot write the cache {}: {e}", path.display());
            }
        }
        self.choices.insert(class, (index, TunedChoice { class: key, variant: CATALOGUE[index].name, micros, timings }));
    }

    /// Reads this adapter's entries of the disk cache (later lines win;
    /// unknown variants and malformed lines are skipped).
    fn load(&mut self) {
        let Some(path) = &self.cache_path else { return };
        let Ok(text) = std::fs::read_to_string(path) else { return };
        for line in text.lines().take(100_000) {
            let fields: Vec<&str> = line.split('\t').collect();
            if fields.len() >= 3 && fields[0] == self.adapter_key {
                if let Some(i) = variants::index_of(fields[2]) {
                    self.cached.insert(fields[1].to_string(), i);
                }
            }
        }
    }

    /// Choices made in this process, then those loaded from disk.
    pub(crate) fn choices(&self) -> Vec<TunedChoice> {
        let mut out: Vec<TunedChoice> = self.choices.values().map(|(_, c)| c.clone()).collect();
        out.sort_by(|a, b| a.class.cmp(&b.class));
        let mut cached: Vec<TunedChoice> = self.cached.iter().filter(|(k, _)| !out.iter().any(|c| &c.class == *k)).map(|(k, &i)| TunedChoice { class: k.clone(), variant: CATALOGUE[i].name, micros: 0.0, timings: Vec::new() }).collect();
        cached.sort_by(|a, b| a.class.cmp(&b.class));
        out.extend(cached);
        out
    }
}

impl GpuContext {
    /// The product variant for `class`: forced, cached, or timed now (see
    /// `tuner.rs`). A tuning that fails (e.g. out of memory for its
    /// synthetic operands) falls back to the default variant.
    pub(super) fn variant_for(&self, class: ShapeClass, dims: (usize, usize, usize)) -> Result<usize> {
        let lock_err = |_| Error::Gpu("tuner lock poisoned".into());
        if let Some(i) = self.tuner.lock().map_err(lock_err)?.known(&class) {
            if self.product_variants().contains(&&CATALOGUE[i]) {
                return Ok(i);
            }
        }
        let before = self.counters.snapshot();
        let start = std::time::Instant::now();
        let timed = self.tune(class, dims);
        self.counters.restore(&before);
        self.counters.count_tuning(start.elapsed().as_nanos().min(u64::MAX as u128) as u64);
        match timed {
            Ok((best, timings)) => {
                log::info!("gramian tuner: {} -> {} ({} variants timed)", class.key(), CATALOGUE[best].name, timings.len());
                self.tuner.lock().map_err(lock_err)?.record(class, best, timings);
                Ok(best)
            }
            Err(e) => {
                log::warn!("gramian tuner: {} not tuned ({e}); using the default variant", class.key());
                Ok(variants::default_index(class.precision))
            }
        }
    }

    /// Times every applicable variant on a synthetic problem of `class`
    /// (operands uniform in [-1, 1], the caller's shape capped), within
    /// [`super::TUNE_BUDGET`] of measured time; returns the fastest and
    /// every time (microseconds, the best of a few runs).
    fn tune(&self, class: ShapeClass, (rows, cols, depth): (usize, usize, usize)) -> Result<(usize, Vec<(&'static str, f64)>)> {
        let work_cap = if self.is_software { 1 << 21 } else { 1 << 33 };
        let (r, c, d) = ShapeClass::synthetic_shape(rows, cols, depth, work_cap);
        let p = class.precision;
        let fill = |len: usize, seed: u64| -> Vec<f64> {
            // A fixed xorshift stream: replayable, no allocation of an RNG.
            let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
                })
                .collect()
        };
        let (a_host, b_host) = (fill(r * d, 1), fill(c * d, 2));
        // Stored as the class says: a transposed operand as its d x n transpose.
        let operand = |host: &[f64], n: usize, transposed: bool| -> Result<GpuMatrix> {
            if transposed {
                let t: Vec<f64> = (0..d * n).map(|e| host[(e % n) * d + e / n]).collect();
                self.upload(&t, d, n, p)
            } else {
                self.upload(host, n, d, p)
            }
        };
        let a = operand(&a_host, r, class.a_transposed)?;
        let b = operand(&b_host, c, class.b_transposed)?;
        let (vc, out_cols) = match class.op {
            Op::Product => (0, c),
            Op::Matvec { wide } => {
                let vc = if wide { MATVEC_MAX_COLUMNS } else { 1 };
                (vc, vc)
            }
        };
        let v_host = fill(c * vc, 3);
        let vmat = if vc > 0 { Some(self.upload(&v_host, c, vc, p)?) } else { None };
        let sample: Vec<usize> = {
            let mut s = vec![0, r / 3, (2 * r) / 3, r - 1];
            s.dedup();
            s
        };
        let out = self.zeros(r, out_cols, p)?;
        let code = if class.distance { KernelCode { kind: 1, gamma: 1.0 / d as f64, coef0: 0.0, degree: 0 } } else { KernelCode { kind: 0, gamma: 0.0, coef0: 0.0, degree: 0 } };
        let reference = SampledReference { a: &a_host, b: &b_host, v: (vc > 0).then_some(&v_host[..]), rows: &sample, depth: d, code, precision: p };
        let reps = if self.is_software { 1 } else { 3 };
        let mut spent = std::time::Duration::ZERO;
        let mut timings = Vec::new();
        let mut best: Option<(usize, f64)> = None;
        let lock_err = |_| Error::Gpu("tuner lock poisoned".into());
        let rejected = |i: usize| self.tuner.lock().map(|t| t.is_rejected(i)).unwrap_or(true);
        let candidates: Vec<usize> = (0..CATALOGUE.len()).filter(|&i| CATALOGUE[i].precision == p && !CATALOGUE[i].is_opt_in() && !rejected(i) && self.product_variants().contains(&&CATALOGUE[i])).collect();
        for i in candidates {
            if spent > super::TUNE_BUDGET {
                break;
            }
            let key = if vc > 0 { i | (if vc == 1 { 1 } else { MATVEC_MAX_COLUMNS } << 16) } else { i };
            if self.variant_pipeline(key).is_err() {
                continue;
            }
            let mut plan = Vec::new();
            match &vmat {
                None => self.plan_product_with(i, code, Operand { m: &a, transposed: class.a_transposed }, Operand { m: &b, transposed: class.b_transposed }, &out, ProductFlags::default(), &mut plan)?,
                Some(vm) => {
                    if !self.plan_kernel_matvec_with(i, code, &a, &b, vm, &out, false, None, &mut plan)? {
                        continue;
                    }
                }
            }
            // Warm-up (first use of a pipeline) and the check against the
            // CPU, then the best of `reps`.
            self.run_plan(plan.clone())?;
            let got = self.download(&self.gather_rows(&out, &sample)?)?;
            #[cfg(test)]
            let got = if CORRUPT_VARIANT.with(|c| c.get()) == Some(i) { got.iter().enumerate().map(|(e, g)| if e == 0 { g + 1.0 } else { *g }).collect() } else { got };
            if let Err(worst) = reference.agrees(&got) {
                log::warn!("gramian tuner: variant {} disagrees with the CPU on {} (error {worst:.3e} times its tolerance); not used on this adapter", CATALOGUE[i].name, self.adapter().name);
                self.tuner.lock().map_err(lock_err)?.reject(i);
                continue;
            }
            let mut fastest = f64::INFINITY;
            for _ in 0..reps {
                let t0 = std::time::Instant::now();
                self.run_plan(plan.clone())?;
                self.synchronize()?;
                let dt = t0.elapsed();
                spent += dt;
                fastest = fastest.min(dt.as_secs_f64() * 1e6);
            }
            timings.push((CATALOGUE[i].name, fastest));
            if best.is_none_or(|(_, t)| fastest < t) {
                best = Some((i, fastest));
            }
        }
        best.map(|(i, _)| (i, timings)).ok_or_else(|| Error::Unsupported(format!("no product variant runs on {}", self.adapter().name)))
    }
}

#[cfg(test)]
thread_local! {
    /// A variant whose checked output the tuner perturbs (tests of the check).
    static CORRUPT_VARIANT: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Sampled rows of a tuning problem, computed on the CPU in `f64`.
struct SampledReference<'a> {
    /// A' and B' (rows x depth, row-major), V (cols x columns) for a matvec.
    a: &'a [f64],
    b: &'a [f64],
    v: Option<&'a [f64]>,
    rows: &'a [usize],
    depth: usize,
    code: KernelCode,
    precision: Precision,
}

impl SampledReference<'_> {
    /// The kernel value of rows `i` of A' and `j` of B', and the scale of
    /// its rounding error: `sum |a_k b_k|` for inner products, `gamma
    /// (|a|^2 + |b|^2)` for the RBF's exponent.
    fn entry(&self, i: usize, j: usize) -> (f64, f64) {
        let (a, b) = (&self.a[i * self.depth..(i + 1) * self.depth], &self.b[j * self.depth..(j + 1) * self.depth]);
        if self.code.kind == 1 {
            let s: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
            let norms: f64 = a.iter().chain(b).map(|x| x * x).sum();
            let k = (-self.code.gamma * s).exp();
            (k, self.code.gamma * norms * k.max(f64::EPSILON))
        } else {
            (a.iter().zip(b).map(|(x, y)| x * y).sum(), a.iter().zip(b).map(|(x, y)| (x * y).abs()).sum())
        }
    }

    /// `Ok` when every sampled entry of `got` (the sampled rows, row-major)
    /// is within `8 d u` times its scale (`u` the unit roundoff, `d` the
    /// depth, plus the columns summed by a matvec; a sequential dot
    /// product's bound is `d u`), else the worst ratio of
    /// error to tolerance. A NaN never agrees.
    fn agrees(&self, got: &[f64]) -> std::result::Result<(), f64> {
        let u = match self.precision {
            Precision::F32 => f32::EPSILON as f64 / 2.0,
            Precision::F64 => f64::EPSILON / 2.0,
        };
        let cols = self.b.len() / self.depth.max(1);
        let width = self.v.map_or(cols, |v| v.len() / cols.max(1));
        let terms = if self.v.is_some() { self.depth + cols } else { self.depth };
        let rel = 8.0 * terms as f64 * u;
        let mut worst = 0.0f64;
        for (s, &i) in self.rows.iter().enumerate() {
            let entries: Vec<(f64, f64)> = (0..cols).map(|j| self.entry(i, j)).collect();
            for q in 0..width {
                let (want, scale) = match self.v {
                    None => entries[q],
                    Some(v) => entries.iter().enumerate().fold((0.0, 0.0), |(w, sc), (j, &(k, e))| (w + k * v[j * width + q], sc + (k.abs() + e) * v[j * width + q].abs())),
                };
                let tolerance = rel * (scale + want.abs()) + f64::MIN_POSITIVE;
                let ratio = (got[s * width + q] - want).abs() / tolerance;
                if !(ratio <= 1.0) {
                    worst = if ratio.is_nan() { f64::INFINITY } else { worst.max(ratio) };
                }
            }
        }
        if worst > 0.0 { Err(worst) } else { Ok(()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference_case(kind: u32) -> (Vec<f64>, Vec<f64>, KernelCode) {
        let (r, c, d) = (5, 7, 33);
        let a: Vec<f64> = (0..r * d).map(|e| ((e * 37 % 101) as f64 / 50.0) - 1.0).collect();
        let b: Vec<f64> = (0..c * d).map(|e| ((e * 53 % 97) as f64 / 48.0) - 1.0).collect();
        (a, b, KernelCode { kind, gamma: if kind == 1 { 1.0 / d as f64 } else { 0.0 }, coef0: 0.0, degree: 0 })
    }

    #[test]
    fn the_sampled_check_accepts_rounding_and_rejects_wrong_or_nan_entries() {
        for kind in [0, 1] {
            let (a, b, code) = reference_case(kind);
            let rows = [0, 2, 4];
            let reference = SampledReference { a: &a, b: &b, v: None, rows: &rows, depth: 33, code, precision: Precision::F32 };
            let exact: Vec<f64> = rows.iter().flat_map(|&i| (0..7).map(move |j| (i, j))).map(|(i, j)| reference.entry(i, j).0).collect();
            // f32 rounding of every entry passes.
            let rounded: Vec<f64> = exact.iter().map(|&x| x as f32 as f64).collect();
            assert_eq!(reference.agrees(&rounded), Ok(()), "kind {kind}");
            // One entry off by 1e-3 of the scale, or NaN, fails.
            for bad in [exact[5] + 1e-3 * (1.0 + exact[5].abs()), f64::NAN] {
                let mut wrong = rounded.clone();
                wrong[5] = bad;
                assert!(reference.agrees(&wrong).is_err(), "kind {kind}: {bad}");
            }
        }
        // A matvec's rows: sums over the columns of V.
        let (a, b, code) = reference_case(1);
        let v: Vec<f64> = (0..7 * 2).map(|e| e as f64 / 7.0 - 1.0).collect();
        let rows = [1, 3];
        let reference = SampledReference { a: &a, b: &b, v: Some(&v), rows: &rows, depth: 33, code, precision: Precision::F64 };
        let want: Vec<f64> = rows.iter().flat_map(|&i| (0..2).map(move |q| (i, q))).map(|(i, q)| (0..7).map(|j| reference.entry(i, j).0 * v[j * 2 + q]).sum()).collect();
        assert_eq!(reference.agrees(&want), Ok(()));
        let mut wrong = want.clone();
        wrong[3] *= 1.0 + 1e-9;
        assert!(reference.agrees(&wrong).is_err());
    }

    /// A variant whose output is wrong (here: perturbed after it ran) is
    /// never timed, chosen or used again on the context.
    #[test]
    fn the_tuner_rejects_a_variant_that_disagrees_with_the_cpu() {
        let Some(ctx) = super::super::test_context() else { return };
        ctx.set_tuning_mode(TuningMode::Retune).unwrap();
        ctx.tuner.lock().unwrap().cache_path = None;
        let class = ShapeClass::of(Precision::F32, true, false, false, 40, 40, 24);
        let (_, clean) = ctx.tune(class, (40, 40, 24)).expect("tuning runs");
        let victim = variants::index_of(clean[0].0).expect("a timed variant");
        CORRUPT_VARIANT.with(|c| c.set(Some(victim)));
        let tuned = ctx.tune(class, (40, 40, 24));
        CORRUPT_VARIANT.with(|c| c.set(None));
        let (best, timings) = tuned.expect("tuning runs");
        assert_ne!(best, victim);
        assert!(timings.iter().all(|(name, _)| *name != CATALOGUE[victim].name), "{timings:?}");
        assert_eq!(timings.len() + 1, clean.len(), "every other variant still timed");
        assert!(ctx.tuner.lock().unwrap().is_rejected(victim));
        assert_ne!(ctx.variant_for(class, (40, 40, 24)).unwrap(), victim);
    }

    /// The tuner's candidates leave out the opt-in variants (`tune`); the
    /// catalogue has one, and it is the single-product cooperative variant.
    #[test]
    fn the_opt_in_variant_is_the_single_f16_product() {
        let opt_in: Vec<_> = CATALOGUE.iter().filter(|v| v.is_opt_in()).collect();
        assert_eq!(opt_in.len(), 1);
        assert_eq!(opt_in[0].core, variants::Core::Cooperative { split: false });
    }

    #[test]
    fn synthetic_shapes_respect_the_cap() {
        for &(r, c, d, cap) in &[(32768, 32768, 256, 1usize << 33), (5, 7, 3, 1 << 21), (100_000, 3, 50_000, 1 << 21), (1, 1, 1, 1)] {
            let (sr, sc, sd) = ShapeClass::synthetic_shape(r, c, d, cap);
            assert!(sr >= 1 && sc >= 1 && sd >= 1);
            assert!(sr <= r.max(1) && sc <= c.max(1) && sd <= d.max(1));
            assert!(sr * sc * sd <= cap.max(64 * 64 * 16), "{r} {c} {d}: {sr} {sc} {sd}");
        }
    }

    #[test]
    fn classes_bucket_shapes() {
        let a = ShapeClass::of(Precision::F32, true, false, false, 32768, 32768, 256);
        let b = ShapeClass::of(Precision::F32, true, false, false, 16384, 16384, 200);
        assert_eq!(a, b);
        assert_eq!(a.key(), "product/f32/distance/NN/o3/d2");
        assert_ne!(a, ShapeClass::of(Precision::F32, false, false, true, 32768, 32768, 256));
    }

    #[test]
    fn the_cache_round_trips_and_skips_garbage() {
        let dir = std::env::temp_dir().join(format!("gramian-tuner-test-{}", std::process::id()));
        let path = dir.join("t.tsv");
        let _ = std::fs::remove_file(&path);
        let class = ShapeClass::of(Precision::F32, true, false, false, 100, 100, 10);
        let mut t = Tuner { mode: TuningMode::On, forced: [None, None], cache_path: Some(path.clone()), adapter_key: "A".into(), choices: HashMap::new(), cached: HashMap::new(), rejected: Vec::new() };
        t.record(class, 2, vec![(CATALOGUE[2].name, 12.5)]);
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"garbage\nA\tproduct/x\tno-such-variant\t1\n").unwrap();
        let mut u = Tuner { mode: TuningMode::On, forced: [None, None], cache_path: Some(path.clone()), adapter_key: "A".into(), choices: HashMap::new(), cached: HashMap::new(), rejected: Vec::new() };
        u.load();
        assert_eq!(u.known(&class), Some(2));
        let mut other = Tuner { mode: TuningMode::On, forced: [None, None], cache_path: Some(path.clone()), adapter_key: "B".into(), choices: HashMap::new(), cached: HashMap::new(), rejected: Vec::new() };
        other.load();
        assert_eq!(other.known(&class), None);
        assert!(u.force(Some("no-such-variant")).is_err());
        u.force(Some(CATALOGUE[0].name)).unwrap();
        assert_eq!(u.known(&class), Some(0));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
