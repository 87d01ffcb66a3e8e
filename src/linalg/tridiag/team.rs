//! The thread team of the reduction's level-2 products: the caller and
//! `size - 1` scoped helpers that run jobs in lockstep and spin between
//! them (OpenBLAS's scheme), so that a job starts without waking a thread
//! and part `p` of every product runs on the same thread.

/// Threads that run jobs `f(p)`, `p` in `0 .. size`, in lockstep with
/// their caller (`p = 0`): OpenBLAS's scheme for level-2 products. The
/// helpers spin between jobs (then yield), so a job starts within
/// nanoseconds, and part `p` always runs on the same thread, whose cache
/// keeps the columns it owns from one product to the next.
pub(super) struct Team<'a> {
    pub(super) size: usize,
    shared: Option<&'a TeamShared>,
    /// One buffer of `n` per thread for partial products (none for a team
    /// of one, whose products run sequentially).
    pub(super) scratch: Vec<std::sync::Mutex<Vec<f64>>>,
}

struct TeamShared {
    generation: std::sync::atomic::AtomicUsize,
    finished: std::sync::atomic::AtomicUsize,
    stop: std::sync::atomic::AtomicBool,
    job: std::sync::atomic::AtomicPtr<()>,
    panicked: std::sync::atomic::AtomicBool,
}

/// Most threads in a [`Team`].
pub(super) const MAX_TEAM: usize = 64;

/// Spins before a waiting thread of a [`Team`] starts to yield its core.
const SPINS_BEFORE_YIELD: u32 = 1 << 16;

/// One step of a [`Team`]'s waits: spin, then (after
/// [`SPINS_BEFORE_YIELD`] steps, e.g. on an oversubscribed machine) yield.
fn wait_step(spins: &mut u32) {
    if *spins < SPINS_BEFORE_YIELD {
        *spins += 1;
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// Runs `body` with a [`Team`] of `size` threads (the caller and `size - 1`
/// scoped helpers, which end with it); `n` is the length of the scratch
/// buffers.
pub(super) fn with_team<R>(size: usize, n: usize, body: impl FnOnce(&Team<'_>) -> R) -> R {
    use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
    if size <= 1 {
        return body(&Team { size: 1, shared: None, scratch: Vec::new() });
    }
    let scratch: Vec<_> = (0..size).map(|_| std::sync::Mutex::new(vec![0.0f64; n])).collect();
    let shared = TeamShared {
        generation: AtomicUsize::new(0),
        finished: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
        job: AtomicPtr::new(std::ptr::null_mut()),
        panicked: AtomicBool::new(false),
    };
    /// Tells the helpers to return when the team's scope ends (also when
    /// `body` panics), so that the scope can join them.
    struct StopOnDrop<'s>(&'s TeamShared);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.stop.store(true, std::sync::atomic::Ordering::Release);
        }
    }
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&shared);
        let mut helpers = 0;
        for p in 1..size {
            let shared = &shared;
            let helper = move || {
                let mut seen = 0usize;
                loop {
                    let mut spins = 0u32;
                    loop {
                        let g = shared.generation.load(Ordering::Acquire);
                        if g != seen {
                            seen = g;
                            break;
                        }
                        if shared.stop.load(Ordering::Acquire) {
                            return;
                        }
                        wait_step(&mut spins);
                    }
                    // SAFETY: `Team::run` stored a pointer to a live
                    // `&dyn Fn` before bumping the generation, and keeps it
                    // alive until every helper has counted itself finished.
                    let job = unsafe { *(shared.job.load(Ordering::Acquire) as *const &(dyn Fn(usize) + Sync)) };
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(p))).is_err() {
                        shared.panicked.store(true, Ordering::Release);
                    }
                    shared.finished.fetch_add(1, Ordering::AcqRel);
                }
            };
            // A thread that cannot be started shrinks the team (down to the
            // caller alone) instead of failing the reduction.
            if std::thread::Builder::new().spawn_scoped(s, helper).is_err() {
                break;
            }
            helpers += 1;
        }
        let size = 1 + helpers;
        let mut scratch = scratch;
        scratch.truncate(size);
        body(&Team { size, shared: (size > 1).then_some(&shared), scratch })
    })
}

impl Team<'_> {
    /// Runs `f(p)` for every `p` in `0 .. size`, `p = 0` on the caller, and
    /// returns when all have finished.
    pub(super) fn run(&self, f: &(dyn Fn(usize) + Sync)) {
        use std::sync::atomic::Ordering;
        let Some(shared) = self.shared else {
            f(0);
            return;
        };
        let job: &(dyn Fn(usize) + Sync) = f;
        shared.finished.store(0, Ordering::Relaxed);
        shared.job.store(&job as *const &(dyn Fn(usize) + Sync) as *mut (), Ordering::Release);
        shared.generation.fetch_add(1, Ordering::AcqRel);
        f(0);
        let mut spins = 0u32;
        while shared.finished.load(Ordering::Acquire) + 1 < self.size {
            wait_step(&mut spins);
        }
        assert!(!shared.panicked.load(Ordering::Acquire), "a tridiagonalisation helper thread panicked");
    }

    /// Column boundaries `0 = b_0 <= .. <= b_size = m` splitting the lower
    /// triangle of order `m` into parts of equal area.
    pub(super) fn bounds(&self, m: usize) -> Vec<usize> {
        let total = (m * (m + 1) / 2) as f64;
        let mut bounds = vec![0usize; self.size + 1];
        let mut s = 0usize;
        let mut done = 0.0f64;
        for (p, bound) in bounds[1..self.size].iter_mut().enumerate() {
            let target = total * (p + 1) as f64 / self.size as f64;
            while s < m && done < target {
                done += (m - s) as f64;
                s += 1;
            }
            *bound = s;
        }
        bounds[self.size] = m;
        bounds
    }
}
