//! [`HashMap`]: the core's concurrent hash map, reclaimed by the same epoch as every other
//! lock-free structure of the crate ([`crate::sync::cow`], the delay queue's skip list).
//!
//! One epoch for everything means one pin per operation: a record pins once and hands
//! that guard to the map lookup and to its sensor's copy-on-write block. (Maps with
//! their own collector would each add their own pin and fence; papaya 0.2's maps cannot
//! share one collector with values that outlive them, because dropping such a map
//! reclaims everything the shared collector holds.)
//!
//! Open addressing with linear probing over a power-of-two array of atomic pointers to
//! entries, half full at most (entries and tombstones). An entry is a [`Node`]: the key
//! and the value in one reference-counted allocation, so a value that must be shared
//! (the manager's sensors, which a rebuild puts in two maps at once) costs no allocation
//! and no pointer of its own: a lookup goes from the slot straight to the value. A slot goes from empty to
//! an entry, then to a tombstone or to a newer entry of the same key, never back to
//! empty, so a probe that meets an empty slot knows the key is absent. Inserts claim an
//! empty slot with a compare-and-swap; removals swap the entry for a tombstone and retire
//! it to the epoch; lookups take no lock and write nothing.
//!
//! A table past half full is replaced by one a thread builds alone: it *freezes* every
//! slot (a tag bit no compare-and-swap expects, so no insert or removal lands there any
//! more), copies the entry pointers (the entries themselves are shared, not copied) into
//! a table sized for four times the live entries, and publishes it. While it copies,
//! lookups read the frozen slots (nothing can change them), and writers that meet a
//! frozen slot wait for the new table: a resize blocks writers, as papaya's blocking
//! resize mode does. Unlike papaya's, the waiting writers do not help copy: a resizing
//! thread that is descheduled holds up the map's writers (never its readers) until it
//! runs again.

use std::hash::{BuildHasher, Hash};
use std::ops::Deref;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;

use crossbeam_epoch::{Atomic, Guard, Owned, Shared};

/// A borrowed form `Q` of a key `K` that compares with it (and hashes as it does).
pub trait Equivalent<K: ?Sized> {
    /// Whether `self` and `key` are the same key.
    fn equivalent(&self, key: &K) -> bool;
}

impl<K: Eq> Equivalent<K> for K {
    #[inline]
    fn equivalent(&self, key: &K) -> bool {
        self == key
    }
}

/// A slot whose entry was removed.
const TOMBSTONE: usize = 1;
/// A slot a resize has frozen.
const FROZEN: usize = 2;
/// The fewest slots of a table.
const MIN_SLOTS: usize = 8;

/// A key and its value, always inside an `Arc`: a map holds one reference to each node
/// in it (a slot is the pointer of that `Arc`), and its users may hold more. The key
/// first, then the value (`repr(C)`: a lookup compares the key and then reads the value's
/// first fields, which a value type can put first).
#[repr(C, align(8))]
pub struct Node<K, V> {
    key: K,
    value: V,
}

impl<K, V> Node<K, V> {
    /// A node for `key` and `value`.
    pub fn new(key: K, value: V) -> Arc<Self> {
        Arc::new(Node { key, value })
    }

    /// The key.
    #[inline]
    pub fn key(&self) -> &K {
        &self.key
    }

    /// Another reference to the node.
    ///
    /// # Safety
    ///
    /// `self` lives inside an `Arc` that is not dropped while this runs: it was loaded
    /// from a slot under a guard (the map's reference is released only once no guard
    /// of that time is held) or borrowed from an `Arc`.
    #[inline]
    unsafe fn to_arc(&self) -> Arc<Self> {
        let p: *const Self = self;
        // SAFETY: the caller's contract: `p` came from `Arc::into_raw` and its count is
        // at least one.
        unsafe {
            Arc::increment_strong_count(p);
            Arc::from_raw(p)
        }
    }
}

