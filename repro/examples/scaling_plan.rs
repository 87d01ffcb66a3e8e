//! Planned time per iteration of the sharded fits on many GPUs: the
//! computation of one shard on a card of the cost model
//! ([`gramian::gpu::cost::CardProfile`]) plus the communication of the
//! iteration's collectives over a stated network, for 1 GPU, 8 GPUs of one
//! node and 8 nodes of 8 GPUs; and the largest n each method fits in 10
//! minutes there (or in the card's memory, whichever is smaller).
//!
//! ```text
//! cargo run --release -p gramian-repro --example scaling_plan [-- --card h200]
//! ```
//!
//! **Computation per shard** (n/P rows, flops and bytes of the operations
//! the fits dispatch, each at its shape class's efficiency on the card,
//! the larger of the flop time and the memory time):
//! - PSD density (r = m centres, f64): per evaluation the weighted Gram
//!   `P diag(z) P^T` and the model values `p_i^T A p_i`, `2 (n/P) r^2` flops
//!   each; per iteration `EVALUATIONS_PER_ITERATION` evaluations and the
//!   `r x r` positive part (polar iteration, `POLAR_PRODUCTS` products of
//!   `2 r^3` flops) on every rank alike; once, the features
//!   (kernel to the centres `3 (n/P) m d`, the map `2 (n/P) m r`).
//!   Memory: the features, `8 r n/P` bytes, and `X`.
//! - PSD heteroscedastic and quantile regression (m centres, `r = m + 1`
//!   or `m` features, f64): the density's evaluation per PSD part (one
//!   part; `K - 1` parts for K quantile levels) plus the linear part's
//!   `P s` and `P^T w` (`2 (n/P) r` flops each), the positive part per PSD
//!   part, the features once; `B` blocks of dual vectors (2; K).
//! - mklaren (K kernels, rank k, look-ahead delta, f64): per pivot step
//!   `K (delta + 1)` kernel columns of `n/P` rows (memory-bound: X read
//!   once each, `8 d n/P` bytes) and their Cholesky updates (G read once,
//!   `8 k n/P` bytes), plus the scoring and LAR inner products over the
//!   look-ahead blocks (`8 K delta n/P` bytes). Memory: `X`, `G` and the
//!   look-ahead blocks.
//! - eKSVD Dual, matrix-free (Q sources of N samples each, `d_phi`
//!   features, block of b vectors, f64): per block product, through the
//!   features, `Phi_q^T V_q` and `Phi_q (s - Phi_q^T V_q)` for every source,
//!   `4 Q (N/P) d_phi b` flops reading the features twice. The Krylov
//!   vectors are split by rows like the features: per product one sum of
//!   the `Q d_phi b` projections and a flag, then the block Lanczos's
//!   inner products over the rank's rows, each one sum: `V^T W` twice
//!   (`(c + b) b` values, `c + b` the basis columns: 56 and 64, below `64
//!   P` values, so all-gathered), the block's column norms and two `b x b`
//!   Grams (CholQR2), and every other product (one Rayleigh-Ritz step per
//!   restart of two blocks) a digest of the projected eigenproblem: 5.5
//!   small collectives. The basis work on the rank's rows (`O((N/P) m b)`
//!   per product, on the host) is not in the computation here. Memory:
//!   the features of its rows and its rows of the basis (`k + b + 5 b = 64`
//!   columns and the residual block).
//! - eKSVD Dual on one kernel function (Q sources of N samples each, RBF,
//!   `d = 4`, block of b vectors, f64; `eksvd::sharded::kernel`): per block
//!   product each rank evaluates its rows of every upper block once,
//!   `Q (Q-1)/2 (N/P) N` entries, at the card's f64 evaluation rate or as
//!   the pair matvec's `4 b` flops an entry (both products from each
//!   entry) at the matvec efficiency, whichever is longer. The Krylov block is all-gathered (`Q N b` values) and each
//!   rank's shares of the transposed products go to their rows' owners in
//!   one all-to-all (`Q N b` values, `(P - 1)/P` of them leaving each rank),
//!   both crossing the host link; the inner products as above (5.5 small
//!   collectives). Memory: every source's inputs (gathered once), the
//!   gathered block and the shares, and the rank's rows of the basis.
//!
//! **Communication** (Hockney: `alpha + bytes / beta` per message), of the
//! collectives the sharded fits call per iteration: a sum of `s` values
//! (`Communicator::sum`: reduce-scatter by recursive halving and
//! all-gather by recursive doubling, `2 log2 p'` messages with `p'` the
//! largest power of two up to `P`, two more otherwise, and `2 (p' - 1) / p'`
//! of the bytes each way (the fold of the extra ranks moves the whole array
//! twice); arrays below `64 P` values all-gathered, `ceil(log2 P)` rounds), an arg-max (a small all-gather),
//! broadcasts (`ceil(log2 P)` rounds), all-gathers of sharded vectors (`(P - 1)/P`
//! of the whole), all-to-alls (`P - 1` messages, `(P - 1)/P` of the array
//! out and in). Each reduced array also crosses the host link twice
//! (down before, up after: the reductions run on host memory). Network:
//! inside a node MPI shared memory, `alpha = 1 us`, `beta = 25 GB/s`;
//! across nodes one 400 Gb/s NDR InfiniBand port per GPU, `alpha = 5 us`,
//! `beta = 50 GB/s` (a collective spanning nodes runs at the inter-node
//! figures). Iteration counts are those of the single-device fits
//! (`ITERATIONS_*`: the measured runs named there); sharding does not change them.

