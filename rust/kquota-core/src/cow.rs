//! A lock-free copy-on-write cell: the concurrency protocol of every sensor.
//!
//! A sensor's whole state (its sample ring and bound) is one immutable value behind an
//! atomic pointer. A writer copies the current value, applies its change (a record, a
//! purge, a bound refresh), and publishes the copy with one compare-and-swap; if another
//! writer published first, it re-copies and re-applies. Every update is therefore applied
//! exactly once to a consistent state (linearizable, nothing lost), no thread ever waits
//! for another (lock-free: a failed CAS means some other update succeeded), and readers
//! never see a half-made change. Old values are freed by epoch-based reclamation once no
//! reader can hold them.
//!
//! Under `--cfg loom` the same protocol runs on loom's atomics, so `cargo test` with
//! loom explores every interleaving of concurrent records, rollovers and purges.

#[cfg(not(loom))]
mod imp {
    use crossbeam_epoch::{self as epoch, Atomic, Owned};
    use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};

    pub use crossbeam_epoch::Guard;

    /// Pins the current thread for reading cells (cheap; hold it for one operation).
    #[inline]
    pub fn pin() -> Guard {
        epoch::pin()
    }

    /// See the module documentation.
    pub struct CowCell<T> {
        ptr: Atomic<T>,
    }

    impl<T: Clone> CowCell<T> {
        /// A cell holding `value`.
        pub fn new(value: T) -> Self {
            CowCell {
                ptr: Atomic::new(value),
            }
        }

        /// The current value, valid while `guard` is held.
        #[inline]
        pub fn load<'g>(&self, guard: &'g Guard) -> &'g T {
            // SAFETY: as in `read`.
            unsafe { self.ptr.load(Acquire, guard).deref() }
        }

        /// Calls `f` on the current value.
        #[inline]
        pub fn read<R>(&self, guard: &Guard, f: impl FnOnce(&T) -> R) -> R {
            let current = self.ptr.load(Acquire, guard);
            // SAFETY: the pointer is never null (set in `new`, replaced only by non-null
            // values) and the pinned guard keeps the value alive while `f` runs.
            f(unsafe { current.deref() })
        }

        /// Applies `f` to a copy of the current value and publishes the copy atomically.
        /// `f` may run more than once (on a fresher value each time); its last result
        /// is returned.
        #[inline]
        pub fn update<R>(&self, guard: &Guard, mut f: impl FnMut(&mut T) -> R) -> R {
            let mut current = self.ptr.load(Acquire, guard);
            // SAFETY: as in `read`.
            let mut next = Owned::new(unsafe { current.deref() }.clone());
            loop {
                let result = f(&mut next);
                match self
                    .ptr
                    .compare_exchange(current, next, AcqRel, Acquire, guard)
                {
                    Ok(_) => {
                        // SAFETY: `current` is unlinked now; readers that still hold it are
                        // pinned, and the epoch frees it only after they unpin.
                        unsafe { guard.defer_destroy(current) };
                        return result;
                    }
                    Err(failed) => {
                        current = failed.current;
                        next = failed.new;
                        // SAFETY: as in `read`.
                        (*next).clone_from(unsafe { current.deref() });
                    }
                }
            }
        }
    }

    impl<T> Drop for CowCell<T> {
        fn drop(&mut self) {
            // SAFETY: `&mut self` means no other thread can reach the cell any more.
            unsafe {
                let guard = epoch::unprotected();
                drop(self.ptr.load(Relaxed, guard).into_owned());
            }
        }
    }
}

#[cfg(loom)]
mod imp {
    use loom::sync::atomic::AtomicPtr;
    use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
    use std::sync::Mutex;

    /// Loom builds free replaced values when the cell drops (after the model's threads
    /// have joined), which keeps the modelled protocol identical to the real one.
    pub struct Guard;

    #[inline]
    pub fn pin() -> Guard {
        Guard
    }

    pub struct CowCell<T> {
        ptr: AtomicPtr<T>,
        retired: Mutex<Vec<usize>>,
    }

    impl<T: Clone> CowCell<T> {
        pub fn new(value: T) -> Self {
            CowCell {
                ptr: AtomicPtr::new(Box::into_raw(Box::new(value))),
                retired: Mutex::new(Vec::new()),
            }
        }

        pub fn load<'g>(&'g self, _guard: &'g Guard) -> &'g T {
            // SAFETY: never null; replaced values are only freed in `drop`.
            unsafe { &*self.ptr.load(Acquire) }
        }

        pub fn read<R>(&self, _guard: &Guard, f: impl FnOnce(&T) -> R) -> R {
            // SAFETY: never null; replaced values are only freed in `drop`.
            f(unsafe { &*self.ptr.load(Acquire) })
        }

        pub fn update<R>(&self, _guard: &Guard, mut f: impl FnMut(&mut T) -> R) -> R {
            let mut current = self.ptr.load(Acquire);
            // SAFETY: as in `read`.
            let mut next = Box::new(unsafe { &*current }.clone());
            loop {
                let result = f(&mut next);
                let raw = Box::into_raw(next);
                match self.ptr.compare_exchange(current, raw, AcqRel, Acquire) {
                    Ok(_) => {
                        self.retired.lock().unwrap().push(current as usize);
                        return result;
                    }
                    Err(actual) => {
                        current = actual;
                        // SAFETY: `raw` was never published.
                        next = unsafe { Box::from_raw(raw) };
                        (*next).clone_from(unsafe { &*current });
                    }
                }
            }
        }
    }

    impl<T> Drop for CowCell<T> {
        fn drop(&mut self) {
            // SAFETY: no thread can reach the cell; each pointer was made by Box::into_raw.
            unsafe {
                drop(Box::from_raw(self.ptr.load(Relaxed)));
                for p in self.retired.get_mut().unwrap().drain(..) {
                    drop(Box::from_raw(p as *mut T));
                }
            }
        }
    }
}

pub use imp::{pin, CowCell, Guard};

// SAFETY: the cell hands out `&T` to several threads and moves `T` values between
// threads (a value published by one thread is freed by another).
unsafe impl<T: Send + Sync> Send for CowCell<T> {}
unsafe impl<T: Send + Sync> Sync for CowCell<T> {}
