//! The group of ranks a sharded fit runs on: three primitives every backend
//! provides (variable-count all-gather, all-to-all and broadcast of `f64`),
//! and the collectives the fits use, built on them once.
//!
//! **Sums in a fixed order.** [`Communicator::sum`] adds the ranks'
//! contributions in one fixed tree, whatever the arrival order: with `p'`
//! the largest power of two up to `P`, rank `r + p'` is first added to rank
//! `r` (`y_r = x_r + x_{r+p'}`), then the halves are added pairwise,
//! `z_j = y_j + y_{j+p'/2}`, and so on down to one value
//! (`tree_sum`). Large arrays take Rabenseifner's schedule: a
//! reduce-scatter by recursive halving (round `k` exchanges half of the
//! remaining segment with the rank `p' / 2^k` away and adds, the lower
//! rank's partial first) and an all-gather by recursive doubling, so a sum
//! costs `2 log2 p'` messages (two more when `P` is not a power of two) and
//! `2 (p' - 1) / p'` of the array each way, as a ring all-reduce moves but
//! with logarithmic latency. Small arrays are all-gathered and added in
//! the same tree. Results are the same bits on every rank and on every run
//! with the same number of ranks.
//!
//! **Failures.** A rank whose local work failed must still take part in the
//! next collective, or the others would wait forever. [`agree`] is that
//! collective: every rank says whether it failed, and if any did, every rank
//! returns the same [`Error::RankFailed`] (the lowest failing rank's error).
//! [`Communicator::check_same`] compares a description of the parameters
//! across ranks before any work ([`Error::ShardMismatch`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::error::{Error, Result};

/// Traffic of a communicator since it was created (this rank's side).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CommStats {
    /// Collective calls (each primitive counts once).
    pub collectives: u64,
    /// Bytes this rank sent.
    pub bytes_sent: u64,
    /// Bytes this rank received.
    pub bytes_received: u64,
    /// Seconds spent inside collectives (waiting included).
    pub seconds: f64,
}

impl CommStats {
    /// `self - earlier`: the traffic between two readings.
    pub fn since(&self, earlier: &CommStats) -> CommStats {
        CommStats {
            collectives: self.collectives - earlier.collectives,
            bytes_sent: self.bytes_sent - earlier.bytes_sent,
            bytes_received: self.bytes_received - earlier.bytes_received,
            seconds: self.seconds - earlier.seconds,
        }
    }
}

/// Counters a backend updates in its primitives.
#[derive(Debug, Default)]
pub(crate) struct CommCounters {
    collectives: AtomicU64,
    sent: AtomicU64,
    received: AtomicU64,
    nanos: AtomicU64,
}

impl CommCounters {
    /// Records one primitive that sent and received `sent` / `received` values.
    pub(crate) fn record(&self, sent: usize, received: usize, started: Instant) {
        self.collectives.fetch_add(1, Ordering::Relaxed);
        self.sent.fetch_add(8 * sent as u64, Ordering::Relaxed);
        self.received.fetch_add(8 * received as u64, Ordering::Relaxed);
        self.nanos.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    pub(crate) fn read(&self) -> CommStats {
        CommStats {
            collectives: self.collectives.load(Ordering::Relaxed),
            bytes_sent: self.sent.load(Ordering::Relaxed),
            bytes_received: self.received.load(Ordering::Relaxed),
            seconds: self.nanos.load(Ordering::Relaxed) as f64 * 1e-9,
        }
    }
}

/// A group of `size` ranks, this one being `rank`: MPI ([`super::Mpi`],
/// feature `mpi`), threads of one process ([`super::ThreadGroup`]) or a
/// single process ([`SingleProcess`]).
///
/// Every rank must call the same collectives in the same order with
/// consistent sizes; the sharded fits do. All collectives block.
pub trait Communicator {
    /// This rank, `0 .. size`.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn size(&self) -> usize;
    /// Every rank's `local` concatenated in rank order, on every rank;
    /// `counts[r]` is rank `r`'s length (the same slice on every rank).
    fn all_gather_varcount(&self, local: &[f64], counts: &[usize]) -> Result<Vec<f64>>;
    /// Rank `r` receives, concatenated in rank order, the piece each rank
    /// sent it: `send` holds this rank's pieces for ranks `0, 1, ..` in
    /// order, `send_counts[r]` long; `recv_counts[s]` is the length of the
    /// piece rank `s` sends here.
    fn all_to_all_varcount(&self, send: &[f64], send_counts: &[usize], recv_counts: &[usize]) -> Result<Vec<f64>>;
    /// `values` of rank `root` on every rank (the same length everywhere).
    fn broadcast(&self, root: usize, values: &mut [f64]) -> Result<()>;
    /// Traffic so far.
    fn stats(&self) -> CommStats;