use gramian::gpu::cost::{CardProfile, H200_KERNEL_MATRIX_EFFICIENCY, H200_MATVEC_EFFICIENCY, H200_PRODUCT_EFFICIENCY, H200_WEIGHTED_GRAM_EFFICIENCY};

/// PSD density: FISTA iterations to the default gap at m = 1000 centres,
/// n = 10^5 and 10^6 alike (`repro/results/h200-2026-12-04-methods.txt`: 26 it).
const ITERATIONS_PSD: f64 = 26.0;
/// Dual evaluations per FISTA iteration (the candidate and, on backtracking
/// or a gap check, one more): 2, an upper figure.
const EVALUATIONS_PER_ITERATION: f64 = 2.0;
/// Products of the polar positive part at r = 1000, tolerance 1e-9
/// (`psd::polar`'s planner on a spectrum with `||M||_F / ||M||_2 = 3`).
const POLAR_PRODUCTS: f64 = 67.0;
/// eKSVD Dual: Lanczos block products for k = 16 at tolerance 1e-8 (the
/// operator Lanczos on the method benchmark's problem: 51-57 products at
/// N = 2000 and 5000 per source).
const ITERATIONS_EKSVD: f64 = 60.0;
/// PSD heteroscedastic and quantile (3 levels) regression: FISTA iterations
/// to a gap of 1e-5 at n = 10^5 and 500 centres (`psd_speed`, BENCHMARKS.md
/// "PSD models": 142 and 362).
const ITERATIONS_HETEROSCEDASTIC: f64 = 142.0;
const ITERATIONS_QUANTILE: f64 = 362.0;
/// Collectives per FISTA iteration of the sharded PSD regressions on 2
/// ranks (repro/results/sharded-scaling-psd-regression-2026-12-07.log:
/// 3274 in 170 iterations, 8195 in 250).
const COLLECTIVES_HETEROSCEDASTIC: f64 = 19.3;
const COLLECTIVES_QUANTILE: f64 = 32.8;

/// One network level.
#[derive(Clone, Copy)]
struct Link {
    alpha: f64,
    beta: f64,
}

const INTRA_NODE: Link = Link { alpha: 1e-6, beta: 25e9 };
const INTER_NODE: Link = Link { alpha: 5e-6, beta: 50e9 };

/// A configuration: `nodes` x `per_node` GPUs.
#[derive(Clone, Copy)]
struct Cluster {
    nodes: usize,
    per_node: usize,
}

