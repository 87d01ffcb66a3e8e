//! Host memory: the one fallible path for buffers sized by the caller.
//!
//! Every host buffer whose size follows from the arguments of a call
//! (kernel and Gram matrices, products, dense dual systems, random-feature
//! maps, sample draws, index lists) is asked for here. The request is
//!
//! 1. sized with checked arithmetic: `rows x cols x size_of::<T>()` that
//!    overflows `usize` can never be allocated;
//! 2. compared with the host budget, the machine's physical memory (an
//!    allocation larger than it would only be granted lazily by an
//!    overcommitting kernel, and the process killed when it is touched);
//! 3. allocated fallibly (the allocator's null is an error, not an abort).
//!
//! Any failure is [`Error::OutOfMemory`] with [`Memory::Host`](crate::error::Memory::Host),
//! naming what was asked for and its size. Where a call allocates deep inside
//! an algorithm, its entry point checks the largest buffers with
//! [`check_host`] before any work, so a size that could never fit fails at
//! once.

use nalgebra::DMatrix;

use crate::error::{Error, Result};

/// Bytes of `count` values of `T`, or an out-of-memory error naming `what`.
pub(crate) fn bytes_of<T>(count: usize, what: &str) -> Result<usize> {
    count
        .checked_mul(std::mem::size_of::<T>())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| Error::host_memory(format!("{what}: {count} values overflow the address space")))
}

/// Entries of a `rows x cols` matrix, or an out-of-memory error naming `what`.
pub(crate) fn entries(rows: usize, cols: usize, what: &str) -> Result<usize> {
    rows.checked_mul(cols).ok_or_else(|| Error::host_memory(format!("{what}: {rows} x {cols} entries overflow the address space")))
}

/// The host budget in bytes: physical memory where the system reports it.
pub(crate) fn host_budget() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf reads system constants and has no preconditions.
        let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
        if pages > 0 && page > 0 {
            return (pages as u64).checked_mul(page as u64);
        }
    }
    None
}

/// Checks that `count` values of `T` fit the host budget; allocates nothing.
/// For entry points whose buffers are allocated later, deep in the work.
pub(crate) fn check_host<T>(count: usize, what: &str) -> Result<()> {
    let bytes = bytes_of::<T>(count, what)?;
    match host_budget() {
        Some(budget) if bytes as u64 > budget => Err(Error::host_memory(format!("{what} needs {bytes} bytes, more than the {budget} bytes of physical memory"))),
        _ => Ok(()),
    }
}

/// [`check_host`] for a `rows x cols` matrix of `T`.
pub(crate) fn check_host_matrix<T>(rows: usize, cols: usize, what: &str) -> Result<()> {
    check_host::<T>(entries(rows, cols, what)?, what)
}

/// A vector of `len` zeros (all-zero bytes, e.g. `f64`, `f32`, `usize`),
/// fallibly: zeroed pages come from the allocator (`calloc`), untouched
/// until written.
pub(crate) fn zeroed_vec<T: bytemuck::Zeroable>(len: usize, what: &str) -> Result<Vec<T>> {
    check_host::<T>(len, what)?;
    if len == 0 || std::mem::size_of::<T>() == 0 {
        return Ok((0..len).map(|_| T::zeroed()).collect());
    }
    let layout = std::alloc::Layout::array::<T>(len).map_err(|_| Error::host_memory(format!("{what}: {len} values overflow the address space")))?;
    // SAFETY: the layout has a non-zero size (len > 0, T not zero-sized).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) } as *mut T;
    if ptr.is_null() {
        return Err(Error::host_memory(format!("{what}: the system refused {} bytes", layout.size())));
    }
    // SAFETY: `ptr` was allocated by the global allocator with the layout of
    // `[T; len]`, so capacity `len` matches; its `len` values are all-zero
    // bytes, a valid `T` (`Zeroable`).
    Ok(unsafe { Vec::from_raw_parts(ptr, len, len) })
}

/// A `rows x cols` zero matrix, fallibly ([`zeroed_vec`]).
pub(crate) fn zeroed_matrix<T: nalgebra::Scalar + bytemuck::Zeroable>(rows: usize, cols: usize, what: &str) -> Result<DMatrix<T>> {
    let data = zeroed_vec::<T>(entries(rows, cols, what)?, what)?;
    Ok(DMatrix::from_vec(rows, cols, data))
}

/// An empty vector with room for `len` values, fallibly.
pub(crate) fn with_capacity<T>(len: usize, what: &str) -> Result<Vec<T>> {
    check_host::<T>(len, what)?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|e| Error::host_memory(format!("{what}: {len} values: {e}")))?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Memory;

    fn is_host_oom<T>(r: Result<T>) -> bool {
        matches!(r, Err(Error::OutOfMemory { memory: Memory::Host, .. }))
    }

    #[test]
    fn sizes_that_cannot_exist_are_host_out_of_memory() {
        assert!(is_host_oom(zeroed_vec::<f64>(usize::MAX, "v")));
        assert!(is_host_oom(zeroed_vec::<f64>(usize::MAX / 8 + 1, "v")));
        assert!(is_host_oom(zeroed_matrix::<f64>(1 << 40, 1 << 40, "m")));
        assert!(is_host_oom(zeroed_matrix::<f32>(usize::MAX, 2, "m")));
        assert!(is_host_oom(with_capacity::<usize>(usize::MAX, "idx")));
        assert!(is_host_oom(check_host_matrix::<f64>(200_000, 200_000, "k")));
        assert!(is_host_oom(entries(usize::MAX, 2, "m")));
    }

    #[test]
    fn ordinary_sizes_allocate_zeros() {
        let m = zeroed_matrix::<f64>(300, 7, "m").unwrap();
        assert_eq!(m.shape(), (300, 7));
        assert!(m.iter().all(|&v| v == 0.0));
        let v = zeroed_vec::<u32>(0, "v").unwrap();
        assert!(v.is_empty());
        let w = with_capacity::<f32>(1000, "w").unwrap();
        assert!(w.capacity() >= 1000 && w.is_empty());
        assert!(check_host_matrix::<f64>(1000, 1000, "k").is_ok());
    }

    #[test]
    fn the_budget_is_the_physical_memory() {
        #[cfg(target_os = "linux")]
        {
            let budget = host_budget().expect("linux reports physical memory");
            assert!(budget > 1 << 28, "budget {budget}");
            assert!(check_host::<u8>(budget as usize, "at").is_ok());
            assert!(is_host_oom(check_host::<u8>(budget as usize + 1, "over")));
        }
    }
}