impl<K, V> Deref for Node<K, V> {
    type Target = V;

    #[inline]
    fn deref(&self) -> &V {
        &self.value
    }
}

type Entry<K, V> = Node<K, V>;

/// Releases the map's reference to the node at `s` once no pinned thread can hold it.
///
/// # Safety
///
/// `s` was unlinked from the map (no slot points to it any more) by the caller, once.
unsafe fn retire<K, V>(s: Shared<'_, Entry<K, V>>, guard: &Guard) {
    let raw = s.with_tag(0).as_raw();
    // SAFETY: the caller's contract; the slot held the reference `Arc::into_raw` gave.
    unsafe { guard.defer_unchecked(move || drop(Arc::from_raw(raw))) };
}

struct Table<K, V> {
    slots: Box<[Atomic<Entry<K, V>>]>,
    /// Slots ever claimed (entries and tombstones).
    used: AtomicUsize,
    /// Held by the thread that resizes this table.
    resizing: AtomicBool,
    /// The table this one was copied into, once the copy is complete.
    next: Atomic<Table<K, V>>,
}

impl<K, V> Table<K, V> {
    fn with_slots(slots: usize) -> Self {
        Table {
            slots: (0..slots).map(|_| Atomic::null()).collect(),
            used: AtomicUsize::new(0),
            resizing: AtomicBool::new(false),
            next: Atomic::null(),
        }
    }

    /// Room for `entries` entries at most half full.
    fn for_entries(entries: usize) -> Self {
        Self::with_slots(
            entries
                .saturating_mul(2)
                .max(MIN_SLOTS)
                .checked_next_power_of_two()
                .expect("a table of fewer than 2^63 slots"),
        )
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    #[inline]
    fn full(&self) -> bool {
        self.used.load(Relaxed) >= self.slots.len() / 2
    }
}

/// See the module documentation.
pub struct HashMap<K, V, S> {
    table: Atomic<Table<K, V>>,
    len: AtomicUsize,
    hasher: S,
}

/// A map and a guard of the epoch: papaya's `pin()` shape, for call sites that do one
/// or a few operations.
pub struct Pinned<'m, K, V, S> {
    map: &'m HashMap<K, V, S>,
    guard: Guard,
}

impl<K, V, S> HashMap<K, V, S> {
    /// An empty map with room for `capacity` entries before its first resize.
    pub fn with_capacity_and_hasher(capacity: usize, hasher: S) -> Self {
        HashMap {
            table: Atomic::new(Table::for_entries(capacity)),
            len: AtomicUsize::new(0),
            hasher,
        }
    }

    /// The number of entries (exact when no operation is in progress).
    #[inline]
    pub fn len(&self) -> usize {
        self.len.load(Relaxed)
    }

