//! Replacing a set of lock-free hash maps by a fresh, smaller set while other threads
//! keep using them ([`Tables`]): how the manager gives back the memory of its sensor maps
//! after a burst of clients expired (a map's table only grows: [`crate::sync::hash_map`]).
//!
//! The maps (the value `T`, e.g. the manager's sensor maps and resolution cache) sit
//! behind one atomically replaced pointer, `current`. Each sensor map ([`Table`]) maps a
//! key to a shared value (`Arc<V>`) that is *the* sensor of that key: every record of the
//! key must land in the same `Arc`, and expiry kills values ([`Mortal`]) and unlinks them.
//!
//! # The protocol
//!
//! A rebuild (one at a time: a try-flag) of `M` into `N`:
//!
//! 1. `N` = a fresh `T` holding the live entries of `M` (the same `Arc`s): the first copy.
//! 2. `prev = M`; publish `current = N` (a `SeqCst` swap); `fence(SeqCst)`.
//! 3. The second copy: every live entry of `M` into `N` with get-or-insert semantics (an
//!    entry of `N` wins unless it is dead, then it is replaced); then dead entries of `N`
//!    are unlinked (values killed while they were being copied).
//! 4. `prev = null`; `M` is retired (freed by the epoch once no pinned thread holds it).
//!
//! A thread that wants the value of a key ([`Tables::live`]) uses it only after a
//! *settle*: whatever value `v` it found or inserted in map `m`, it issues
//! `fence(SeqCst)`, checks `v` is not dead and re-loads `current`; if `current` is no
//! longer `m`, it offers `v` to the new current (get-or-insert) and settles what that
//! returns (another thread's value may win: then `v` is dropped unused). A miss in the
//! current map looks in `prev` (after a fence) before it creates a value.
//!
//! Why nothing is lost or split: a thread uses `v` from the old `M` only if its re-load
//! (after its fence `F_a`) still read `M`, so `F_a` precedes the publish, hence the
//! rebuild's fence, in the single order of `SeqCst` operations; the second copy (after
//! that fence) then sees `v` in `M` and puts it in `N`. It finds `N` holding a different
//! live value only if a thread `b` missed the key in `N` and then in `prev = M`, after
//! its own fence `F_b`; `b` loaded `current = N`, so the publish precedes `F_b`, and its
//! miss in `M` puts `F_b` before `F_a`; then `F_a` follows the publish and the re-load
//! could not have read `M`. A thread that reads `prev = null` reads it after the second
//! copy, and then finds (get-or-insert) what that copy put in `N`. Values killed by
//! expiry ([`Tables::unlink`]: mark dead, unlink from the map it was found in, fence,
//! unlink from `current`) meet the same fence pairs: either the killer's unlink sees the
//! copy/offer into `N`, or the copier's later dead check (after its fence) sees the mark.
//!
//! The maps are taken to be linearizable ([`crate::sync::hash_map`]'s operations are), so a
//! lookup that misses a key is ordered before an insert of it that it did not see; and an
//! iteration sees every entry present throughout it.
//!
//! Records into a value already settled (the manager's cached resolutions) pay nothing:
//! the protocol only runs where a key is looked up or created.

use std::ptr;
use std::sync::Arc;

#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicBool};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
#[cfg(not(loom))]
use std::sync::atomic::{fence, AtomicBool};

use crate::sync::cow::{AtomicBox, AtomicRef, Guard, Loaded};

/// A value expiry can kill: once dead it is never used again nor copied into a map.
pub trait Mortal {
    /// Killed by expiry.
    fn is_dead(&self) -> bool;
}

/// A linearizable concurrent map from keys to shared values.
pub trait Table {
    /// The key.
    type Key: Clone;
    /// The shared value.
    type Value: Mortal;

    /// The value under `key`.
    fn get(&self, key: &Self::Key) -> Option<Arc<Self::Value>>;

    /// The value under `key`, after inserting `value` if there was none.
    fn get_or_insert(&self, key: &Self::Key, value: Arc<Self::Value>) -> Arc<Self::Value>;

    /// Removes the entry of `key` if it holds `value` (the same `Arc`).
    fn remove_same(&self, key: &Self::Key, value: &Arc<Self::Value>);

    /// Every entry (a weakly consistent snapshot, as an iteration sees it).
    fn entries(&self) -> Vec<(Self::Key, Arc<Self::Value>)>;
}

/// See the module documentation.
pub struct Tables<T> {
    current: AtomicBox<T>,
    /// The maps a rebuild is copying from (set before the publish, cleared after the
    /// second copy), else null.
    prev: AtomicRef<T>,
    /// Held by the one rebuild in progress.
    rebuilding: AtomicBool,
}

impl<T> Tables<T> {
    /// Maps `initial`.
    pub fn new(initial: T) -> Self {
        Tables {
            current: AtomicBox::new(initial),
            prev: AtomicRef::null(),
            rebuilding: AtomicBool::new(false),
        }
    }