impl Cluster {
    fn ranks(&self) -> usize {
        self.nodes * self.per_node
    }
    fn link(&self) -> Link {
        if self.nodes > 1 { INTER_NODE } else { INTRA_NODE }
    }
    fn name(&self) -> String {
        match (self.nodes, self.per_node) {
            (1, 1) => "1 GPU".into(),
            (1, g) => format!("{g} GPUs, 1 node"),
            (n, g) => format!("{n} nodes x {g} GPUs"),
        }
    }
}

/// The collectives of one iteration.
#[derive(Default, Clone, Copy)]
struct Traffic {
    /// Values of the large sums (reduce-scatter + all-gather).
    sum_values: f64,
    /// Number of large sums.
    sums: f64,
    /// Small collectives (scalar sums, arg-maxes, small all-gathers).
    small: f64,
    /// Broadcasts and their total values.
    broadcasts: f64,
    broadcast_values: f64,
    /// Values of all-gathered sharded vectors (the whole vectors' length).
    gathered_values: f64,
    /// Values of all-to-all exchanges (the whole arrays' length).
    exchanged_values: f64,
}

fn log2_ceil(p: usize) -> f64 {
    (p as f64).log2().ceil().max(0.0)
}

/// Seconds of one iteration's collectives on `c`.
fn communication(t: &Traffic, c: &Cluster, card: &CardProfile) -> f64 {
    let p = c.ranks();
    if p == 1 {
        return 0.0;
    }
    let l = c.link();
    let pf = p as f64;
    let rounds = log2_ceil(p);
    let p2 = (1usize << (usize::BITS - 1 - p.leading_zeros())) as f64;
    let (fold_messages, fold_values) = if p2 < pf { (2.0, 2.0 * t.sum_values) } else { (0.0, 0.0) };
    let sums = t.sums * ((2.0 * p2.log2() + fold_messages) * l.alpha + (2.0 * (p2 - 1.0) / p2 * t.sum_values + fold_values) * 8.0 / l.beta + 2.0 * 8.0 * t.sum_values / card.link_bandwidth);
    let small = t.small * rounds * l.alpha;
    let broadcasts = t.broadcasts * rounds * l.alpha + rounds * 8.0 * t.broadcast_values / l.beta;
    let gathers = if t.gathered_values > 0.0 { rounds * l.alpha + (pf - 1.0) / pf * 8.0 * t.gathered_values / l.beta + 8.0 * t.gathered_values / card.link_bandwidth } else { 0.0 };
    let exchanges = if t.exchanged_values > 0.0 { (pf - 1.0) * l.alpha + (pf - 1.0) / pf * 8.0 * t.exchanged_values / l.beta + 8.0 * t.exchanged_values / card.link_bandwidth } else { 0.0 };
    sums + small + broadcasts + gathers + exchanges
}

/// Seconds of `flops` at `efficiency` of `peak`, or of `bytes` at the
/// memory bandwidth, whichever is longer.
fn device_seconds(card: &CardProfile, flops: f64, peak: f64, efficiency: f64, bytes: f64) -> f64 {
    (flops / (peak * efficiency)).max(bytes / card.memory_bandwidth)
}

/// The methods planned.
#[derive(Clone, Copy)]
enum Method {
    /// PSD density: m = r = 1000 centres, d = 10.
    PsdDensity,
    /// mklaren: 2 RBF kernels, rank 20, look-ahead 10, d = 10.
    Mklaren,
    /// eKSVD Dual: Q = 3 sources of N each, d = 100, block 8, k = 16.
    EksvdDual,
    /// eKSVD Dual on one RBF kernel: Q = 3 sources of N each, d = 4, block 8, k = 16.
    EksvdKernelDual,
    /// PSD heteroscedastic regression: m = 500 centres, d = 10.
    PsdHeteroscedastic,
    /// PSD quantile regression: 3 levels, m = 500 centres, d = 10.
    PsdQuantile,
}

/// One shard's plan: setup once, compute and traffic per iteration,
/// memory per rank.
struct Shard {
    setup: f64,
    compute: f64,
    traffic: Traffic,
    memory: f64,
}

impl Method {
    const ALL: [Method; 6] = [Method::PsdDensity, Method::PsdHeteroscedastic, Method::PsdQuantile, Method::Mklaren, Method::EksvdDual, Method::EksvdKernelDual];

