//! Lock-free building blocks: an atomically replaceable box ([`AtomicBox`]), a
//! copy-on-write cell over it ([`CowCell`]), a nullable non-owning pointer to a boxed
//! value ([`AtomicRef`]), and a 128-bit atomic word ([`AtomicWord`]).
//!
//! An [`AtomicBox`] holds an immutable value behind an atomic pointer. A writer builds a
//! new value and publishes it with one compare-and-swap; if another writer published
//! first, it rebuilds on the fresher value. Replaced values are freed by epoch-based
//! reclamation once no reader can hold them, so readers never wait and never see a
//! half-made value, and no thread ever waits for another (a failed CAS means another
//! update succeeded).
//!
//! Under `--cfg loom` the same protocols run on loom's primitives, so the model checks in
//! `tests/loom.rs` explore every interleaving of them.

#[cfg(not(loom))]
mod imp {
    use crossbeam_epoch::{self as epoch, Atomic, Owned, Shared};
    use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};

    pub use crossbeam_epoch::Guard;

    /// Pins the current thread so that values it loads stay alive (cheap; hold it for
    /// one operation).
    #[inline]
    pub fn pin() -> Guard {
        epoch::pin()
    }

    /// Frees what was retired (about `retired` values by this thread) as soon as no other
    /// thread is pinned, rather than over the next pins: each pin-and-flush moves this
    /// thread's retired values to the collector, advances the epoch once when it can and
    /// frees up to 8 bags of 64 values retired two epochs back. Call it unpinned, after
    /// retiring something large (a rebuilt table) or many things (expired entries).
    pub fn collect_garbage(retired: usize) {
        for _ in 0..3 + retired / 256 {
            epoch::pin().flush();
        }
    }

    /// A value loaded from an [`AtomicBox`], valid while the guard is held.
    pub struct Loaded<'g, T> {
        shared: Shared<'g, T>,
    }

    impl<'g, T> Loaded<'g, T> {
        /// The value.
        #[inline]
        pub fn get(&self) -> &'g T {
            // SAFETY: never null (set in `new`, replaced only by non-null values); the
            // guard of lifetime 'g keeps it from being freed.
            unsafe { self.shared.deref() }
        }
    }

    impl<T> Clone for Loaded<'_, T> {
        fn clone(&self) -> Self {
            *self
        }
    }

    impl<T> Copy for Loaded<'_, T> {}

    /// See the module documentation.
    pub struct AtomicBox<T> {
        ptr: Atomic<T>,
    }

    impl<T> AtomicBox<T> {
        /// A box holding `value`.
        pub fn new(value: T) -> Self {
            AtomicBox {
                ptr: Atomic::new(value),
            }
        }

        /// The current value.
        #[inline]
        pub fn load<'g>(&self, guard: &'g Guard) -> Loaded<'g, T> {
            Loaded {
                shared: self.ptr.load(Acquire, guard),
            }
        }

        /// Replaces `current` by `new` if `current` is still the value held; on success
        /// the old value is retired, on failure `new` is handed back.
        #[inline]
        pub fn replace<'g>(
            &self,
            current: Loaded<'g, T>,
            new: Box<T>,
            guard: &'g Guard,
        ) -> Result<(), Box<T>> {
            match self.ptr.compare_exchange(
                current.shared,
                Owned::from(new),
                AcqRel,
                Acquire,
                guard,
            ) {
                Ok(_) => {
                    // SAFETY: `current` is unlinked; pinned readers may still hold it and
                    // the epoch frees it only after they unpin.
                    unsafe { guard.defer_destroy(current.shared) };
                    Ok(())
                }
                Err(failed) => Err(failed.new.into_box()),
            }
        }

        /// Publishes `new` with a sequentially consistent swap and hands back the value it
        /// displaced, NOT retired: the caller keeps it reachable as long as it needs (see
        /// [`crate::migrate`]) and then passes it to [`Self::retire`].
        #[inline]
        pub fn swap<'g>(&self, new: Box<T>, guard: &'g Guard) -> Loaded<'g, T> {
            Loaded {
                shared: self.ptr.swap(Owned::from(new), SeqCst, guard),
            }
        }

        /// Frees `old` once no pinned thread can hold it.
        ///
        /// # Safety
        ///
        /// `old` came from [`Self::swap`] on this box, is retired once, and no shared
        /// location (this box, an [`AtomicRef`]) points to it any more.
        #[inline]
        pub unsafe fn retire(&self, old: Loaded<'_, T>, guard: &Guard) {
            // SAFETY: the caller's contract; readers pinned now may still hold `old`, and
            // the epoch frees it only after they unpin.
            unsafe { guard.defer_destroy(old.shared) };
        }
    }

    impl<T> Drop for AtomicBox<T> {
        fn drop(&mut self) {
            // SAFETY: `&mut self`: no other thread can reach the box any more.
            unsafe {
                let guard = epoch::unprotected();
                drop(self.ptr.load(Relaxed, guard).into_owned());
            }
        }
    }

    /// A nullable pointer to a value some [`AtomicBox`] owns (or displaced and has not
    /// retired yet); it never owns nor frees what it points to.
    pub struct AtomicRef<T> {
        ptr: Atomic<T>,
    }

    impl<T> AtomicRef<T> {
        /// A null reference.
        pub fn null() -> Self {
            AtomicRef {
                ptr: Atomic::null(),
            }
        }

        /// The value pointed to, if any (valid while the guard is held, provided the owner
        /// clears this reference before it retires the value).
        #[inline]
        pub fn load<'g>(&self, guard: &'g Guard) -> Option<Loaded<'g, T>> {
            let shared = self.ptr.load(Acquire, guard);
            (!shared.is_null()).then_some(Loaded { shared })
        }

        /// Points to `value` (or to nothing), with release ordering.
        #[inline]
        pub fn set(&self, value: Option<Loaded<'_, T>>) {
            self.ptr
                .store(value.map_or(Shared::null(), |v| v.shared), Release);
        }
    }

    /// A 128-bit atomic word (`cmpxchg16b` on x86-64).
    pub struct AtomicWord(portable_atomic::AtomicU128);

    impl AtomicWord {
        pub fn new(v: u128) -> Self {
            AtomicWord(portable_atomic::AtomicU128::new(v))
        }

        #[inline]
        pub fn load(&self) -> u128 {
            self.0.load(Acquire)
        }

        #[inline]
        pub fn compare_exchange(&self, current: u128, new: u128) -> Result<u128, u128> {
            self.0.compare_exchange(current, new, AcqRel, Acquire)
        }
    }
}

