//! A sharded fit of each method, on MPI ranks (or threads), checked against
//! the single-process fit of the same data:
//!
//! ```text
//! cargo build --release --features mpi --example sharded_fit
//! mpirun -n 2 target/release/examples/sharded_fit --method all --check
//! ```
//!
//! Every rank generates the same data from the seed and keeps its block of
//! rows; the ranks fit together, and with `--check` every rank also fits
//! the whole data alone and compares. `--threads N` runs N ranks as threads
//! of one process instead of MPI. `--fail bad-shard|mismatch|device` makes
//! rank 1 fail (a NaN in its shard, another kernel width, a device with no
//! memory): the run passes when every rank returns the expected error.
//! `--fail panic` makes rank 1 panic: the job must end at once with a
//! non-zero exit code (the panic hook aborts every rank), not hang.
//! Rank 0 prints one line per method: fit time, iterations, communication.
//! Exits non-zero when a check fails.

mod eksvd;
mod mklaren;
mod psd;

use std::process::ExitCode;

use gramian::distributed::{CommStats, Communicator, ThreadGroup};
use gramian::{Device, Error, GpuOptions};

/// How rank 1 is made to fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fail {
    /// No failure.
    None,
    /// A NaN in rank 1's rows.
    BadShard,
    /// Rank 1 asks for another kernel width.
    Mismatch,
    /// Rank 1's device has no memory budget.
    Device,
    /// Rank 1 panics while the others wait in the fit's first collective:
    /// the panic hook of `Mpi::init` aborts the job (exit code not 0, no hang).
    Panic,
}

/// One method's run on one rank.
pub struct Case<'a> {
    pub comm: &'a dyn Communicator,
    pub device: &'a Device,
    /// Samples (per source for eKSVD).
    pub n: Option<usize>,
    pub check: bool,
    pub fail: Fail,
    pub seed: u64,
}

impl Case<'_> {
    /// Rank 1 perturbs its inputs as `--fail` asks.
    pub fn fails_here(&self, how: Fail) -> bool {
        self.fail == how && self.comm.rank() == 1
    }
}

/// What a rank reports.
pub struct Outcome {
    pub fit_seconds: f64,
    pub iterations: usize,
    pub comm: CommStats,
    /// Largest difference to the single-process fit, and its tolerance (with `--check`).
    pub difference: Option<(f64, f64)>,
}

const METHODS: [&str; 10] = ["icd", "mklaren", "nystrom", "csi", "psd-density", "psd-heteroscedastic", "psd-quantile", "eksvd-dual", "eksvd-covariance", "eksvd-kernel-dual"];

fn run_method(method: &str, case: &Case) -> gramian::error::Result<Outcome> {
    match method {
        "icd" => mklaren::icd(case),
        "mklaren" => mklaren::mklaren(case),
        "nystrom" => mklaren::nystrom(case),
        "csi" => mklaren::csi(case),
        "psd-density" => psd::density(case),
        "psd-heteroscedastic" => psd::heteroscedastic(case),
        "psd-quantile" => psd::quantile(case),
        "eksvd-dual" => eksvd::dual(case),
        "eksvd-covariance" => eksvd::covariance(case),
        "eksvd-kernel-dual" => eksvd::kernel_dual(case),
        other => Err(Error::InvalidParameter { name: "--method", reason: format!("unknown method {other:?}") }),
    }
}

struct Options {
    methods: Vec<String>,
    n: Option<usize>,
    check: bool,
    fail: Fail,
    threads: Option<usize>,
    seed: u64,
}