    fn name(self) -> &'static str {
        match self {
            Method::PsdDensity => "PSD density (m = 1000, d = 10)",
            Method::Mklaren => "mklaren (2 RBF, rank 20, delta 10, d = 10)",
            Method::EksvdDual => "eKSVD Dual (Q = 3, 1000 Nystrom features, block 8, N per source)",
            Method::EksvdKernelDual => "eKSVD Dual (Q = 3, exact RBF kernel, d = 4, block 8, N per source)",
            Method::PsdHeteroscedastic => "PSD heteroscedastic (m = 500, d = 10)",
            Method::PsdQuantile => "PSD quantile (3 levels, m = 500, d = 10)",
        }
    }

    /// The headline n (samples; per source for eKSVD).
    fn target(self) -> f64 {
        match self {
            Method::PsdDensity | Method::Mklaren | Method::PsdHeteroscedastic | Method::PsdQuantile => 1e9,
            Method::EksvdDual => 1e8 / 3.0,
            Method::EksvdKernelDual => 1e6,
        }
    }

    fn iterations(self) -> f64 {
        match self {
            Method::PsdDensity => ITERATIONS_PSD,
            Method::Mklaren => 20.0,
            Method::EksvdDual | Method::EksvdKernelDual => ITERATIONS_EKSVD,
            Method::PsdHeteroscedastic => ITERATIONS_HETEROSCEDASTIC,
            Method::PsdQuantile => ITERATIONS_QUANTILE,
        }
    }

    /// The shard of `n` samples over `p` ranks.
    fn shard(self, card: &CardProfile, n: f64, p: f64) -> Shard {
        let rows = (n / p).ceil();
        let f64p = card.f64_flops;
        match self {
            Method::PsdDensity => {
                let (r, d) = (1000.0f64, 10.0f64);
                let setup = device_seconds(card, 3.0 * rows * r * d, f64p, H200_KERNEL_MATRIX_EFFICIENCY, 8.0 * rows * (d + r))
                    + device_seconds(card, 2.0 * rows * r * r, f64p, H200_PRODUCT_EFFICIENCY, 8.0 * rows * r);
                let evaluation = device_seconds(card, 2.0 * rows * r * r, f64p, H200_WEIGHTED_GRAM_EFFICIENCY, 8.0 * rows * r)
                    + device_seconds(card, 2.0 * rows * r * r, f64p, H200_PRODUCT_EFFICIENCY, 8.0 * rows * r);
                let polar = POLAR_PRODUCTS * device_seconds(card, 2.0 * r * r * r, f64p, H200_PRODUCT_EFFICIENCY, 24.0 * r * r);
                Shard {
                    setup,
                    compute: EVALUATIONS_PER_ITERATION * evaluation + polar,
                    // The r x r Gram per evaluation, and the inner products,
                    // loss, conjugate and gap terms in small sums: 18.5
                    // collectives per iteration measured
                    // (repro/results/sharded-scaling-2026-12-07.log).
                    traffic: Traffic { sum_values: r * r, sums: EVALUATIONS_PER_ITERATION, small: 17.0, ..Default::default() },
                    // Features, X, and the dual's vectors.
                    memory: 8.0 * rows * (r + d + 4.0),
                }
            }
            Method::PsdHeteroscedastic | Method::PsdQuantile => {
                // r features, Q PSD parts, B blocks of dual variables, and
                // the collectives per iteration measured on 2 ranks
                // (repro/results/sharded-scaling-psd-regression-2026-12-07.log).
                let (r, d, parts, blocks, collectives) = match self {
                    Method::PsdHeteroscedastic => (501.0f64, 10.0f64, 1.0f64, 2.0f64, COLLECTIVES_HETEROSCEDASTIC),
                    _ => (500.0, 10.0, 2.0, 3.0, COLLECTIVES_QUANTILE),
                };
                let setup = device_seconds(card, 3.0 * rows * r * d, f64p, H200_KERNEL_MATRIX_EFFICIENCY, 8.0 * rows * (d + r))
                    + device_seconds(card, 2.0 * rows * r * r, f64p, H200_PRODUCT_EFFICIENCY, 8.0 * rows * r);
                let part = device_seconds(card, 2.0 * rows * r * r, f64p, H200_WEIGHTED_GRAM_EFFICIENCY, 8.0 * rows * r)
                    + device_seconds(card, 2.0 * rows * r * r, f64p, H200_PRODUCT_EFFICIENCY, 8.0 * rows * r);
                let linear = 2.0 * device_seconds(card, 2.0 * rows * r, f64p, H200_PRODUCT_EFFICIENCY, 8.0 * rows * r);
                let polar = POLAR_PRODUCTS * device_seconds(card, 2.0 * r * r * r, f64p, H200_PRODUCT_EFFICIENCY, 24.0 * r * r);
                Shard {
                    setup,
                    compute: EVALUATIONS_PER_ITERATION * (parts * part + linear) + parts * polar,
                    // Per evaluation the r x r Gram of every part and P s
                    // in one sum; the rest are small sums.
                    traffic: Traffic { sum_values: parts * r * r + r, sums: EVALUATIONS_PER_ITERATION, small: collectives - EVALUATIONS_PER_ITERATION, ..Default::default() },
                    // Features, X, and the dual's vectors (4 per block).
                    memory: 8.0 * rows * (r + d + 4.0 * blocks),
                }
            }
            Method::Mklaren => {
                let (kernels, rank, delta, d) = (2.0f64, 20.0f64, 10.0f64, 10.0f64);
                let columns = kernels * (delta + 1.0);
                let column = device_seconds(card, 3.0 * rows * d, f64p, H200_KERNEL_MATRIX_EFFICIENCY, 8.0 * rows * d)
                    + device_seconds(card, 2.0 * rows * rank, f64p, H200_PRODUCT_EFFICIENCY, 8.0 * rows * rank);
                let scoring = device_seconds(card, 4.0 * rows * kernels * delta, f64p, H200_PRODUCT_EFFICIENCY, 8.0 * rows * kernels * delta);
                Shard {
                    setup: 0.0,
                    compute: columns * column + scoring,
                    // Per step: an arg-max and a broadcast of the pivot's
                    // sample and row of G per Cholesky column, the scoring
                    // and LAR sums: 21.6 collectives per step measured
                    // (3 kernels, look-ahead 5; repro/results/sharded-scaling-2026-12-07.log),
                    // here 2 per column plus 6.
                    traffic: Traffic { small: columns + 6.0, broadcasts: columns, broadcast_values: columns * (d + rank), ..Default::default() },
                    // X, G per kernel, the look-ahead blocks, d and y.
                    memory: 8.0 * rows * (d + rank * kernels + kernels * delta + 4.0),
                }
            }
            Method::EksvdDual => {
                let (q, d_phi, b, k) = (3.0f64, 1000.0f64, 8.0f64, 16.0f64);
                let flops = 4.0 * q * rows * d_phi * b;
                Shard {
                    setup: device_seconds(card, 2.0 * q * rows * d_phi * 100.0, f64p, H200_KERNEL_MATRIX_EFFICIENCY, 8.0 * q * rows * d_phi),
                    compute: device_seconds(card, flops, f64p, H200_PRODUCT_EFFICIENCY, 2.0 * 8.0 * q * rows * d_phi),
                    // Per block product: the sum of Phi_q^T V_q (Q d_phi b
                    // values) and a flag, and the iteration's inner
                    // products over the rank's rows (module docs).
                    traffic: Traffic { sum_values: q * d_phi * b + 1.0, sums: 1.0, small: 5.5, ..Default::default() },
                    // The features of this rank's rows and its rows of
                    // the basis (k + 6 b columns and the residual block).
                    memory: 8.0 * q * rows * d_phi + 8.0 * q * rows * (k + 7.0 * b),
                }
            }
            Method::EksvdKernelDual => {
                let (q, d, b, k) = (3.0f64, 4.0f64, 8.0f64, 16.0f64);
                let entries = q * (q - 1.0) / 2.0 * rows * n;
                let evaluations = entries / card.f64_evaluations;
                let products = device_seconds(card, 4.0 * b * entries, f64p, H200_MATVEC_EFFICIENCY, 8.0 * q * n * (d + 2.0 * b));
                Shard {
                    setup: 0.0,
                    compute: evaluations.max(products),
                    // Per block product: the block all-gathered, the shares
                    // exchanged, and the inner products' small sums.
                    traffic: Traffic { gathered_values: q * n * b, exchanged_values: q * n * b, small: 5.5, ..Default::default() },
                    // The gathered inputs, block and shares, and this
                    // rank's rows of the basis.
                    memory: 8.0 * q * n * (d + 2.0 * b) + 8.0 * q * rows * (k + 7.0 * b),
                }
            }
        }
    }
}

