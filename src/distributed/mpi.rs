//! The MPI backend (feature `mpi`): the world communicator of the `mpi`
//! crate over the system's MPI library.
//!
//! [`Mpi::init`] initialises MPI once per process and installs a panic hook
//! that aborts the whole job: a panicking rank would otherwise finalise MPI
//! while the others wait in a collective, and the job would hang.
//! Messages longer than `i32::MAX` values are sent in pieces.

use std::time::Instant;

use mpi::collective::CommunicatorCollectives;
use mpi::datatype::{Partition, PartitionMut};
use mpi::environment::Universe;
use mpi::topology::{Communicator as _, SimpleCommunicator};
use mpi::traits::Root;

use super::communicator::{check_counts, check_root, check_total, CommCounters, CommStats, Communicator};
use crate::error::{Error, Result};

/// The MPI world of this process, as a [`Communicator`]. Finalises MPI when dropped.
pub struct Mpi {
    world: SimpleCommunicator,
    local_rank: usize,
    counters: CommCounters,
    // Last: dropped (MPI_Finalize) after the communicators.
    _universe: Universe,
}

impl std::fmt::Debug for Mpi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mpi").field("rank", &self.rank()).field("size", &self.size()).field("local_rank", &self.local_rank).finish()
    }
}

/// Largest count one MPI call takes.
const MAX_COUNT: usize = i32::MAX as usize;

impl Mpi {
    /// Initialises MPI (single-threaded: only the calling thread talks to
    /// MPI; the ranks' own thread pools are unaffected) and installs the
    /// aborting panic hook.
    ///
    /// Errors: [`Error::Unsupported`] when MPI was already initialised in
    /// this process.
    pub fn init() -> Result<Mpi> {
        let universe = mpi::initialize().ok_or_else(|| Error::Unsupported("MPI is already initialised in this process".into()))?;
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            // SAFETY: MPI is initialised (the hook is installed after
            // MPI_Init) and MPI_Abort may be called from any state.
            unsafe {
                mpi::ffi::MPI_Abort(mpi::ffi::RSMPI_COMM_WORLD, 101);
            }
        }));
        let world = universe.world();
        let local_rank = world.split_shared(world.rank()).rank() as usize;
        Ok(Mpi { world, local_rank, counters: CommCounters::default(), _universe: universe })
    }

    /// This rank's index among the ranks of its node (shared memory), for
    /// choosing its GPU ([`crate::Device::for_local_rank`]).
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }
}

fn counts_i32(counts: &[usize]) -> (Vec<i32>, Vec<i32>) {
    let mut displs = Vec::with_capacity(counts.len());
    let mut at = 0i32;
    for &c in counts {
        displs.push(at);
        at += c as i32;
    }
    (counts.iter().map(|&c| c as i32).collect(), displs)
}

/// Splits a collective over `total` values into rounds of at most
/// `MAX_COUNT` values each: the fraction `[k/rounds, (k+1)/rounds)` of every count.
fn rounds(total: usize) -> usize {
    total.div_ceil(MAX_COUNT).max(1)
}

fn piece(count: usize, rounds: usize, k: usize) -> std::ops::Range<usize> {
    super::communicator::segment(count, rounds, k)
}