#[cfg(loom)]
mod imp {
    use loom::sync::atomic::AtomicPtr;
    use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
    use std::sync::Mutex;

    /// Loom builds keep replaced values until the box drops (after the model's threads
    /// have joined): the modelled protocol is the real one, only reclamation differs.
    pub struct Guard;

    #[inline]
    pub fn pin() -> Guard {
        Guard
    }

    /// The model frees retired values when the box drops.
    pub fn collect_garbage(_retired: usize) {}

    pub struct Loaded<'g, T> {
        ptr: *mut T,
        _guard: std::marker::PhantomData<&'g T>,
    }

    impl<'g, T> Loaded<'g, T> {
        pub fn get(&self) -> &'g T {
            // SAFETY: never null; replaced values are only freed when the box drops.
            unsafe { &*self.ptr }
        }
    }

    impl<T> Clone for Loaded<'_, T> {
        fn clone(&self) -> Self {
            *self
        }
    }

    impl<T> Copy for Loaded<'_, T> {}

    pub struct AtomicBox<T> {
        ptr: AtomicPtr<T>,
        retired: Mutex<Vec<usize>>,
    }

    impl<T> AtomicBox<T> {
        pub fn new(value: T) -> Self {
            AtomicBox {
                ptr: AtomicPtr::new(Box::into_raw(Box::new(value))),
                retired: Mutex::new(Vec::new()),
            }
        }

        pub fn load<'g>(&self, _guard: &'g Guard) -> Loaded<'g, T> {
            Loaded {
                ptr: self.ptr.load(Acquire),
                _guard: std::marker::PhantomData,
            }
        }

        pub fn replace<'g>(
            &self,
            current: Loaded<'g, T>,
            new: Box<T>,
            _guard: &'g Guard,
        ) -> Result<(), Box<T>> {
            let raw = Box::into_raw(new);
            match self.ptr.compare_exchange(current.ptr, raw, AcqRel, Acquire) {
                Ok(_) => {
                    self.retired.lock().unwrap().push(current.ptr as usize);
                    Ok(())
                }
                // SAFETY: `raw` was never published.
                Err(_) => Err(unsafe { Box::from_raw(raw) }),
            }
        }

        pub fn swap<'g>(&self, new: Box<T>, _guard: &'g Guard) -> Loaded<'g, T> {
            Loaded {
                ptr: self.ptr.swap(Box::into_raw(new), SeqCst),
                _guard: std::marker::PhantomData,
            }
        }

        /// # Safety
        ///
        /// As the non-loom `retire`: `old` came from `swap` and is retired once.
        pub unsafe fn retire(&self, old: Loaded<'_, T>, _guard: &Guard) {
            self.retired.lock().unwrap().push(old.ptr as usize);
        }
    }

    pub struct AtomicRef<T> {
        ptr: AtomicPtr<T>,
    }

    impl<T> AtomicRef<T> {
        pub fn null() -> Self {
            AtomicRef {
                ptr: AtomicPtr::new(std::ptr::null_mut()),
            }
        }

        pub fn load<'g>(&self, _guard: &'g Guard) -> Option<Loaded<'g, T>> {
            let ptr = self.ptr.load(Acquire);
            (!ptr.is_null()).then_some(Loaded {
                ptr,
                _guard: std::marker::PhantomData,
            })
        }

        pub fn set(&self, value: Option<Loaded<'_, T>>) {
            self.ptr
                .store(value.map_or(std::ptr::null_mut(), |v| v.ptr), Release);
        }
    }

    impl<T> Drop for AtomicBox<T> {
        fn drop(&mut self) {
            // SAFETY: no thread can reach the box; each pointer came from Box::into_raw.
            unsafe {
                drop(Box::from_raw(self.ptr.load(Relaxed)));
                for p in self.retired.get_mut().unwrap().drain(..) {
                    drop(Box::from_raw(p as *mut T));
                }
            }
        }
    }

    /// Loom has no 128-bit atomics: the word is modelled as a loom mutex, which keeps
    /// each load and compare-exchange atomic and lets loom interleave them.
    pub struct AtomicWord(loom::sync::Mutex<u128>);

    impl AtomicWord {
        pub fn new(v: u128) -> Self {
            AtomicWord(loom::sync::Mutex::new(v))
        }

        pub fn load(&self) -> u128 {
            *self.0.lock().unwrap()
        }

        pub fn compare_exchange(&self, current: u128, new: u128) -> Result<u128, u128> {
            let mut v = self.0.lock().unwrap();
            if *v == current {
                *v = new;
                Ok(current)
            } else {
                Err(*v)
            }
        }
    }
}

