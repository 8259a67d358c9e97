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
    use super::Thin;
    use crossbeam_epoch as epoch;
    use std::marker::PhantomData;
    use std::ptr::NonNull;
    use std::sync::atomic::AtomicPtr;
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
    pub struct Loaded<'g, T: ?Sized> {
        ptr: NonNull<T>,
        _guard: PhantomData<&'g T>,
    }

    impl<'g, T: ?Sized + Thin> Loaded<'g, T> {
        /// The value at the thin pointer `thin`.
        ///
        /// # Safety
        ///
        /// `thin` came from [`Thin::into_thin`] and is not freed while a guard of
        /// lifetime 'g is held (it was loaded from a box or reference under that guard).
        #[inline]
        unsafe fn from_thin(thin: NonNull<u8>) -> Self {
            Loaded {
                // SAFETY: the caller's contract.
                ptr: unsafe { T::from_thin(thin) },
                _guard: PhantomData,
            }
        }

        fn thin(&self) -> *mut u8 {
            self.ptr.as_ptr().cast()
        }

        /// The value.
        #[inline]
        pub fn get(&self) -> &'g T {
            // SAFETY: `ptr` points to a live boxed value (see `from_thin`); the guard of
            // lifetime 'g keeps it from being freed, and nothing mutates a published value
            // except through its own atomics.
            unsafe { self.ptr.as_ref() }
        }
    }

    impl<T: ?Sized> Clone for Loaded<'_, T> {
        fn clone(&self) -> Self {
            *self
        }
    }

    impl<T: ?Sized> Copy for Loaded<'_, T> {}

    /// Frees the box at `thin` once no thread pinned now can hold it.
    ///
    /// # Safety
    ///
    /// `thin` came from [`Thin::into_thin`], is freed once, and no shared location
    /// points to it any more.
    unsafe fn defer_free<T: ?Sized + Thin>(thin: NonNull<u8>, guard: &Guard) {
        // A raw pointer is not `Send`; the closure carries the address.
        let address = thin.as_ptr() as usize;
        // SAFETY: the caller's contract; the epoch runs the closure only once every thread
        // pinned at this time has unpinned, so no reader holds the value any more.
        unsafe {
            guard.defer_unchecked(move || {
                let thin = NonNull::new_unchecked(address as *mut u8);
                drop(Box::from_raw(T::from_thin(thin).as_ptr()));
            })
        };
    }

    /// See the module documentation.
    pub struct AtomicBox<T: ?Sized + Thin> {
        ptr: AtomicPtr<u8>,
        _owns: PhantomData<Box<T>>,
    }

    impl<T: ?Sized + Thin> AtomicBox<T> {
        /// A box holding `value`.
        pub fn new(value: T) -> Self
        where
            T: Sized,
        {
            Self::from_box(Box::new(value))
        }

        /// A box holding the boxed value.
        pub fn from_box(value: Box<T>) -> Self {
            AtomicBox {
                ptr: AtomicPtr::new(T::into_thin(value).as_ptr()),
                _owns: PhantomData,
            }
        }

        /// The current value.
        #[inline]
        pub fn load<'g>(&self, _guard: &'g Guard) -> Loaded<'g, T> {
            let thin = self.ptr.load(Acquire);
            // SAFETY: never null (set from a box, replaced only by boxes); the value is
            // retired through the epoch only after it is unlinked, and the guard is held.
            unsafe { Loaded::from_thin(NonNull::new_unchecked(thin)) }
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
            let new = T::into_thin(new);
            match self
                .ptr
                .compare_exchange(current.thin(), new.as_ptr(), AcqRel, Acquire)
            {
                Ok(old) => {
                    // SAFETY: `old` (= `current`) is unlinked by this exchange, and only
                    // the thread whose exchange unlinked it retires it.
                    unsafe { defer_free::<T>(NonNull::new_unchecked(old), guard) };
                    Ok(())
                }
                // SAFETY: `new` came from `into_thin` just above and was never published.
                Err(_) => Err(unsafe { Box::from_raw(T::from_thin(new).as_ptr()) }),
            }
        }

        /// Publishes `new` with a sequentially consistent swap and hands back the value it
        /// displaced, NOT retired: the caller keeps it reachable as long as it needs (see
        /// [`crate::sync::table_swap`]) and then passes it to [`Self::retire`].
        #[inline]
        pub fn swap<'g>(&self, new: Box<T>, _guard: &'g Guard) -> Loaded<'g, T> {
            let old = self.ptr.swap(T::into_thin(new).as_ptr(), SeqCst);
            // SAFETY: never null; not retired yet (the caller retires it later), so it
            // lives at least as long as the guard.
            unsafe { Loaded::from_thin(NonNull::new_unchecked(old)) }
        }

        /// Frees `old` once no pinned thread can hold it.
        ///
        /// # Safety
        ///
        /// `old` came from [`Self::swap`] on this box, is retired once, and no shared
        /// location (this box, an [`AtomicRef`]) points to it any more.
        #[inline]
        pub unsafe fn retire(&self, old: Loaded<'_, T>, guard: &Guard) {
            // SAFETY: the caller's contract.
            unsafe { defer_free::<T>(old.ptr.cast(), guard) };
        }
    }

    impl<T: ?Sized + Thin> Drop for AtomicBox<T> {
        fn drop(&mut self) {
            let thin = self.ptr.load(Relaxed);
            // SAFETY: `&mut self`: no other thread can reach the box any more, and the
            // value it holds was never retired.
            unsafe {
                drop(Box::from_raw(
                    T::from_thin(NonNull::new_unchecked(thin)).as_ptr(),
                ))
            };
        }
    }

    /// A nullable pointer to a value some [`AtomicBox`] owns (or displaced and has not
    /// retired yet); it never owns nor frees what it points to.
    pub struct AtomicRef<T: ?Sized> {
        ptr: AtomicPtr<u8>,
        _points: PhantomData<*const T>,
    }

    impl<T: ?Sized + Thin> AtomicRef<T> {
        /// A null reference.
        pub fn null() -> Self {
            AtomicRef {
                ptr: AtomicPtr::new(std::ptr::null_mut()),
                _points: PhantomData,
            }
        }

        /// The value pointed to, if any (valid while the guard is held, provided the owner
        /// clears this reference before it retires the value).
        #[inline]
        pub fn load<'g>(&self, _guard: &'g Guard) -> Option<Loaded<'g, T>> {
            let thin = NonNull::new(self.ptr.load(Acquire))?;
            // SAFETY: set from a `Loaded` of the owning box, which clears this reference
            // before it retires the value (the contract of `load`).
            Some(unsafe { Loaded::from_thin(thin) })
        }

        /// Points to `value` (or to nothing), with release ordering.
        #[inline]
        pub fn set(&self, value: Option<Loaded<'_, T>>) {
            self.ptr
                .store(value.map_or(std::ptr::null_mut(), |v| v.thin()), Release);
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
    use super::Thin;
    use loom::sync::atomic::AtomicPtr;
    use std::marker::PhantomData;
    use std::ptr::NonNull;
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

    pub struct Loaded<'g, T: ?Sized> {
        ptr: NonNull<T>,
        _guard: PhantomData<&'g T>,
    }

    impl<'g, T: ?Sized + Thin> Loaded<'g, T> {
        /// # Safety
        ///
        /// `thin` came from `Thin::into_thin` and is not freed before the box drops.
        unsafe fn from_thin(thin: *mut u8) -> Self {
            Loaded {
                // SAFETY: the caller's contract (and never null).
                ptr: unsafe { T::from_thin(NonNull::new_unchecked(thin)) },
                _guard: PhantomData,
            }
        }

        fn thin(&self) -> *mut u8 {
            self.ptr.as_ptr().cast()
        }

        pub fn get(&self) -> &'g T {
            // SAFETY: replaced values are only freed when the box drops.
            unsafe { self.ptr.as_ref() }
        }
    }

    impl<T: ?Sized> Clone for Loaded<'_, T> {
        fn clone(&self) -> Self {
            *self
        }
    }

    impl<T: ?Sized> Copy for Loaded<'_, T> {}

    pub struct AtomicBox<T: ?Sized + Thin> {
        ptr: AtomicPtr<u8>,
        retired: Mutex<Vec<usize>>,
        _owns: PhantomData<Box<T>>,
    }

    impl<T: ?Sized + Thin> AtomicBox<T> {
        pub fn new(value: T) -> Self
        where
            T: Sized,
        {
            Self::from_box(Box::new(value))
        }

        pub fn from_box(value: Box<T>) -> Self {
            AtomicBox {
                ptr: AtomicPtr::new(T::into_thin(value).as_ptr()),
                retired: Mutex::new(Vec::new()),
                _owns: PhantomData,
            }
        }

        pub fn load<'g>(&self, _guard: &'g Guard) -> Loaded<'g, T> {
            // SAFETY: set from boxes; freed only when the box drops.
            unsafe { Loaded::from_thin(self.ptr.load(Acquire)) }
        }

        pub fn replace<'g>(
            &self,
            current: Loaded<'g, T>,
            new: Box<T>,
            _guard: &'g Guard,
        ) -> Result<(), Box<T>> {
            let new = T::into_thin(new);
            match self
                .ptr
                .compare_exchange(current.thin(), new.as_ptr(), AcqRel, Acquire)
            {
                Ok(old) => {
                    self.retired.lock().unwrap().push(old as usize);
                    Ok(())
                }
                // SAFETY: `new` was never published.
                Err(_) => Err(unsafe { Box::from_raw(T::from_thin(new).as_ptr()) }),
            }
        }

        pub fn swap<'g>(&self, new: Box<T>, _guard: &'g Guard) -> Loaded<'g, T> {
            let old = self.ptr.swap(T::into_thin(new).as_ptr(), SeqCst);
            // SAFETY: freed only when the box drops.
            unsafe { Loaded::from_thin(old) }
        }

        /// # Safety
        ///
        /// As the non-loom `retire`: `old` came from `swap` and is retired once.
        pub unsafe fn retire(&self, old: Loaded<'_, T>, _guard: &Guard) {
            self.retired.lock().unwrap().push(old.thin() as usize);
        }
    }

    pub struct AtomicRef<T: ?Sized> {
        ptr: AtomicPtr<u8>,
        _points: PhantomData<*const T>,
    }

    impl<T: ?Sized + Thin> AtomicRef<T> {
        pub fn null() -> Self {
            AtomicRef {
                ptr: AtomicPtr::new(std::ptr::null_mut()),
                _points: PhantomData,
            }
        }

        pub fn load<'g>(&self, _guard: &'g Guard) -> Option<Loaded<'g, T>> {
            let ptr = self.ptr.load(Acquire);
            // SAFETY: set from a `Loaded`; values are freed only when their box drops.
            (!ptr.is_null()).then(|| unsafe { Loaded::from_thin(ptr) })
        }

        pub fn set(&self, value: Option<Loaded<'_, T>>) {
            self.ptr
                .store(value.map_or(std::ptr::null_mut(), |v| v.thin()), Release);
        }
    }

    impl<T: ?Sized + Thin> Drop for AtomicBox<T> {
        fn drop(&mut self) {
            let free = |p: *mut u8| {
                // SAFETY: no thread can reach the box; each pointer came from `into_thin`
                // and is freed once (the current one and each retired one).
                unsafe {
                    drop(Box::from_raw(
                        T::from_thin(NonNull::new_unchecked(p)).as_ptr(),
                    ))
                }
            };
            free(self.ptr.load(Relaxed));
            for p in self.retired.get_mut().unwrap().drain(..) {
                free(p as *mut u8);
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

use std::ptr::NonNull;

pub use imp::{collect_garbage, pin, AtomicBox, AtomicRef, AtomicWord, Guard, Loaded};

/// A type whose boxes an [`AtomicBox`] keeps behind a thin (one-word) pointer: every
/// sized type, and an unsized type that can find its own length in its allocation (the
/// rate sensor's block, whose sample ring follows its header; see [`crate::kafka::rate_cell`]).
///
/// # Safety
///
/// [`Thin::from_thin`] on the pointer [`Thin::into_thin`] gave must give back the box's
/// pointer, metadata included, with the provenance of the whole allocation.
pub unsafe trait Thin {
    /// The box's pointer without its metadata; the box is leaked (to be rebuilt from
    /// [`Thin::from_thin`]).
    fn into_thin(value: Box<Self>) -> NonNull<u8>;

    /// The pointer of the boxed value at `thin`.
    ///
    /// # Safety
    ///
    /// `thin` came from [`Thin::into_thin`] and its value is not freed.
    unsafe fn from_thin(thin: NonNull<u8>) -> NonNull<Self>;
}

// SAFETY: a sized type's pointer has no metadata; the cast keeps the provenance.
unsafe impl<T> Thin for T {
    #[inline]
    fn into_thin(value: Box<T>) -> NonNull<u8> {
        NonNull::from(Box::leak(value)).cast()
    }

    #[inline]
    unsafe fn from_thin(thin: NonNull<u8>) -> NonNull<T> {
        thin.cast()
    }
}

// SAFETY: the box hands out `&T` to several threads and moves `T` values between
// threads (a value published by one thread is freed by another).
unsafe impl<T: ?Sized + Thin + Send + Sync> Send for AtomicBox<T> {}
unsafe impl<T: ?Sized + Thin + Send + Sync> Sync for AtomicBox<T> {}
// SAFETY: as for `AtomicBox`: it hands out `&T` to several threads.
unsafe impl<T: ?Sized + Send + Sync> Send for AtomicRef<T> {}
unsafe impl<T: ?Sized + Send + Sync> Sync for AtomicRef<T> {}

/// A copy-on-write cell: every update copies the value, changes the copy and publishes
/// it atomically. For state that changes rarely (the quota configuration, throttle-time
/// averages); the rate sensors' hot path avoids the copy (see [`crate::kafka::rate_cell`]).
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