    /// Every rank calls this together: this rank sends `send` to `partner`
    /// and receives `receive_len` values from it (pairs must be mutual); a
    /// rank with `None` takes no part in this round. The default runs one
    /// all-to-all with a single non-empty piece; backends with
    /// point-to-point messages send just the pair's.
    fn send_receive(&self, partner: Option<usize>, send: &[f64], receive_len: usize) -> Result<Vec<f64>> {
        let p = self.size();
        let mut send_counts = vec![0; p];
        let mut recv_counts = vec![0; p];
        if let Some(q) = partner {
            check_root(q, p)?;
            send_counts[q] = send.len();
            recv_counts[q] = receive_len;
        } else if !send.is_empty() || receive_len != 0 {
            return Err(Error::DimensionMismatch { what: "values exchanged without a partner", expected: 0, found: send.len().max(receive_len) });
        }
        self.all_to_all_varcount(send, &send_counts, &recv_counts)
    }

    /// Every rank's `n`, in rank order (each below `2^53`).
    fn gather_counts(&self, n: usize) -> Result<Vec<usize>> {
        let ones = vec![1; self.size()];
        let all = self.all_gather_varcount(&[n as f64], &ones)?;
        Ok(all.into_iter().map(|v| v as usize).collect())
    }

    /// Element-wise sum over the ranks in the fixed tree of the module
    /// docs: every rank passes the same length and gets the same bits.
    fn sum(&self, values: &mut [f64]) -> Result<()> {
        let p = self.size();
        let n = values.len();
        if p == 1 || n == 0 {
            return Ok(());
        }
        if n < 64 * p {
            // Small: gather everything, add in the tree.
            let all = self.all_gather_varcount(values, &vec![n; p])?;
            let mut column = vec![0.0; p];
            for (i, v) in values.iter_mut().enumerate() {
                column.iter_mut().enumerate().for_each(|(r, c)| *c = all[r * n + i]);
                *v = tree_sum(&mut column);
            }
            return Ok(());
        }
        let rank = self.rank();
        let p2 = 1usize << (usize::BITS - 1 - p.leading_zeros());
        let extra = p - p2;
        // Fold rank r + p' into rank r.
        let fold_partner = if rank < extra { Some(rank + p2) } else if rank >= p2 { Some(rank - p2) } else { None };
        let folding = fold_partner.filter(|_| rank >= p2);
        let received = if extra > 0 { self.send_receive(fold_partner, if folding.is_some() { values } else { &[] }, if rank < extra { n } else { 0 })? } else { Vec::new() };
        if rank < extra {
            values.iter_mut().zip(&received).for_each(|(v, &x)| *v += x);
        }
        if rank < p2 {
            // Reduce-scatter by recursive halving: block b of n / p' ends on rank b.
            let block = |b: usize| segment(n, p2, b);
            let span = |first: usize, count: usize| block(first).start..block(first + count - 1).end;
            let mut first = 0;
            let mut dist = p2 / 2;
            while dist > 0 {
                let partner = rank ^ dist;
                let upper = rank & dist != 0;
                let (keep, give) = if upper { (first + dist, first) } else { (first, first + dist) };
                let (keep, give) = (span(keep, dist), span(give, dist));
                let theirs = self.send_receive(Some(partner), &values[give], keep.len())?;
                for (v, &x) in values[keep.clone()].iter_mut().zip(&theirs) {
                    *v = if rank < partner { *v + x } else { x + *v };
                }
                if upper {
                    first += dist;
                }
                dist /= 2;
            }
            debug_assert_eq!(first, rank);
            // All-gather by recursive doubling.
            let mut dist = 1;
            while dist < p2 {
                let partner = rank ^ dist;
                let theirs_first = first ^ dist;
                let (mine, theirs) = (span(first, dist), span(theirs_first, dist));
                let got = self.send_receive(Some(partner), &values[mine], theirs.len())?;
                values[theirs].copy_from_slice(&got);
                first = first.min(theirs_first);
                dist *= 2;
            }
        } else {
            // Idle in the 2 log2 p' rounds (collective where the backend's
            // exchange is).
            for _ in 0..2 * p2.trailing_zeros() {
                self.send_receive(None, &[], 0)?;
            }
        }
        // Unfold: rank r sends the sum back to rank r + p'.
        if extra == 0 {
            return Ok(());
        }
        let sending = rank < extra;
        let back = self.send_receive(fold_partner, if sending { values } else { &[] }, if rank >= p2 { n } else { 0 })?;
        if rank >= p2 {
            values.copy_from_slice(&back);
        }
        Ok(())
    }

