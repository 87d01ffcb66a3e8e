//! Ranks as threads of one process ([`ThreadGroup`]): the same collectives
//! as MPI through shared memory, to run and test sharded fits without an
//! MPI installation (and several GPUs of one machine from one process).
//!
//! A rank that leaves the group (returns or panics) while others wait in a
//! collective makes them fail with [`Error::RankFailed`] instead of waiting
//! forever.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use super::communicator::{check_counts, check_root, check_total, CommCounters, CommStats, Communicator};
use crate::error::{Error, Result};

/// Runs `size` ranks on threads of this process.
#[derive(Debug, Clone, Copy)]
pub struct ThreadGroup;

impl ThreadGroup {
    /// Runs `work` on `size` threads, each with its [`ThreadRank`], and
    /// returns their results in rank order. A panic in one rank is re-raised
    /// here after every thread has ended (the others' collectives fail).
    ///
    /// Errors: [`Error::InvalidParameter`] for `size == 0`.
    pub fn run<R: Send>(size: usize, work: impl Fn(&ThreadRank) -> R + Sync) -> Result<Vec<R>> {
        if size == 0 {
            return Err(Error::InvalidParameter { name: "size", reason: "a group needs at least one rank".into() });
        }
        let shared = Arc::new(Shared {
            size,
            state: Mutex::new(Round { slots: (0..size).map(|_| None).collect(), generation: 0, arrived: 0, read: 0, collecting: true, departed: None }),
            changed: Condvar::new(),
        });
        let results = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..size)
                .map(|rank| {
                    let me = ThreadRank { rank, shared: Arc::clone(&shared), counters: CommCounters::default() };
                    let work = &work;
                    scope.spawn(move || {
                        let _leave = Departure(&me);
                        work(&me)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join()).collect::<Vec<_>>()
        });
        let mut out = Vec::with_capacity(size);
        for r in results {
            match r {
                Ok(v) => out.push(v),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        Ok(out)
    }
}

/// One rank of a [`ThreadGroup`]: the [`Communicator`] its thread uses.
#[derive(Debug)]
pub struct ThreadRank {
    rank: usize,
    shared: Arc<Shared>,
    counters: CommCounters,
}

#[derive(Debug)]
struct Shared {
    size: usize,
    state: Mutex<Round>,
    changed: Condvar,
}

/// One exchange: every rank deposits a piece per destination, then takes
/// the pieces addressed to it; the next exchange starts once all have read.
#[derive(Debug)]
struct Round {
    slots: Vec<Option<Vec<Vec<f64>>>>,
    generation: u64,
    arrived: usize,
    read: usize,
    collecting: bool,
    departed: Option<usize>,
}

/// Marks its rank as gone when its thread ends, normally or by a panic.
struct Departure<'a>(&'a ThreadRank);

impl Drop for Departure<'_> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.departed.get_or_insert(self.0.rank);
        self.0.shared.changed.notify_all();
    }
}

impl ThreadRank {
    fn lock(&self) -> MutexGuard<'_, Round> {
        self.shared.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn left(rank: usize) -> Error {
        Error::RankFailed { rank, invalid_input: false, message: "the rank left the group during a collective".into() }
    }