fn parse() -> Result<Options, String> {
    let mut o = Options { methods: vec!["all".into()], n: None, check: false, fail: Fail::None, threads: None, seed: 7 };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--method" => o.methods = value()?.split(',').map(String::from).collect(),
            "--n" => o.n = Some(value()?.parse().map_err(|e| format!("--n: {e}"))?),
            "--seed" => o.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--threads" => o.threads = Some(value()?.parse().map_err(|e| format!("--threads: {e}"))?),
            "--check" => o.check = true,
            "--fail" => {
                o.fail = match value()?.as_str() {
                    "bad-shard" => Fail::BadShard,
                    "mismatch" => Fail::Mismatch,
                    "device" => Fail::Device,
                    "panic" => Fail::Panic,
                    other => return Err(format!("--fail: unknown {other:?}")),
                }
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if o.methods.iter().any(|m| m == "all") {
        o.methods = METHODS.iter().map(|m| m.to_string()).collect();
    }
    Ok(o)
}

/// The expected error of a `--fail` run.
fn expected(fail: Fail, e: &Error) -> bool {
    match fail {
        Fail::None => false,
        Fail::BadShard => matches!(e, Error::RankFailed { rank: 1, invalid_input: true, .. }),
        Fail::Mismatch => matches!(e, Error::ShardMismatch { rank: 1, .. }),
        Fail::Device => matches!(e, Error::RankFailed { rank: 1, invalid_input: false, .. }),
        Fail::Panic => false,
    }
}

/// Runs every method on this rank; `true` when all went as expected.
fn run_rank(comm: &dyn Communicator, local_rank: usize, o: &Options) -> bool {
    let device = if o.fail == Fail::Device && comm.rank() == 1 {
        // A GPU that can hold nothing; the CPU has no budget to exhaust.
        match Device::gpu_with(&GpuOptions { allow_software: true, max_device_bytes: Some(0), ..Default::default() }) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("rank 1: --fail device needs a GPU (software accepted): {e}");
                return false;
            }
        }
    } else {
        Device::for_local_rank(local_rank)
    };
    if o.fail == Fail::Panic && comm.rank() == 1 {
        panic!("rank 1 panics on purpose (--fail panic)");
    }
    let mut ok = true;
    for method in &o.methods {
        let case = Case { comm, device: &device, n: o.n, check: o.check, fail: o.fail, seed: o.seed };
        match run_method(method, &case) {
            Ok(out) if o.fail == Fail::None => {
                let within = out.difference.is_none_or(|(d, tol)| d <= tol);
                ok &= within;
                if comm.rank() == 0 || !within {
                    let traffic = out.comm;
                    let check = match out.difference {
                        Some((d, tol)) => format!(" | vs one process {d:.2e} (tolerance {tol:.0e}){}", if within { "" } else { " FAILED" }),
                        None => String::new(),
                    };
                    println!(
                        "{method:<20} ranks {} | rank {} | fit {:.3} s | {} iterations | {} collectives, {:.2} MB sent, {:.3} s in collectives{check}",
                        comm.size(),
                        comm.rank(),
                        out.fit_seconds,
                        out.iterations,
                        traffic.collectives,
                        traffic.bytes_sent as f64 / 1e6,
                        traffic.seconds,
                    );
                }
            }
            Ok(_) => {
                println!("{method}: rank {} fitted although rank 1 was made to fail ({:?}) FAILED", comm.rank(), o.fail);
                ok = false;
            }
            Err(e) if expected(o.fail, &e) => {
                if comm.rank() == 0 {
                    println!("{method:<20} ranks {} | expected failure on every rank: {e}", comm.size());
                }
            }
            Err(e) => {
                println!("{method}: rank {} failed: {e} FAILED", comm.rank());
                ok = false;
            }
        }
    }
    ok
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("sharded_fit: {e}");
            return ExitCode::from(2);
        }
    };
    let ok = match o.threads {
        Some(p) => match ThreadGroup::run(p, |comm| run_rank(comm, comm.rank(), &o)) {
            Ok(all) => all.into_iter().all(|b| b),
            Err(e) => {
                eprintln!("sharded_fit: {e}");
                false
            }
        },
        None => {
            let world = match gramian::distributed::Mpi::init() {
                Ok(w) => w,
                Err(e) => {
                    eprintln!("sharded_fit: {e}");
                    return ExitCode::from(2);
                }
            };
            let ok = run_rank(&world, world.local_rank(), &o);
            // Every rank's verdict, so that every rank exits alike.
            let bad = world.sum_scalar(if ok { 0.0 } else { 1.0 }).unwrap_or(1.0);
            bad == 0.0
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
