//! Outcome-classifying harness of the adversarial suites.
//!
//! Every case runs in its own thread under a time bound and ends in one of:
//! `Err` (typed error, counted by variant), `Ok` with finite output, `Ok`
//! holding NaN/Inf, a panic, or a hang (no answer within [`LIMIT`]). The
//! suites print the counts and fail on any panic, hang or non-finite `Ok`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::time::Duration;

use nalgebra::{DMatrix, DVector};

/// Time bound of one case; a case that has not returned by then is a hang.
pub const LIMIT: Duration = Duration::from_secs(30);

/// The numbers in a result that must be finite.
pub trait Values {
    /// All of them, as `f64`.
    fn values(&self) -> Vec<f64>;
}

impl Values for f64 {
    fn values(&self) -> Vec<f64> {
        vec![*self]
    }
}
impl Values for f32 {
    fn values(&self) -> Vec<f64> {
        vec![*self as f64]
    }
}
impl Values for usize {
    fn values(&self) -> Vec<f64> {
        Vec::new()
    }
}
impl Values for () {
    fn values(&self) -> Vec<f64> {
        Vec::new()
    }
}
impl Values for DMatrix<f64> {
    fn values(&self) -> Vec<f64> {
        self.as_slice().to_vec()
    }
}
impl Values for DMatrix<f32> {
    fn values(&self) -> Vec<f64> {
        self.iter().map(|&v| v as f64).collect()
    }
}
impl Values for DVector<f64> {
    fn values(&self) -> Vec<f64> {
        self.as_slice().to_vec()
    }
}
impl Values for DVector<f32> {
    fn values(&self) -> Vec<f64> {
        self.iter().map(|&v| v as f64).collect()
    }
}
impl<T: Values> Values for Vec<T> {
    fn values(&self) -> Vec<f64> {
        self.iter().flat_map(Values::values).collect()
    }
}
impl<A: Values, B: Values> Values for (A, B) {
    fn values(&self) -> Vec<f64> {
        let mut v = self.0.values();
        v.extend(self.1.values());
        v
    }
}

/// How one case ended (inside its thread).
enum Ended {
    Err(String),
    Ok { non_finite: usize },
}

/// Counts of outcomes over a suite.
#[derive(Default)]
pub struct Tally {
    /// Cases run.
    pub cases: usize,
    /// Cases ending in a typed error.
    pub errs: usize,
    /// Cases ending in `Ok` with finite output.
    pub oks: usize,
    /// Cases that panicked.
    pub panics: usize,
    /// Cases that did not return within [`LIMIT`].
    pub hangs: usize,
    /// Cases ending in `Ok` holding NaN or an infinity.
    pub non_finite: usize,
    /// Errors by variant (the `Debug` name up to the first parenthesis/brace).
    pub errors_by_variant: BTreeMap<String, usize>,
    /// The failing cases (panic, hang, non-finite), with the name and detail.
    pub failures: Vec<String>,
}

/// The variant path of an error's `Debug` text, e.g. `Compute(NonFinite`.
fn variant(debug: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for ch in debug.chars() {
        match ch {
            '(' | '{' if depth < 1 => {
                depth += 1;
                out.push('(');
            }
            '(' | '{' | ' ' | '"' | ')' | '}' => break,
            _ => out.push(ch),
        }
    }
    out.trim_end_matches('(').to_string()
}

/// Time bound of one call of [`run_bounded`] and [`bounded`].
pub const CALL_LIMIT: Duration = Duration::from_secs(10);

/// Runs `f` in a thread: `Ok(value)`, or `Err(message)` if it panicked.
/// Fails the test if it does not return within [`CALL_LIMIT`].
pub fn run_bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = catch_unwind(AssertUnwindSafe(f)).map_err(|e| {
            e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
        });
        let _ = tx.send(r);
    });
    match rx.recv_timeout(CALL_LIMIT) {
        Ok(r) => r,
        Err(_) => panic!("{what}: did not return within {CALL_LIMIT:?} (hang)"),
    }
}