struct Row {
    total: f64,
    compute: f64,
    comm: f64,
    memory: f64,
}

fn plan(card: &CardProfile, m: Method, c: &Cluster, n: f64) -> Row {
    let s = m.shard(card, n, c.ranks() as f64);
    let comm = communication(&s.traffic, c, card);
    Row { total: s.setup + m.iterations() * (s.compute + comm), compute: s.compute, comm, memory: s.memory }
}

/// The largest n (to 2 significant digits) with total time <= `budget`
/// and memory per rank within `memory`.
fn largest_n(card: &CardProfile, m: Method, c: &Cluster, budget: f64, memory: f64) -> (f64, &'static str) {
    let fits = |n: f64| {
        let r = plan(card, m, c, n);
        (r.total <= budget, r.memory <= memory)
    };
    let (mut lo, mut hi) = (1e3f64, 1e3f64);
    while fits(hi) == (true, true) && hi < 1e15 {
        lo = hi;
        hi *= 2.0;
    }
    for _ in 0..60 {
        let mid = (lo * hi).sqrt();
        if fits(mid) == (true, true) { lo = mid } else { hi = mid }
    }
    let limit = if !fits(hi).1 { "memory" } else { "time" };
    let digits = 10f64.powf(lo.log10().floor() - 1.0);
    ((lo / digits).floor() * digits, limit)
}