pub use imp::{collect_garbage, pin, AtomicBox, AtomicRef, AtomicWord, Guard, Loaded};

// SAFETY: the box hands out `&T` to several threads and moves `T` values between
// threads (a value published by one thread is freed by another).
unsafe impl<T: Send + Sync> Send for AtomicBox<T> {}
unsafe impl<T: Send + Sync> Sync for AtomicBox<T> {}
// SAFETY: as for `AtomicBox`: it hands out `&T` to several threads.
unsafe impl<T: Send + Sync> Send for AtomicRef<T> {}
unsafe impl<T: Send + Sync> Sync for AtomicRef<T> {}

/// A copy-on-write cell: every update copies the value, changes the copy and publishes
/// it atomically. For state that changes rarely (the quota configuration, throttle-time
/// averages); the rate sensors' hot path avoids the copy (see [`crate::rate_cell`]).
pub struct CowCell<T> {
    inner: AtomicBox<T>,
}

impl<T: Clone> CowCell<T> {
    /// A cell holding `value`.
    pub fn new(value: T) -> Self {
        CowCell {
            inner: AtomicBox::new(value),
        }
    }

    /// The current value, valid while `guard` is held.
    #[inline]
    pub fn load<'g>(&self, guard: &'g Guard) -> &'g T {
        self.inner.load(guard).get()
    }

    /// Calls `f` on the current value.
    #[inline]
    pub fn read<R>(&self, guard: &Guard, f: impl FnOnce(&T) -> R) -> R {
        f(self.load(guard))
    }

    /// Applies `f` to a copy of the current value and publishes the copy atomically.
    /// `f` may run more than once (on a fresher value each time); its last result is
    /// returned.
    pub fn update<R>(&self, guard: &Guard, mut f: impl FnMut(&mut T) -> R) -> R {
        let mut current = self.inner.load(guard);
        let mut next = Box::new(current.get().clone());
        loop {
            let result = f(&mut next);
            match self.inner.replace(current, next, guard) {
                Ok(()) => return result,
                Err(back) => {
                    next = back;
                    current = self.inner.load(guard);
                    (*next).clone_from(current.get());
                }
            }
        }
    }
}