    /// `sum` of one number.
    fn sum_scalar(&self, value: f64) -> Result<f64> {
        let mut v = [value];
        self.sum(&mut v)?;
        Ok(v[0])
    }

    /// Element-wise maximum over the ranks (NaN wins, so a NaN anywhere is seen everywhere).
    fn max(&self, values: &mut [f64]) -> Result<()> {
        let p = self.size();
        let n = values.len();
        if p == 1 || n == 0 {
            return Ok(());
        }
        let all = self.all_gather_varcount(values, &vec![n; p])?;
        for (i, v) in values.iter_mut().enumerate() {
            *v = (0..p).map(|r| all[r * n + i]).fold(f64::NEG_INFINITY, |a, b| if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) });
        }
        Ok(())
    }

    /// The largest `(value, global index)` over the ranks; on equal values
    /// the lower index (what one sequential scan of the whole array finds).
    /// A rank with nothing to offer passes `f64::NEG_INFINITY`.
    fn arg_max(&self, value: f64, index: usize) -> Result<(f64, usize)> {
        let p = self.size();
        if p == 1 {
            return Ok((value, index));
        }
        let all = self.all_gather_varcount(&[value, index as f64], &vec![2; p])?;
        let mut best = (all[0], all[1] as usize);
        for r in 1..p {
            let (v, i) = (all[2 * r], all[2 * r + 1] as usize);
            if v > best.0 || (v == best.0 && i < best.1) || (best.0.is_nan() && !v.is_nan()) {
                best = (v, i);
            }
        }
        Ok(best)
    }

    /// [`Communicator::arg_max`] that also brings the winner's `payload`
    /// (e.g. the chosen sample's row) to every rank, in the same single
    /// collective: every rank passes a payload of the same length.
    fn arg_max_carrying(&self, value: f64, index: usize, payload: &[f64]) -> Result<(f64, usize, Vec<f64>)> {
        let p = self.size();
        if p == 1 {
            return Ok((value, index, payload.to_vec()));
        }
        let width = 2 + payload.len();
        let mut mine = Vec::with_capacity(width);
        mine.extend([value, index as f64]);
        mine.extend_from_slice(payload);
        let all = self.all_gather_varcount(&mine, &vec![width; p])?;
        let mut winner = 0;
        for r in 1..p {
            let (v, i) = (all[r * width], all[r * width + 1] as usize);
            let (bv, bi) = (all[winner * width], all[winner * width + 1] as usize);
            if v > bv || (v == bv && i < bi) || (bv.is_nan() && !v.is_nan()) {
                winner = r;
            }
        }
        let w = &all[winner * width..(winner + 1) * width];
        Ok((w[0], w[1] as usize, w[2..].to_vec()))
    }

    /// One rank's `values` (its length known to all) on every rank.
    fn broadcast_from(&self, root: usize, values: &mut Vec<f64>) -> Result<()> {
        let mut len = [values.len() as f64];
        self.broadcast(root, &mut len)?;
        values.resize(len[0] as usize, 0.0);
        self.broadcast(root, values)
    }

    /// Fails on every rank with [`Error::ShardMismatch`] unless every rank
    /// passes the same `description` (e.g. `format!("{params:?}")`; Rust
    /// prints floats so that they read back exactly).
    fn check_same(&self, what: &'static str, description: &str) -> Result<()> {
        if self.size() == 1 {
            return Ok(());
        }
        let mine = fingerprint(description);
        let all = self.all_gather_varcount(&mine, &vec![mine.len(); self.size()])?;
        let first = &all[..mine.len()];
        match (1..self.size()).find(|&r| &all[r * mine.len()..(r + 1) * mine.len()] != first) {
            Some(rank) => Err(Error::ShardMismatch { what, rank }),
            None => Ok(()),
        }
    }
}