impl Communicator for Mpi {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }
    fn size(&self) -> usize {
        self.world.size() as usize
    }
    fn all_gather_varcount(&self, local: &[f64], counts: &[usize]) -> Result<Vec<f64>> {
        check_counts(counts, self.size(), self.rank(), local.len())?;
        let total = counts.iter().try_fold(0usize, |a, &c| a.checked_add(c)).ok_or(Error::ShapeOverflow { what: "all-gather", rows: counts.len(), cols: 1 })?;
        let started = Instant::now();
        let mut out = vec![0.0; total];
        let offsets: Vec<usize> = counts.iter().scan(0, |at, &c| { let o = *at; *at += c; Some(o) }).collect();
        let k_rounds = rounds(total);
        for k in 0..k_rounds {
            let parts: Vec<std::ops::Range<usize>> = counts.iter().map(|&c| piece(c, k_rounds, k)).collect();
            let lens: Vec<usize> = parts.iter().map(|r| r.len()).collect();
            let (c, d) = counts_i32(&lens);
            let mut buffer = vec![0.0; lens.iter().sum()];
            {
                let mut partition = PartitionMut::new(&mut buffer[..], c, d);
                self.world.all_gather_varcount_into(&local[parts[self.rank()].clone()], &mut partition);
            }
            let mut at = 0;
            for (r, part) in parts.iter().enumerate() {
                out[offsets[r] + part.start..offsets[r] + part.end].copy_from_slice(&buffer[at..at + part.len()]);
                at += part.len();
            }
        }
        self.counters.record(local.len() * (self.size() - 1), total - local.len(), started);
        Ok(out)
    }
    fn all_to_all_varcount(&self, send: &[f64], send_counts: &[usize], recv_counts: &[usize]) -> Result<Vec<f64>> {
        check_total(send_counts, self.size(), send.len())?;
        let total = recv_counts.iter().try_fold(0usize, |a, &c| a.checked_add(c)).ok_or(Error::ShapeOverflow { what: "all-to-all", rows: recv_counts.len(), cols: 1 })?;
        check_total(recv_counts, self.size(), total)?;
        let started = Instant::now();
        let send_offsets: Vec<usize> = send_counts.iter().scan(0, |at, &c| { let o = *at; *at += c; Some(o) }).collect();
        let recv_offsets: Vec<usize> = recv_counts.iter().scan(0, |at, &c| { let o = *at; *at += c; Some(o) }).collect();
        let mut out = vec![0.0; total];
        // Every rank must agree on the number of rounds: the largest total anywhere.
        let mut k_rounds = [rounds(send.len().max(total)) as f64];
        self.world.all_reduce_into(&[k_rounds[0]], &mut k_rounds[..], mpi::collective::SystemOperation::max());
        let k_rounds = k_rounds[0] as usize;
        for k in 0..k_rounds {
            let sparts: Vec<std::ops::Range<usize>> = send_counts.iter().map(|&c| piece(c, k_rounds, k)).collect();
            let rparts: Vec<std::ops::Range<usize>> = recv_counts.iter().map(|&c| piece(c, k_rounds, k)).collect();
            let sbuf: Vec<f64> = sparts.iter().enumerate().flat_map(|(r, p)| send[send_offsets[r] + p.start..send_offsets[r] + p.end].iter().copied()).collect();
            let slens: Vec<usize> = sparts.iter().map(|p| p.len()).collect();
            let rlens: Vec<usize> = rparts.iter().map(|p| p.len()).collect();
            let mut rbuf = vec![0.0; rlens.iter().sum()];
            let (sc, sd) = counts_i32(&slens);
            let (rc, rd) = counts_i32(&rlens);
            {
                let spartition = Partition::new(&sbuf[..], sc, sd);
                let mut rpartition = PartitionMut::new(&mut rbuf[..], rc, rd);
                self.world.all_to_all_varcount_into(&spartition, &mut rpartition);
            }
            let mut at = 0;
            for (r, p) in rparts.iter().enumerate() {
                out[recv_offsets[r] + p.start..recv_offsets[r] + p.end].copy_from_slice(&rbuf[at..at + p.len()]);
                at += p.len();
            }
        }
        self.counters.record(send.len() - send_counts[self.rank()], total - recv_counts[self.rank()], started);
        Ok(out)
    }
    fn broadcast(&self, root: usize, values: &mut [f64]) -> Result<()> {
        check_root(root, self.size())?;
        let started = Instant::now();
        let process = self.world.process_at_rank(root as i32);
        for chunk in values.chunks_mut(MAX_COUNT) {
            process.broadcast_into(chunk);
        }
        if self.rank() == root {
            self.counters.record(values.len() * (self.size() - 1), 0, started);
        } else {
            self.counters.record(0, values.len(), started);
        }
        Ok(())
    }
    fn send_receive(&self, partner: Option<usize>, send: &[f64], receive_len: usize) -> Result<Vec<f64>> {
        let Some(partner) = partner else {
            if !send.is_empty() || receive_len != 0 {
                return Err(Error::DimensionMismatch { what: "values exchanged without a partner", expected: 0, found: send.len().max(receive_len) });
            }
            return Ok(Vec::new());
        };
        check_root(partner, self.size())?;
        let started = Instant::now();
        let process = self.world.process_at_rank(partner as i32);
        let mut out = vec![0.0; receive_len];
        // The same number of pieces on both sides: the partner sends what
        // this rank receives and receives what it sends.
        let k_rounds = rounds(send.len().max(receive_len));
        for k in 0..k_rounds {
            let (s, r) = (piece(send.len(), k_rounds, k), piece(receive_len, k_rounds, k));
            let status = mpi::point_to_point::send_receive_into(&send[s], &process, &mut out[r.clone()], &process);
            let got = status.count(<f64 as mpi::datatype::Equivalence>::equivalent_datatype()) as usize;
            if got != r.len() {
                return Err(Error::DimensionMismatch { what: "values received from the partner rank", expected: r.len(), found: got });
            }
        }
        self.counters.record(send.len(), receive_len, started);
        Ok(out)
    }
    fn stats(&self) -> CommStats {
        self.counters.read()
    }
}
