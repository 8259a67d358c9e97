//! Cache prefetch hints for the hot paths that know which lines they read next.

/// A hint to bring the cache line at `p` into cache; never faults, changes nothing.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it reads nothing the program sees and cannot fault,
    // whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// [`prefetch`] of every cache line of `*p`.
#[cfg(not(loom))]
#[inline(always)]
pub(crate) fn prefetch_all<T>(p: *const T) {
    let bytes = p.cast::<u8>();
    let mut offset = 0;
    while offset < std::mem::size_of::<T>() {
        prefetch(bytes.wrapping_add(offset));
        offset += 64;
    }
}