    /// Whether the map holds no entry.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The map with a guard pinned for as long as the result lives.
    #[inline]
    pub fn pin(&self) -> Pinned<'_, K, V, S> {
        Pinned {
            map: self,
            guard: crossbeam_epoch::pin(),
        }
    }

    /// The newest table: a resize publishes its table as `next` of the old one first.
    fn newest<'g>(&self, guard: &'g Guard) -> Shared<'g, Table<K, V>> {
        let mut table = self.table.load(Acquire, guard);
        loop {
            // SAFETY: tables are retired only after being replaced as `self.table`;
            // the guard keeps every table it loaded alive.
            let next = unsafe { table.deref() }.next.load(Acquire, guard);
            if next.is_null() {
                return table;
            }
            table = next;
        }
    }

    /// Every entry, as of some moment during the iteration (weakly consistent: entries
    /// inserted or removed meanwhile may or may not be seen; every entry present
    /// throughout is seen once).
    pub fn iter<'g>(&self, guard: &'g Guard) -> impl Iterator<Item = (&'g K, &'g V)> + 'g
    where
        K: 'g,
        V: 'g,
    {
        self.iter_nodes(guard).map(|e| (&e.key, &e.value))
    }

    /// [`Self::iter`], by node.
    fn iter_nodes<'g>(&self, guard: &'g Guard) -> impl Iterator<Item = &'g Node<K, V>> + 'g
    where
        K: 'g,
        V: 'g,
    {
        let table = self.newest(guard);
        // SAFETY: as in `newest`.
        let t = unsafe { table.deref() };
        t.slots.iter().filter_map(move |slot| {
            // SAFETY: a non-null slot points to a live entry, or to one retired while
            // the guard is held (after a removal in a newer table).
            unsafe { slot.load(Acquire, guard).as_ref() }
        })
    }

    /// Waits for the resize of `t` to publish its table.
    #[cold]
    fn wait_for_next<'g>(t: &Table<K, V>, guard: &'g Guard) -> Shared<'g, Table<K, V>> {
        let mut spins = 0u32;
        loop {
            let next = t.next.load(Acquire, guard);
            if !next.is_null() {
                return next;
            }
            if spins < 64 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

// (`'static`, `Send` and `Sync`: removed nodes are released later, by whichever thread
// the epoch frees them on, perhaps after the map itself is gone; and nodes are shared.)
impl<K, V, S> HashMap<K, V, S>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Send + Sync + 'static,
    S: BuildHasher,
{
    /// The value of `key`.
    #[inline]
    pub fn get<'g, Q>(&self, key: &Q, guard: &'g Guard) -> Option<&'g V>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        self.find(key, guard).map(|e| &e.value)
    }

    /// The node of `key`.
    #[inline(always)]
    fn find<'g, Q>(&self, key: &Q, guard: &'g Guard) -> Option<&'g Node<K, V>>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key) as usize;
        let table = self.table.load(Acquire, guard);
        // The first probe, inline: a slot that is neither frozen nor a tombstone holds the
        // key's entry, another entry, or nothing (then the key is absent). Anything else
        // takes the loop, from that slot again.
        // SAFETY: as in `newest`.
        let t = unsafe { table.deref() };
        let s = t.slots[hash & t.mask()].load(Acquire, guard);
        if s.tag() == 0 {
            // SAFETY: as in `iter`.
            match unsafe { s.as_ref() } {
                Some(e) if key.equivalent(&e.key) => return Some(e),
                None => return None,
                Some(_) => {}
            }
        }
        self.probe(key, hash, table, guard)
    }

    /// [`Self::find`]'s probe loop, from the first slot of `hash` in `table`.
    #[inline(never)]
    fn probe<'g, Q>(
        &self,
        key: &Q,
        hash: usize,
        mut table: Shared<'g, Table<K, V>>,
        guard: &'g Guard,
    ) -> Option<&'g Node<K, V>>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        'tables: loop {
            // SAFETY: as in `newest`.
            let t = unsafe { table.deref() };
            let mask = t.mask();
            let mut i = hash & mask;
            for _ in 0..t.slots.len() {
                let s = t.slots[i].load(Acquire, guard);
                if s.tag() & FROZEN != 0 {
                    let next = t.next.load(Acquire, guard);
                    if !next.is_null() {
                        table = next;
                        continue 'tables;
                    }
                    // Frozen and not copied yet: no writer can change the slot until
                    // the copy is published, so what it holds is current.
                }
                // SAFETY: as in `iter`.
                match unsafe { s.as_ref() } {
                    Some(e) if key.equivalent(&e.key) => return Some(e),
                    Some(_) => {}
                    None if s.tag() & TOMBSTONE == 0 => return None,
                    None => {}
                }
                i = (i + 1) & mask;
            }
            return None;
        }
    }

    /// The value of `key`, after inserting `create()` if there was none.
    pub fn get_or_insert_with<'g>(
        &self,
        key: K,
        create: impl FnOnce() -> V,
        guard: &'g Guard,
    ) -> &'g V {
        let mut pending = Pending::Key(key, create);
        &self.put(&mut pending, false, guard).value
    }

    /// The node of `key`, after inserting `node` if there was none.
    pub fn get_or_insert_node(&self, node: Arc<Node<K, V>>, guard: &Guard) -> Arc<Node<K, V>> {
        let mut pending = Pending::<K, V, fn() -> V>::Built(node);
        let found = self.put(&mut pending, false, guard);
        // SAFETY: loaded from a slot under `guard`.
        unsafe { found.to_arc() }
    }

    /// The node of `key`.
    #[inline]
    pub fn get_node<Q>(&self, key: &Q, guard: &Guard) -> Option<Arc<Node<K, V>>>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let node = self.find(key, guard)?;
        // SAFETY: loaded from a slot under `guard`.
        Some(unsafe { node.to_arc() })
    }

    /// Every node for which `keep` holds (see [`Self::iter`]), each as another reference.
    pub fn nodes(
        &self,
        guard: &Guard,
        mut keep: impl FnMut(&K, &V) -> bool,
    ) -> Vec<Arc<Node<K, V>>> {
        self.iter_nodes(guard)
            .filter(|n| keep(&n.key, &n.value))
            // SAFETY: as in `get_node`.
            .map(|n| unsafe { n.to_arc() })
            .collect()
    }

    /// Inserts `value` under `key`, replacing (and retiring) the value there was.
    pub fn insert(&self, key: K, value: V, guard: &Guard) {
        let mut pending = Pending::<K, V, fn() -> V>::Built(Node::new(key, value));
        let _ = self.put(&mut pending, true, guard);
    }

    /// Looks `pending`'s key up; inserts it where it is absent, and where it is present
    /// too if `replace`.
    fn put<'g, F: FnOnce() -> V>(
        &self,
        pending: &mut Pending<K, V, F>,
        replace: bool,
        guard: &'g Guard,
    ) -> &'g Node<K, V> {
        let hash = self.hasher.hash_one(pending.key()) as usize;
        let mut table = self.table.load(Acquire, guard);
        'tables: loop {
            // SAFETY: as in `newest`.
            let t = unsafe { table.deref() };
            let mask = t.mask();
            let mut i = hash & mask;
            let mut probes = 0;
            while probes < t.slots.len() {
                let slot = &t.slots[i];
                let s = slot.load(Acquire, guard);
                if s.tag() & FROZEN != 0 {
                    table = Self::wait_for_next(t, guard);
                    continue 'tables;
                }
                // SAFETY: as in `iter`.
                match unsafe { s.as_ref() } {
                    Some(e) if pending.key() == &e.key => {
                        if !replace {
                            return e;
                        }
                        let new = pending.take();
                        match slot.compare_exchange(s, new, AcqRel, Acquire, guard) {
                            Ok(new) => {
                                // SAFETY: unlinked by our swap (a slot holds an entry
                                // only once); pinned readers may still hold it.
                                unsafe { retire(s, guard) };
                                // SAFETY: just published, and the guard is held.
                                return unsafe { new.deref() };
                            }
                            // Another entry of the key, a tombstone or a freeze: look
                            // at the slot again.
                            // SAFETY: `new` was never published: it is still ours.
                            Err(err) => *pending = unsafe { Pending::back(err.new) },
                        }
                        continue;
                    }
                    Some(_) => {}
                    None if s.tag() & TOMBSTONE == 0 => {
                        if t.full() {
                            table = self.resize(table, guard);
                            continue 'tables;
                        }
                        let new = pending.take();
                        match slot.compare_exchange(Shared::null(), new, AcqRel, Acquire, guard) {
                            Ok(new) => {
                                t.used.fetch_add(1, Relaxed);
                                self.len.fetch_add(1, Relaxed);
                                // SAFETY: just published, and the guard is held.
                                return unsafe { new.deref() };
                            }
                            // Claimed by another insert (perhaps of this key) or
                            // frozen: look at the slot again.
                            // SAFETY: `new` was never published: it is still ours.
                            Err(err) => *pending = unsafe { Pending::back(err.new) },
                        }
                        continue;
                    }
                    None => {}
                }
                i = (i + 1) & mask;
                probes += 1;
            }
            // Every slot probed (tombstones and other keys): make room.
            table = self.resize(table, guard);
        }
    }

    /// Removes the entry of `key` if `pred` holds for it (when the removal takes effect);
    /// returns whether this call removed it.
    pub fn remove_if<Q>(&self, key: &Q, pred: impl Fn(&K, &V) -> bool, guard: &Guard) -> bool
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key) as usize;
        let mut table = self.table.load(Acquire, guard);
        'tables: loop {
            // SAFETY: as in `newest`.
            let t = unsafe { table.deref() };
            let mask = t.mask();
            let mut i = hash & mask;
            let mut probes = 0;
            while probes < t.slots.len() {
                let slot = &t.slots[i];
                let s = slot.load(Acquire, guard);
                if s.tag() & FROZEN != 0 {
                    table = Self::wait_for_next(t, guard);
                    continue 'tables;
                }
                // SAFETY: as in `iter`.
                match unsafe { s.as_ref() } {
                    Some(e) if key.equivalent(&e.key) => {
                        if !pred(&e.key, &e.value) {
                            return false;
                        }
                        let tombstone = Shared::null().with_tag(TOMBSTONE);
                        if slot
                            .compare_exchange(s, tombstone, AcqRel, Acquire, guard)
                            .is_ok()
                        {
                            self.len.fetch_sub(1, Relaxed);
                            // SAFETY: unlinked by our swap; pinned readers may still
                            // hold it.
                            unsafe { retire(s, guard) };
                            return true;
                        }
                        // Replaced, removed or frozen meanwhile: look again.
                        continue;
                    }
                    Some(_) => {}
                    None if s.tag() & TOMBSTONE == 0 => return false,
                    None => {}
                }
                i = (i + 1) & mask;
                probes += 1;
            }
            return false;
        }
    }

    /// Removes every entry for which `keep` is false (when looked at).
    pub fn retain(&self, mut keep: impl FnMut(&K, &V) -> bool, guard: &Guard) {
        for (key, value) in self.iter(guard) {
            if !keep(key, value) {
                self.remove_if(key, |_, v| std::ptr::eq(v, value), guard);
            }
        }
    }

    /// Replaces `table` (when it is still the newest) by a copy sized for four times its
    /// live entries, or waits for the thread doing that; returns the new table.
    #[cold]
    fn resize<'g>(
        &self,
        table: Shared<'g, Table<K, V>>,
        guard: &'g Guard,
    ) -> Shared<'g, Table<K, V>> {
        // SAFETY: as in `newest`.
        let t = unsafe { table.deref() };
        if t.resizing
            .compare_exchange(false, true, Acquire, Relaxed)
            .is_err()
        {
            return Self::wait_for_next(t, guard);
        }
        // Freeze: from here on no insert, replacement or removal lands in `t`.
        let mut live = 0usize;
        for slot in t.slots.iter() {
            if !slot.fetch_or(FROZEN, AcqRel, guard).is_null() {
                live += 1;
            }
        }
        let new = Table::for_entries(live.saturating_mul(2));
        let mask = new.mask();
        for slot in t.slots.iter() {
            let s = slot.load(Acquire, guard);
            if s.is_null() {
                continue;
            }
            // SAFETY: frozen slots hold live entries the guard protects.
            let e = unsafe { s.deref() };
            let mut i = self.hasher.hash_one(&e.key) as usize & mask;
            while !new.slots[i].load(Relaxed, guard).is_null() {
                i = (i + 1) & mask;
            }
            // (The new table is ours alone until published.)
            new.slots[i].store(s.with_tag(0), Relaxed);
        }
        new.used.store(live, Relaxed);
        let new = Owned::new(new).into_shared(guard);
        // `next` first: a lookup that reads a frozen slot and then finds no `next` may
        // use what the slot holds, so no writer may reach `new` before `next` is set.
        t.next.store(new, Release);
        // The resize that made `t` may not have made it `self.table` yet (`t` was
        // reached through its predecessor's `next`): wait for that, briefly.
        while self
            .table
            .compare_exchange(table, new, AcqRel, Acquire, guard)
            .is_err()
        {
            std::hint::spin_loop();
        }
        // SAFETY: `t` is no longer `self.table`; a table owns no entry (they moved to
        // `new`), so retiring it frees only its slots, once no pinned thread holds it.
        unsafe { guard.defer_destroy(table) };
        new
    }
}