/// [`run_bounded`], failing the test on a panic as well.
pub fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    match run_bounded(what, f) {
        Ok(v) => v,
        Err(msg) => panic!("{what}: panicked: {msg}"),
    }
}

impl Tally {
    /// Runs `f` (bounded) and classifies it; `name` names the case in reports.
    pub fn run<T, E, F>(&mut self, name: impl Into<String>, f: F)
    where
        T: Values,
        E: Debug,
        F: FnOnce() -> Result<T, E> + Send + 'static,
    {
        let name = name.into();
        self.cases += 1;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let r = catch_unwind(AssertUnwindSafe(move || match f() {
                Ok(v) => Ended::Ok { non_finite: v.values().iter().filter(|x| !x.is_finite()).count() },
                Err(e) => Ended::Err(format!("{e:?}")),
            }))
            .map_err(|e| e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default());
            let _ = tx.send(r);
        });
        match rx.recv_timeout(LIMIT) {
            Ok(Ok(Ended::Err(e))) => {
                self.errs += 1;
                *self.errors_by_variant.entry(variant(&e)).or_default() += 1;
            }
            Ok(Ok(Ended::Ok { non_finite: 0 })) => self.oks += 1,
            Ok(Ok(Ended::Ok { non_finite })) => {
                self.non_finite += 1;
                self.failures.push(format!("NON-FINITE ({non_finite} values) in Ok: {name}"));
            }
            Ok(Err(msg)) => {
                self.panics += 1;
                self.failures.push(format!("PANIC: {name}: {msg}"));
            }
            Err(_) => {
                self.hangs += 1;
                self.failures.push(format!("HANG (> {LIMIT:?}): {name}"));
            }
        }
    }

    /// Adds another tally's counts.
    pub fn merge(&mut self, other: Tally) {
        self.cases += other.cases;
        self.errs += other.errs;
        self.oks += other.oks;
        self.panics += other.panics;
        self.hangs += other.hangs;
        self.non_finite += other.non_finite;
        for (k, v) in other.errors_by_variant {
            *self.errors_by_variant.entry(k).or_default() += v;
        }
        self.failures.extend(other.failures);
    }

    /// Prints the counts (and the first failures), then fails the test on
    /// any panic, hang or non-finite `Ok`, or when fewer than `min_cases` ran.
    /// The counts' line is also appended to the file `GRAMIAN_ADVERSARIAL_REPORT`
    /// names, if any (CI prints that file instead of running the suites again
    /// with their output shown).
    pub fn report_and_check(&self, suite: &str, min_cases: usize) {
        let line = format!(
            "ADVERSARIAL SUITE {suite}: cases {} | errs {} | oks {} | panics {} | hangs {} | non-finite-in-Ok {}",
            self.cases, self.errs, self.oks, self.panics, self.hangs, self.non_finite
        );
        println!("{line}");
        if let Some(path) = std::env::var_os("GRAMIAN_ADVERSARIAL_REPORT") {
            use std::io::Write;
            let appended = std::fs::OpenOptions::new().create(true).append(true).open(&path).and_then(|mut f| writeln!(f, "{line}"));
            if let Err(e) = appended {
                panic!("{suite}: cannot append to GRAMIAN_ADVERSARIAL_REPORT {path:?}: {e}");
            }
        }
        let variants: Vec<String> = self.errors_by_variant.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        println!("  errors by variant: {}", variants.join(", "));
        for f in self.failures.iter().take(80) {
            println!("  {f}");
        }
        assert!(self.cases >= min_cases, "{suite}: only {} cases (want >= {min_cases})", self.cases);
        assert!(
            self.panics == 0 && self.hangs == 0 && self.non_finite == 0,
            "{suite}: {} panics, {} hangs, {} non-finite Ok (see the list above)",
            self.panics,
            self.hangs,
            self.non_finite
        );
    }
}