    /// The current maps (one acquire load).
    #[inline]
    pub fn load<'g>(&self, guard: &'g Guard) -> &'g T {
        self.current.load(guard).get()
    }

    /// The maps a rebuild in progress is copying from.
    #[inline]
    pub fn prev<'g>(&self, guard: &'g Guard) -> Option<&'g T> {
        self.prev.load(guard).map(|p| p.get())
    }

    /// The live value of `key` in the map `table` selects, created with `create` if there
    /// is none (a value for `key`); settled (see the module documentation), so records into it are never lost.
    pub fn live<Tab: Table>(
        &self,
        table: impl Fn(&T) -> &Tab,
        key: &Tab::Key,
        create: impl Fn() -> Arc<Tab::Value>,
        guard: &Guard,
    ) -> Arc<Tab::Value> {
        let mut m = self.load(guard);
        // A value found in older maps, to offer to `m`.
        let mut offer: Option<Arc<Tab::Value>> = None;
        loop {
            let map = table(m);
            let found = match offer.take() {
                Some(v) => map.get_or_insert(key, v),
                None => match map.get(key) {
                    Some(v) => v,
                    None => {
                        // Pairs with a settle's fence: a value some thread uses from the
                        // maps being copied is visible in `prev` now (or `prev` is null
                        // and the value is in `m`, found by the get-or-insert).
                        fence(SeqCst);
                        let old = self
                            .prev(guard)
                            .and_then(|p| table(p).get(key))
                            .filter(|v| !v.is_dead());
                        map.get_or_insert(key, old.unwrap_or_else(&create))
                    }
                },
            };
            // The settle. The fence pairs with a rebuild's (after its publish) and with an
            // unlink's (after its mark): see the module documentation.
            fence(SeqCst);
            if found.is_dead() {
                // Killed by expiry: unlink it if it is still there and look again.
                map.remove_same(key, &found);
                continue;
            }
            let now = self.load(guard);
            if ptr::eq(now, m) {
                return found;
            }
            // A rebuild published new maps since `m` was loaded: `found` is used only if
            // it is (or becomes) the value there.
            m = now;
            offer = Some(found);
        }
    }

    /// Unlinks `value`, just killed (marked dead) by the caller, from the map `table`
    /// selects in `maps` (where the caller found it) and from the current maps, into
    /// which a rebuild may have copied it.
    pub fn unlink<Tab: Table>(
        &self,
        table: impl Fn(&T) -> &Tab,
        maps: &T,
        key: &Tab::Key,
        value: &Arc<Tab::Value>,
        guard: &Guard,
    ) {
        table(maps).remove_same(key, value);
        // Pairs with the settle and second-copy fences: either they see the mark, or
        // this load sees the maps they copied `value` into and the removal below sees
        // the copy.
        fence(SeqCst);
        let now = self.load(guard);
        if !ptr::eq(now, maps) {
            table(now).remove_same(key, value);
        }
    }

    /// Replaces the current maps by `build(current)` (which copies their live entries:
    /// the first copy), runs `copy(old, new)` (the second copy: [`copy_again`] on each
    /// table), a fence, `sweep(new)` ([`unlink_dead`] on each table), and retires the old
    /// maps. Returns false without doing anything if another rebuild is in progress.
    pub fn rebuild(
        &self,
        build: impl FnOnce(&T) -> T,
        copy: impl FnOnce(&T, &T),
        sweep: impl FnOnce(&T),
        guard: &Guard,
    ) -> bool {
        if self
            .rebuilding
            .compare_exchange(false, true, Acquire, Relaxed)
            .is_err()
        {
            return false;
        }
        let old: Loaded<'_, T> = self.current.load(guard);
        let new = Box::new(build(old.get()));
        // `prev` before the publish: a thread that loads the new maps sees `prev` set or
        // already cleared (after the second copy).
        self.prev.set(Some(old));
        let displaced = self.current.swap(new, guard);
        debug_assert!(
            ptr::eq(displaced.get(), old.get()),
            "only a rebuild publishes"
        );
        // Pairs with the settle fences: a value some thread settled in `old` (its re-load
        // still saw `old`) is visible to the second copy below.
        fence(SeqCst);
        let new = self.load(guard);
        copy(old.get(), new);
        // Pairs with an unlink's fence: either the killer removes what the copy put in
        // `new`, or the sweep sees the mark.
        fence(SeqCst);
        sweep(new);
        // Only now may a miss in the new maps skip `old`: everything settled there is in
        // the new maps.
        self.prev.set(None);
        // SAFETY: `old` was displaced by our swap; neither `current` nor `prev` points to
        // it any more, and only this rebuild (the flag) retires it.
        unsafe { self.current.retire(displaced, guard) };
        self.rebuilding.store(false, Release);
        true
    }
}

/// The second copy of a rebuild: every live entry of `old` into `new`, unless `new`
/// already holds a live value for the key (then `old`'s value was never used: the thread
/// that inserted it adopted the other one when it settled).
pub fn copy_again<Tab: Table>(old: &Tab, new: &Tab) {
    for (key, value) in old.entries() {
        if value.is_dead() {
            continue;
        }
        loop {
            let there = new.get_or_insert(&key, value.clone());
            if Arc::ptr_eq(&there, &value) || !there.is_dead() {
                break;
            }
            // A value killed since the first copy: the live one replaces it.
            new.remove_same(&key, &there);
        }
    }
}

/// The end of a rebuild (after the second copy and a fence): unlinks from `new` the values killed while they
/// were being copied.
pub fn unlink_dead<Tab: Table>(new: &Tab) {
    for (key, value) in new.entries() {
        if value.is_dead() {
            new.remove_same(&key, &value);
        }
    }
}