impl<K, V, S: Default> Default for HashMap<K, V, S> {
    fn default() -> Self {
        Self::with_capacity_and_hasher(0, S::default())
    }
}

impl<K, V, S> Drop for HashMap<K, V, S> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no other thread can reach the map; every table before the
        // current one was retired when it was replaced, and the entries are those of
        // the current table.
        unsafe {
            let guard = crossbeam_epoch::unprotected();
            let table = self.table.load(Relaxed, guard).into_owned();
            for slot in table.slots.iter() {
                let s = slot.load(Relaxed, guard);
                if !s.is_null() {
                    // The map's reference.
                    drop(Arc::from_raw(s.with_tag(0).as_raw()));
                }
            }
        }
    }
}

impl<K, V, S> Pinned<'_, K, V, S>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Send + Sync + 'static,
    S: BuildHasher,
{
    /// [`HashMap::get`].
    #[inline]
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        self.map.get(key, &self.guard)
    }

    /// [`HashMap::get_or_insert_with`].
    pub fn get_or_insert_with(&self, key: K, create: impl FnOnce() -> V) -> &V {
        self.map.get_or_insert_with(key, create, &self.guard)
    }

    /// [`HashMap::remove_if`].
    pub fn remove_if<Q>(&self, key: &Q, pred: impl Fn(&K, &V) -> bool) -> bool
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        self.map.remove_if(key, pred, &self.guard)
    }

    /// [`HashMap::retain`].
    pub fn retain(&self, keep: impl FnMut(&K, &V) -> bool) {
        self.map.retain(keep, &self.guard)
    }

    /// [`HashMap::iter`].
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> + '_ {
        self.map.iter(&self.guard)
    }
}