/// Every rank's outcome of a step that may fail on some ranks only: `Ok`
/// everywhere when every rank succeeded, otherwise [`Error::RankFailed`]
/// with the lowest failing rank's error on every rank (one small all-gather,
/// and a broadcast of the message when something failed).
pub fn agree<T>(comm: &dyn Communicator, local: Result<T>) -> Result<T> {
    let p = comm.size();
    if p == 1 {
        return local;
    }
    let code = match &local {
        Ok(_) => 0.0,
        Err(e) if e.is_invalid_input() => 1.0,
        Err(_) => 2.0,
    };
    let codes = comm.all_gather_varcount(&[code], &vec![1; p])?;
    let Some(rank) = codes.iter().position(|&c| c != 0.0) else {
        return local;
    };
    let mut message: Vec<f64> = match &local {
        Err(e) if comm.rank() == rank => match e {
            // Already agreed on elsewhere: keep the original text.
            Error::RankFailed { message, .. } => message.bytes().map(f64::from).collect(),
            e => e.to_string().bytes().map(f64::from).collect(),
        },
        _ => Vec::new(),
    };
    comm.broadcast_from(rank, &mut message)?;
    let message = String::from_utf8_lossy(&message.iter().map(|&b| b as u8).collect::<Vec<u8>>()).into_owned();
    Err(Error::RankFailed { rank, invalid_input: codes[rank] == 1.0, message })
}

/// Rows `r` of `0..n` split into `parts` nearly equal blocks (the first
/// `n % parts` one longer).
pub(crate) fn segment(n: usize, parts: usize, r: usize) -> std::ops::Range<usize> {
    let base = n / parts;
    let extra = n % parts;
    let start = r * base + r.min(extra);
    start..start + base + usize::from(r < extra)
}

/// The ranks' values added in the fixed tree of [`Communicator::sum`]:
/// `x_r + x_{r+p'}` for the ranks past the largest power of two `p'`, then
/// `y_j + y_{j+h}` with `h` halving down to one (`values` is overwritten).
pub(crate) fn tree_sum(values: &mut [f64]) -> f64 {
    let p = values.len();
    if p == 0 {
        return 0.0;
    }
    let mut h = 1usize << (usize::BITS - 1 - p.leading_zeros());
    for r in 0..p - h {
        values[r] += values[r + h];
    }
    while h > 1 {
        h /= 2;
        for j in 0..h {
            values[j] += values[j + h];
        }
    }
    values[0]
}

/// The digest of `text`'s bytes ([`crate::linalg::digest`]).
fn fingerprint(text: &str) -> [f64; 4] {
    crate::linalg::digest(text.bytes().map(u64::from))
}