    /// Deposits `pieces[d]` for every rank `d` and returns the pieces every
    /// rank addressed to this one, in rank order.
    fn exchange(&self, pieces: Vec<Vec<f64>>) -> Result<Vec<Vec<f64>>> {
        let size = self.shared.size;
        let mut state = self.lock();
        while !state.collecting {
            if let Some(r) = state.departed {
                return Err(Self::left(r));
            }
            state = self.shared.changed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        state.slots[self.rank] = Some(pieces);
        state.arrived += 1;
        let generation = state.generation;
        if state.arrived == size {
            state.collecting = false;
            state.generation += 1;
            self.shared.changed.notify_all();
        } else {
            while state.generation == generation {
                if let Some(r) = state.departed {
                    return Err(Self::left(r));
                }
                state = self.shared.changed.wait(state).unwrap_or_else(|p| p.into_inner());
            }
        }
        let mut mine = Vec::with_capacity(size);
        for s in 0..size {
            let from = state.slots[s].as_mut().expect("every rank deposited");
            mine.push(std::mem::take(&mut from[self.rank]));
        }
        state.read += 1;
        if state.read == size {
            state.slots.iter_mut().for_each(|s| *s = None);
            state.arrived = 0;
            state.read = 0;
            state.collecting = true;
            self.shared.changed.notify_all();
        }
        Ok(mine)
    }
}

impl Communicator for ThreadRank {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.shared.size
    }
    fn all_gather_varcount(&self, local: &[f64], counts: &[usize]) -> Result<Vec<f64>> {
        check_counts(counts, self.size(), self.rank, local.len())?;
        let started = Instant::now();
        let received = self.exchange(vec![local.to_vec(); self.size()])?;
        let out: Vec<f64> = received.concat();
        self.counters.record(local.len() * (self.size() - 1), out.len() - local.len(), started);
        check_total(counts, self.size(), out.len())?;
        Ok(out)
    }
    fn all_to_all_varcount(&self, send: &[f64], send_counts: &[usize], recv_counts: &[usize]) -> Result<Vec<f64>> {
        check_total(send_counts, self.size(), send.len())?;
        let started = Instant::now();
        let mut pieces = Vec::with_capacity(self.size());
        let mut at = 0;
        for &c in send_counts {
            pieces.push(send[at..at + c].to_vec());
            at += c;
        }
        let received = self.exchange(pieces)?;
        for (s, piece) in received.iter().enumerate() {
            if piece.len() != recv_counts.get(s).copied().unwrap_or(usize::MAX) {
                return Err(Error::DimensionMismatch { what: "piece received from a rank", expected: recv_counts.get(s).copied().unwrap_or(0), found: piece.len() });
            }
        }
        let out = received.concat();
        self.counters.record(send.len() - send_counts[self.rank], out.len() - recv_counts[self.rank], started);
        Ok(out)
    }
    fn broadcast(&self, root: usize, values: &mut [f64]) -> Result<()> {
        check_root(root, self.size())?;
        let started = Instant::now();
        let pieces = if self.rank == root { vec![values.to_vec(); self.size()] } else { vec![Vec::new(); self.size()] };
        let received = self.exchange(pieces)?;
        if self.rank != root {
            let from = &received[root];
            if from.len() != values.len() {
                return Err(Error::DimensionMismatch { what: "broadcast length", expected: from.len(), found: values.len() });
            }
            values.copy_from_slice(from);
            self.counters.record(0, values.len(), started);
        } else {
            self.counters.record(values.len() * (self.size() - 1), 0, started);
        }
        Ok(())
    }
    fn stats(&self) -> CommStats {
        self.counters.read()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distributed::agree;

    #[test]
    fn sums_follow_the_fixed_tree_and_are_identical_on_every_rank() {
        // Values with bits below each other's rounding, so that any other
        // order of the additions gives other bits.
        let value = |i: usize, r: usize| ((i * 31 + r * 17) % 13) as f64 * 0.1 + 1e-17 * (r * r + 1) as f64 + if r % 2 == 1 { 1e16 } else { 0.0 };
        for p in 1..8 {
            for n in [1, 7, 300, 1000, 64 * p + 3] {
                let out = ThreadGroup::run(p, |c| {
                    let mut v: Vec<f64> = (0..n).map(|i| value(i, c.rank())).collect();
                    let before = c.stats();
                    c.sum(&mut v).unwrap();
                    (v, c.stats().since(&before))
                })
                .unwrap();
                for i in 0..n {
                    let mut column: Vec<f64> = (0..p).map(|r| value(i, r)).collect();
                    let expected = crate::distributed::communicator::tree_sum(&mut column);
                    for (v, _) in &out {
                        assert_eq!(v[i].to_bits(), expected.to_bits(), "p {p} n {n} i {i}");
                    }
                }
                if p > 1 && n >= 64 * p {
                    // Rabenseifner: 2 log2 p' rounds, 2 more past a power of two.
                    let p2 = 1usize << (usize::BITS - 1 - p.leading_zeros());
                    let rounds = 2 * p2.trailing_zeros() as u64 + if p2 == p { 0 } else { 2 };
                    for (_, stats) in &out {
                        assert_eq!(stats.collectives, rounds, "p {p} n {n}");
                    }
                    // Rank p' - 1 (which folds nothing in) sends 2 (p' - 1) / p'
                    // of the array, to within the blocks' rounding.
                    let sent = out[p2 - 1].1.bytes_sent as f64 / 8.0;
                    let ideal = 2.0 * (p2 - 1) as f64 / p2 as f64 * n as f64;
                    assert!((sent - ideal).abs() <= 2.0 * p2 as f64, "p {p} n {n}: sent {sent}, ideal {ideal}");
                }
            }
        }
    }

    #[test]
    fn the_tree_adds_in_its_stated_order() {
        let mut v = [1.0, 2.0, 4.0];
        assert_eq!(crate::distributed::communicator::tree_sum(&mut v), (1.0 + 4.0) + 2.0);
        let mut v = [1e16, 1.0, -1e16, 1.0, 1.0];
        // ((x0 + x4) + x2) + (x1 + x3)
        assert_eq!(crate::distributed::communicator::tree_sum(&mut v), ((1e16 + 1.0) + -1e16) + (1.0 + 1.0));
    }

    #[test]
    fn arg_max_breaks_ties_towards_the_lower_index() {
        let out = ThreadGroup::run(3, |c| c.arg_max(if c.rank() == 0 { 1.0 } else { 2.0 }, 10 - c.rank()).unwrap()).unwrap();
        assert!(out.iter().all(|&b| b == (2.0, 8)));
    }

    #[test]
    fn the_winner_brings_its_payload() {
        let out = ThreadGroup::run(3, |c| c.arg_max_carrying([1.0, 3.0, 3.0][c.rank()], 10 - c.rank(), &[c.rank() as f64; 2]).unwrap()).unwrap();
        assert!(out.iter().all(|b| *b == (3.0, 8, vec![2.0, 2.0])));
    }

    #[test]
    fn one_failing_rank_fails_every_rank_with_its_error() {
        let out = ThreadGroup::run(3, |c| {
            let local: Result<()> = if c.rank() == 1 { Err(Error::Empty { what: "x", rows: 0, cols: 2 }) } else { Ok(()) };
            agree(c, local)
        })
        .unwrap();
        for r in out {
            match r {
                Err(Error::RankFailed { rank: 1, invalid_input: true, message }) => assert!(message.contains("x is empty")),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_rank_that_leaves_early_does_not_hang_the_others() {
        let out = ThreadGroup::run(3, |c| if c.rank() == 2 { Ok(0.0) } else { c.sum_scalar(1.0) }).unwrap();
        assert!(matches!(out[0], Err(Error::RankFailed { rank: 2, .. })));
        assert!(matches!(out[1], Err(Error::RankFailed { rank: 2, .. })));
    }

    #[test]
    fn mismatched_descriptions_are_found() {
        let out = ThreadGroup::run(3, |c| c.check_same("kernel", if c.rank() == 2 { "rbf(1)" } else { "rbf(0.5)" })).unwrap();
        assert!(out.iter().all(|r| matches!(r, Err(Error::ShardMismatch { what: "kernel", rank: 2 }))));
    }
}