/// What an insert puts in: the key and how to make the value, or the node made.
enum Pending<K, V, F> {
    Key(K, F),
    Built(Arc<Node<K, V>>),
    Taken,
}

impl<K, V, F: FnOnce() -> V> Pending<K, V, F> {
    #[inline]
    fn key(&self) -> &K {
        match self {
            Pending::Key(k, _) => k,
            Pending::Built(e) => &e.key,
            Pending::Taken => unreachable!("a pending entry is put back after a failed swap"),
        }
    }

    /// The node as a slot holds it (made now if it was not yet); owned by the caller
    /// until published or handed [`Self::back`].
    fn take<'g>(&mut self) -> Shared<'g, Entry<K, V>> {
        let node = match std::mem::replace(self, Pending::Taken) {
            Pending::Key(key, create) => Node::new(key, create()),
            Pending::Built(node) => node,
            Pending::Taken => unreachable!("a pending entry is put back after a failed swap"),
        };
        Shared::from(Arc::into_raw(node))
    }

    /// The node [`Self::take`] gave, not published.
    ///
    /// # Safety
    ///
    /// `s` came from `take` and no slot holds it.
    unsafe fn back(s: Shared<'_, Entry<K, V>>) -> Self {
        // SAFETY: the caller's contract: the reference `take` made.
        Pending::Built(unsafe { Arc::from_raw(s.as_raw()) })
    }
}

#[cfg(test)]
mod tests;