/// One process, rank 0 of 1: every collective is the identity.
#[derive(Debug, Default)]
pub struct SingleProcess {
    counters: CommCounters,
}

impl SingleProcess {
    /// The group of this process alone.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Communicator for SingleProcess {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn all_gather_varcount(&self, local: &[f64], counts: &[usize]) -> Result<Vec<f64>> {
        check_counts(counts, 1, 0, local.len())?;
        self.counters.record(0, 0, Instant::now());
        Ok(local.to_vec())
    }
    fn all_to_all_varcount(&self, send: &[f64], send_counts: &[usize], recv_counts: &[usize]) -> Result<Vec<f64>> {
        check_total(send_counts, 1, send.len())?;
        check_total(recv_counts, 1, send.len())?;
        self.counters.record(0, 0, Instant::now());
        Ok(send.to_vec())
    }
    fn broadcast(&self, root: usize, _values: &mut [f64]) -> Result<()> {
        check_root(root, 1)?;
        self.counters.record(0, 0, Instant::now());
        Ok(())
    }
    fn stats(&self) -> CommStats {
        self.counters.read()
    }
}

/// `counts` has one entry per rank and this rank's entry is `len`.
pub(crate) fn check_counts(counts: &[usize], size: usize, rank: usize, len: usize) -> Result<()> {
    if counts.len() != size {
        return Err(Error::DimensionMismatch { what: "counts per rank", expected: size, found: counts.len() });
    }
    if counts[rank] != len {
        return Err(Error::DimensionMismatch { what: "this rank's count", expected: counts[rank], found: len });
    }
    Ok(())
}

/// `counts` has one entry per rank and they add up to `len`.
pub(crate) fn check_total(counts: &[usize], size: usize, len: usize) -> Result<()> {
    if counts.len() != size {
        return Err(Error::DimensionMismatch { what: "counts per rank", expected: size, found: counts.len() });
    }
    let total = counts.iter().try_fold(0usize, |a, &c| a.checked_add(c)).ok_or(Error::ShapeOverflow { what: "counts per rank", rows: size, cols: 1 })?;
    if total != len {
        return Err(Error::DimensionMismatch { what: "sum of the counts per rank", expected: total, found: len });
    }
    Ok(())
}

pub(crate) fn check_root(root: usize, size: usize) -> Result<()> {
    if root >= size {
        return Err(Error::IndexOutOfRange { what: "root rank", index: root, len: size });
    }
    Ok(())
}

/// A rank's local work, agreed on with the others in a sharded fit
/// ([`agree`]: a failure on one rank is [`Error::RankFailed`] on every
/// rank); in one process (`None`) the result itself.
pub(crate) fn agreed<T>(comm: Option<&dyn Communicator>, local: Result<T>) -> Result<T> {
    match comm {
        Some(comm) => agree(comm, local),
        None => local,
    }
}

/// Whether `resident` holds on every rank (a sharded PSD fit takes the
/// route of its `[M_q]_+` only when the training features are resident
/// on every rank); in one process `resident` itself. Collective.
pub(crate) fn same_route(comm: Option<&dyn Communicator>, resident: bool) -> Result<bool> {
    match comm {
        Some(comm) => Ok(comm.sum_scalar(f64::from(u8::from(!resident)))? == 0.0),
        None => Ok(resident),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_cover_the_range_in_order() {
        for n in [0, 1, 5, 64, 1000] {
            for p in 1..6 {
                let mut next = 0;
                for r in 0..p {
                    let s = segment(n, p, r);
                    assert_eq!(s.start, next);
                    assert!(s.len() == n / p || s.len() == n / p + 1);
                    next = s.end;
                }
                assert_eq!(next, n);
            }
        }
    }

    #[test]
    fn fingerprints_tell_descriptions_apart() {
        assert_eq!(fingerprint("rbf(0.5)"), fingerprint("rbf(0.5)"));
        assert_ne!(fingerprint("rbf(0.5)"), fingerprint("rbf(0.50000001)"));
    }
}