fn main() {
    let mut card = CardProfile::h200();
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--card") {
        card = match args.get(i + 1).map(|s| CardProfile::preset(s)) {
            Some(Ok(c)) => c,
            _ => {
                eprintln!("scaling_plan: --card h200|h100");
                std::process::exit(2);
            }
        };
    }
    // Device memory of the card for the memory limit (bytes).
    let card_memory = if card.name.contains("H200") { 141e9 } else { 80e9 };
    let clusters = [Cluster { nodes: 1, per_node: 1 }, Cluster { nodes: 1, per_node: 8 }, Cluster { nodes: 8, per_node: 8 }];
    println!("card: {} ({:.1} TFLOP/s f64, {:.1} TB/s, {:.0} GB); network: {:.0} GB/s, {:.0} us in a node, {:.0} GB/s, {:.0} us across nodes", card.name, card.f64_flops / 1e12, card.memory_bandwidth / 1e12, card_memory / 1e9, INTRA_NODE.beta / 1e9, INTRA_NODE.alpha * 1e6, INTER_NODE.beta / 1e9, INTER_NODE.alpha * 1e6);
    println!();
    println!("| method | n | GPUs | per iteration: compute | communication | comm. share | iterations | fit | memory per GPU | largest n in 10 min |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for m in Method::ALL {
        for c in &clusters {
            let r = plan(&card, m, c, m.target());
            let (n_max, limit) = largest_n(&card, m, c, 600.0, card_memory);
            println!(
                "| {} | {:.1e} | {} | {:.4} s | {:.5} s | {:.2} % | {} | {:.1} s{} | {:.1} GB | {:.1e} ({} bound) |",
                m.name(),
                m.target(),
                c.name(),
                r.compute,
                r.comm,
                100.0 * r.comm / (r.compute + r.comm),
                m.iterations(),
                r.total,
                if r.memory > card_memory { " (does not fit)" } else { "" },
                r.memory / 1e9,
                n_max,
                limit
            );
        }
    }
}
