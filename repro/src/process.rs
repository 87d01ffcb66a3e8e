//! Process-wide settings of the reproduction programs.

/// Has glibc's allocator keep freed memory for reuse instead of handing it
/// back to the kernel: blocks up to 32 MiB come from the heap (not each
/// from its own `mmap`) and freed heap memory is not trimmed below 1 GiB.
///
/// burn's CPU backend allocates a fresh buffer for most tensor operations;
/// with glibc's defaults every buffer above the (adaptive) `mmap`
/// threshold is mapped and unmapped per operation, so each training step
/// pays a page fault for every page it touches (about 1.4 million faults
/// for three CPU epochs of `eksvd_neural_bench`, 0.41 million with this
/// setting, and 1.2-1.4x less time per epoch). The memory kept is what the
/// steps free and allocate again, so the peak resident set stays that of
/// the data and the network (within 1 % there).
///
/// Call it at the start of `main`, before other threads start. Returns
/// whether both settings took; a no-op returning `false` on targets other
/// than Linux with glibc.
pub fn reuse_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const MMAP_THRESHOLD: libc::c_int = 32 << 20;
        const TRIM_THRESHOLD: libc::c_int = 1 << 30;
        // Safety: mallopt only changes the allocator's parameters; glibc
        // takes its own lock for that.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 && libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    /// The settings take on glibc (the development and CI targets).
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn mallopt_takes_the_settings() {
        assert!(super::reuse_freed_memory());
    }
}
