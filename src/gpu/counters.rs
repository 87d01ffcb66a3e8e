//! Counters of the data moved between host and device and of the GPU work
//! submitted ([`TransferStats`]), kept per context.

use std::sync::atomic::{AtomicU64, Ordering};

use super::GpuContext;

/// Counters of the data moved between host and device and of the GPU work
/// submitted, since the device was opened or last reset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransferStats {
    /// Bytes of data written from the host into GPU buffers (matrices,
    /// vectors; dispatch descriptors are counted apart).
    pub host_to_device_bytes: u64,
    /// Bytes of dispatch descriptors (problem shapes, offsets, kernel
    /// parameters) written to the GPU: control, not data.
    pub descriptor_bytes: u64,
    /// Host matrices uploaded (calls of `upload`).
    pub uploads: u64,
    /// Bytes read back from GPU buffers to the host.
    pub device_to_host_bytes: u64,
    /// Compute dispatches recorded.
    pub dispatches: u64,
    /// Command buffers submitted to the queue.
    pub submissions: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    h2d: AtomicU64,
    descriptors: AtomicU64,
    uploads: AtomicU64,
    d2h: AtomicU64,
    dispatches: AtomicU64,
    submissions: AtomicU64,
}

impl Counters {
    pub(crate) fn count_upload(&self, bytes: u64) {
        self.h2d.fetch_add(bytes, Ordering::Relaxed);
    }
    pub(crate) fn count_descriptors(&self, bytes: u64) {
        self.descriptors.fetch_add(bytes, Ordering::Relaxed);
    }
    pub(crate) fn count_matrix_upload(&self) {
        self.uploads.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn count_download(&self, bytes: u64) {
        self.d2h.fetch_add(bytes, Ordering::Relaxed);
    }
    pub(crate) fn count_dispatch(&self) {
        self.dispatches.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn count_submission(&self) {
        self.submissions.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn snapshot(&self) -> TransferStats {
        TransferStats {
            host_to_device_bytes: self.h2d.load(Ordering::Relaxed),
            descriptor_bytes: self.descriptors.load(Ordering::Relaxed),
            uploads: self.uploads.load(Ordering::Relaxed),
            device_to_host_bytes: self.d2h.load(Ordering::Relaxed),
            dispatches: self.dispatches.load(Ordering::Relaxed),
            submissions: self.submissions.load(Ordering::Relaxed),
        }
    }
    /// Puts the counters back to `s` (the tuner's own work is not the caller's traffic).
    pub(crate) fn restore(&self, s: &TransferStats) {
        self.h2d.store(s.host_to_device_bytes, Ordering::Relaxed);
        self.descriptors.store(s.descriptor_bytes, Ordering::Relaxed);
        self.uploads.store(s.uploads, Ordering::Relaxed);
        self.d2h.store(s.device_to_host_bytes, Ordering::Relaxed);
        self.dispatches.store(s.dispatches, Ordering::Relaxed);
        self.submissions.store(s.submissions, Ordering::Relaxed);
    }
    pub(crate) fn reset(&self) {
        for c in [&self.h2d, &self.descriptors, &self.uploads, &self.d2h, &self.dispatches, &self.submissions] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

impl GpuContext {
    /// The counters of data moved and work submitted.
    pub fn transfer_stats(&self) -> TransferStats {
        self.counters.snapshot()
    }

    /// Sets every counter to zero.
    pub fn reset_transfer_stats(&self) {
        self.counters.reset()
    }

}
