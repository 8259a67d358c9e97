//! Quota entities, Kafka's 8-level precedence and the metric tags a request resolves to
//! (spec section 6).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};

use crate::error::{Error, Result};
use crate::kafka::release::KafkaRelease;

/// The marker of a default entity (`kafka-configs --entity-default`).
pub const DEFAULT_MARKER: &str = "<default>";

/// One dimension of an entity: the default entity or a name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EntityName {
    /// `<default>`: every user (or client id) that has no quota of its own.
    Default,
    /// A user principal (as the client authenticates, not sanitized) or a client id.
    Named(String),
}

impl EntityName {
    /// `"<default>"` is the default marker; anything else is a name.
    pub fn parse(name: &str) -> EntityName {
        if name == DEFAULT_MARKER {
            EntityName::Default
        } else {
            EntityName::Named(name.to_owned())
        }
    }

    /// The name as written in configs: `<default>` or the name.
    pub fn as_str(&self) -> &str {
        match self {
            EntityName::Default => DEFAULT_MARKER,
            EntityName::Named(name) => name,
        }
    }
}

/// A quota entity: `<user>`, `<client-id>` or `<user, client-id>`, each named or default.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QuotaEntity {
    user: Option<EntityName>,
    client_id: Option<EntityName>,
}

/// The enabled-levels bit of client-id entities.
pub const CLIENT_LEVEL: u8 = 1;
/// The enabled-levels bit of user entities.
pub const USER_LEVEL: u8 = 2;
/// The enabled-levels bit of user + client-id entities.
pub const USER_CLIENT_LEVEL: u8 = 4;

impl QuotaEntity {
    /// An entity; at least one dimension must be given.
    pub fn new(user: Option<EntityName>, client_id: Option<EntityName>) -> Result<Self> {
        if user.is_none() && client_id.is_none() {
            return Err(Error::InvalidConfig(
                "invalid entity: give a user, a client id or both (use \"<default>\" for the \
                 default entity)"
                    .to_owned(),
            ));
        }
        Ok(QuotaEntity { user, client_id })
    }

    /// An entity from optional strings, `"<default>"` meaning the default entity.
    pub fn parse(user: Option<&str>, client_id: Option<&str>) -> Result<Self> {
        QuotaEntity::new(
            user.map(EntityName::parse),
            client_id.map(EntityName::parse),
        )
    }

    /// The user dimension.
    pub fn user(&self) -> Option<&EntityName> {
        self.user.as_ref()
    }

    /// The client-id dimension.
    pub fn client_id(&self) -> Option<&EntityName> {
        self.client_id.as_ref()
    }

    /// The bit this entity's shape sets in the enabled-levels mask.
    pub fn level_bit(&self) -> u8 {
        match (&self.user, &self.client_id) {
            (Some(_), Some(_)) => USER_CLIENT_LEVEL,
            (Some(_), None) => USER_LEVEL,
            _ => CLIENT_LEVEL,
        }
    }

    /// Whether either dimension is `<default>`.
    pub fn involves_default(&self) -> bool {
        self.user == Some(EntityName::Default) || self.client_id == Some(EntityName::Default)
    }

    /// The key under which the override is stored: users sanitized, as Kafka stores them.
    pub(crate) fn key(&self) -> EntityKey {
        let sanitized = |name: &EntityName| match name {
            EntityName::Default => Level::Default,
            EntityName::Named(n) => Level::Named(sanitize_user(n).into_owned()),
        };
        let raw = |name: &EntityName| match name {
            EntityName::Default => Level::Default,
            EntityName::Named(n) => Level::Named(n.clone()),
        };
        EntityKey {
            user: self.user.as_ref().map(sanitized).unwrap_or(Level::Absent),
            client: self.client_id.as_ref().map(raw).unwrap_or(Level::Absent),
        }
    }
}

impl fmt::Display for QuotaEntity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.user, &self.client_id) {
            (Some(u), Some(c)) => write!(f, "user {:?}, client-id {:?}", u.as_str(), c.as_str()),
            (Some(u), None) => write!(f, "user {:?}", u.as_str()),
            (None, Some(c)) => write!(f, "client-id {:?}", c.as_str()),
            (None, None) => f.write_str("no entity"),
        }
    }
}

/// One dimension of an override key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Level {
    Absent,
    Default,
    Named(String),
}

/// An override's identity: sanitized user and raw client id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct EntityKey {
    user: Level,
    client: Level,
}

impl EntityKey {
    fn new(user: Level, client: Level) -> Self {
        EntityKey { user, client }
    }
}

/// The quota overrides of one manager and its enabled levels.
#[derive(Debug, Clone, Default)]
pub(crate) struct Overrides {
    /// Bits of [`CLIENT_LEVEL`], [`USER_LEVEL`], [`USER_CLIENT_LEVEL`] (with a callback's
    /// bit above them, which from 4.2 keeps updates from changing them).
    pub enabled: u8,
    /// Whose rules enable and clear levels ([`KafkaRelease::tracks_removals`]).
    pub release: KafkaRelease,
    by_key: HashMap<EntityKey, (QuotaEntity, f64)>,
}

/// The bits of the three levels; anything above them is a callback's.
const ALL_LEVELS: u8 = CLIENT_LEVEL | USER_LEVEL | USER_CLIENT_LEVEL;

impl Overrides {
    /// Sets (`Some`) or removes (`None`) the override of `entity`. Before 4.2 either way
    /// its level becomes enabled for good; from 4.2 a level is enabled while an override
    /// of its shape exists. A callback's levels are never changed.
    pub fn apply(&mut self, entity: &QuotaEntity, value: Option<f64>) {
        let key = entity.key();
        match value {
            Some(v) => {
                self.by_key.insert(key, (entity.clone(), v));
            }
            None => {
                self.by_key.remove(&key);
            }
        }
        if !self.release.tracks_removals() {
            self.enabled |= entity.level_bit();
        } else if self.enabled & !ALL_LEVELS == 0 {
            self.enabled = self.by_key.values().fold(0, |m, (e, _)| m | e.level_bit());
        }
    }

    /// The override of exactly `entity`.
    pub fn get(&self, entity: &QuotaEntity) -> Option<f64> {
        self.by_key.get(&entity.key()).map(|(_, v)| *v)
    }

    /// Every override.
    pub fn iter(&self) -> impl Iterator<Item = (&QuotaEntity, f64)> {
        self.by_key.values().map(|(e, v)| (e, *v))
    }

    fn value(&self, user: Level, client: Level) -> Option<f64> {
        self.by_key
            .get(&EntityKey::new(user, client))
            .map(|(_, v)| *v)
    }

    fn exists(&self, user: Level, client: Level) -> bool {
        self.value(user, client).is_some()
    }

    /// The metric tags `(user, client-id)` of a request from sanitized user `user` with
    /// client id `client` (section 6.3).
    pub fn tags(&self, user: &str, client: &str) -> (String, String) {
        let named = |s: &str| Level::Named(s.to_owned());
        match self.enabled {
            0 | CLIENT_LEVEL => (String::new(), client.to_owned()),
            USER_LEVEL => (user.to_owned(), String::new()),
            USER_CLIENT_LEVEL => (user.to_owned(), client.to_owned()),
            _ => {
                let both = (user.to_owned(), client.to_owned());
                let user_only = (user.to_owned(), String::new());
                if self.exists(named(user), named(client))
                    || self.exists(named(user), Level::Default)
                {
                    both
                } else if self.exists(named(user), Level::Absent) {
                    user_only
                } else if self.exists(Level::Default, named(client))
                    || self.exists(Level::Default, Level::Default)
                {
                    both
                } else if self.exists(Level::Default, Level::Absent) {
                    user_only
                } else {
                    (String::new(), client.to_owned())
                }
            }
        }
    }

    /// [`Self::tags`] of a request from (unsanitized) principal `user`, when only one
    /// level of quotas is enabled (or none): then the tags follow from the level alone.
    /// `None` otherwise. The user is sanitized only when the tags include it (a client-id
    /// level never looks at it), and borrowed unless sanitizing changes it.
    pub fn simple_tags<'a>(
        &self,
        user: &'a str,
        client: &'a str,
    ) -> Option<(Cow<'a, str>, &'a str)> {
        match self.enabled {
            0 | CLIENT_LEVEL => Some((Cow::Borrowed(""), client)),
            USER_LEVEL => Some((sanitize_user(user), "")),
            USER_CLIENT_LEVEL => Some((sanitize_user(user), client)),
            _ => None,
        }
    }

    /// The bound of a sensor with these tags: [`Self::quota_limit`], or
    /// [`crate::UNLIMITED`] when no quota applies.
    pub fn bound(&self, user: &str, client: &str) -> f64 {
        self.quota_limit(user, client)
            .unwrap_or(crate::kafka::quota::UNLIMITED)
    }

    /// The quota that applies to a sensor with these tags, `None` when none does
    /// (section 6.4).
    pub fn quota_limit(&self, user: &str, client: &str) -> Option<f64> {
        let named = |s: &str| Level::Named(s.to_owned());
        match (user.is_empty(), client.is_empty()) {
            (false, false) => self
                .value(named(user), named(client))
                .or_else(|| self.value(named(user), Level::Default))
                .or_else(|| self.value(Level::Default, named(client)))
                .or_else(|| self.value(Level::Default, Level::Default)),
            (false, true) => self
                .value(named(user), Level::Absent)
                .or_else(|| self.value(Level::Default, Level::Absent)),
            (true, false) => self
                .value(Level::Absent, named(client))
                .or_else(|| self.value(Level::Absent, Level::Default)),
            (true, true) => None,
        }
    }
}

/// The bytes [`sanitize_user`] keeps as they are: ASCII letters and digits and `.-_`
/// (a table: the check runs on every request of a user-level configuration).
const KEPT: [bool; 256] = {
    let mut kept = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        kept[b] = c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_');
        b += 1;
    }
    kept
};

/// Kafka's sanitized form of a principal name: URL-encoded UTF-8 (letters, digits and
/// `.-_*` kept), then `+` as `%20` and `*` as `%2A`. Borrows when nothing changes.
pub fn sanitize_user(name: &str) -> Cow<'_, str> {
    let keep = |b: u8| KEPT[usize::from(b)];
    if name.bytes().all(keep) {
        return Cow::Borrowed(name);
    }
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(name.len() * 3);
    for b in name.bytes() {
        if keep(b) {
            out.push(b as char);
        } else if b == b' ' {
            out.push_str("%20");
        } else {
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 15)] as char);
        }
    }
    Cow::Owned(out)
}

/// An owned `(a, b)` string pair: the key of sensors (by tags) and of resolved clients.
/// 24 bytes: up to [`Pair::INLINE`] bytes of `a` then `b` are kept inline (no allocation),
/// longer pairs in one allocation; either way with where `b` starts.
///
/// An inline pair is three words that depend only on the strings (the bytes of `a` then
/// `b`, zeros up to byte 21, then the split, the length and a zero kind byte), so a lookup
/// packs its borrowed strings the same way once ([`PairRef::new`]), hashes the three
/// words and compares each candidate with three word comparisons, without a call and
/// without reading the strings again.
pub(crate) struct Pair(Repr);

/// The two forms of a [`Pair`]; which one is in the kind byte, the last of both.
#[repr(C)]
union Repr {
    inline: [u64; 3],
    heap: std::mem::ManuallyDrop<HeapPair>,
}

/// A pair longer than [`Pair::INLINE`] bytes: both strings in one allocation. 24 bytes,
/// every one of them initialized: the last word holds no pointer, so reading it as an
/// integer ([`Pair::tail`]) is sound in both forms.
#[repr(C)]
struct HeapPair {
    both: Box<str>,
    split: u32,
    zero: [u8; 3],
    kind: u8,
}

const _: () = assert!(std::mem::size_of::<HeapPair>() == 24);
const _: () = assert!(std::mem::size_of::<Repr>() == 24);

/// The kind byte (byte 23) of an inline pair and of a heap one.
const KIND_INLINE: u8 = 0;
const KIND_HEAP: u8 = 1;

impl Eq for Pair {}

// SAFETY (of the `unsafe` reads of `Repr` below): every constructor writes all 24 bytes of
// the form it makes, and `Pair::is_inline` (the kind byte, in the last word, which is an
// integer in both forms) says which form that is.
impl Pair {
    /// The most bytes kept inline.
    const INLINE: usize = 21;

    pub fn new(a: &str, b: &str) -> Pair {
        if let Some(words) = pack(a.as_bytes(), b.as_bytes()) {
            return Pair(Repr { inline: words });
        }
        let mut both = String::with_capacity(a.len() + b.len());
        both.push_str(a);
        both.push_str(b);
        Pair(Repr {
            heap: std::mem::ManuallyDrop::new(HeapPair {
                both: both.into_boxed_str(),
                split: u32::try_from(a.len()).expect("a name shorter than 4 GiB"),
                zero: [0; 3],
                kind: KIND_HEAP,
            }),
        })
    }

    /// The last word: the split, length and kind of an inline pair; the split and kind of
    /// a heap one.
    #[inline(always)]
    fn tail(&self) -> u64 {
        // SAFETY: see the `impl`: the last word is initialized and holds no pointer.
        unsafe { self.0.inline[2] }
    }

    #[inline(always)]
    fn is_inline(&self) -> bool {
        self.tail().to_ne_bytes()[23 - 16] == KIND_INLINE
    }

    /// The three words of an inline pair.
    #[inline(always)]
    fn words(&self) -> Option<&[u64; 3]> {
        if self.is_inline() {
            // SAFETY: see the `impl`: the inline form.
            Some(unsafe { &self.0.inline })
        } else {
            None
        }
    }

    /// Both strings, one after the other, and where the second starts.
    #[inline]
    fn parts(&self) -> (&str, usize) {
        match self.words() {
            Some(words) => {
                // SAFETY: 24 initialized bytes, in the allocation of `self`.
                let raw: &[u8; 24] = unsafe { &*words.as_ptr().cast::<[u8; 24]>() };
                let (split, len) = (usize::from(raw[21]), usize::from(raw[22]));
                // SAFETY: `pack` copied `a` then `b`, two whole strings, into
                // `raw[..len]`: valid UTF-8, split at a char boundary at `split`.
                let both = unsafe { std::str::from_utf8_unchecked(&raw[..len]) };
                (both, split)
            }
            None => {
                // SAFETY: see the `impl`: not inline, so the heap form.
                let heap = unsafe { &self.0.heap };
                (&heap.both, heap.split as usize)
            }
        }
    }

    pub fn first(&self) -> &str {
        let (both, split) = self.parts();
        &both[..split]
    }

    pub fn second(&self) -> &str {
        let (both, split) = self.parts();
        &both[split..]
    }
}

impl Clone for Pair {
    fn clone(&self) -> Pair {
        match self.words() {
            Some(&words) => Pair(Repr { inline: words }),
            None => Pair::new(self.first(), self.second()),
        }
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        if !self.is_inline() {
            // SAFETY: the heap form (see the `impl`), dropped once, here.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.0.heap) };
        }
    }
}

/// The inline words of `a` then `b` ([`Pair`]'s layout), or `None` when they are longer
/// than [`Pair::INLINE`] bytes.
#[inline(always)]
fn pack(a: &[u8], b: &[u8]) -> Option<[u64; 3]> {
    let len = a.len() + b.len();
    if len > Pair::INLINE {
        return None;
    }
    // The words come from word loads and shifts, in registers. (A buffer written byte
    // range by byte range and read back by words makes the loads wait for the stores:
    // store forwarding fails.)
    let mut words = if cfg!(target_endian = "little") {
        if a.is_empty() || b.is_empty() {
            words_of(if a.is_empty() { b } else { a })
        } else {
            let (a, b) = (words_of(a), shifted(words_of(b), a.len()));
            [a[0] | b[0], a[1] | b[1], a[2] | b[2]]
        }
    } else {
        let mut raw = [0u8; 24];
        put(&mut raw, 0, a);
        put(&mut raw, a.len(), b);
        let word = |i: usize| u64::from_ne_bytes(raw[8 * i..8 * i + 8].try_into().unwrap());
        [word(0), word(1), word(2)]
    };
    words[2] |= u64::from_ne_bytes([0, 0, 0, 0, 0, a.len() as u8, len as u8, KIND_INLINE]);
    Some(words)
}

/// Little-endian words moved `bytes` bytes up (at most [`Pair::INLINE`]), the top ones
/// dropped.
#[inline(always)]
fn shifted(w: [u64; 3], bytes: usize) -> [u64; 3] {
    let (q, r) = (bytes / 8, (8 * bytes % 64) as u32);
    let word = |i: usize| if i < 3 { w[i] } else { 0 };
    // Word `i` of the result: word `i - q` moved up by `r` bits, with the top bits of
    // word `i - q - 1` below them (none when `r` is 0).
    let part = |i: usize| {
        if i < q {
            return 0;
        }
        let high = word(i - q) << r;
        let low = if r == 0 || i == q {
            0
        } else {
            word(i - q - 1) >> (64 - r)
        };
        high | low
    };
    [part(0), part(1), part(2)]
}

/// The little-endian words of `s` (at most [`Pair::INLINE`] bytes) at byte 0, zero after
/// it: at most three loads, overlapping, and shifts.
#[inline(always)]
fn words_of(s: &[u8]) -> [u64; 3] {
    let n = s.len();
    let load8 = |i: usize| u64::from_le_bytes(s[i..i + 8].try_into().unwrap());
    let load4 = |i: usize| u64::from(u32::from_le_bytes(s[i..i + 4].try_into().unwrap()));
    match n {
        0 => [0; 3],
        1..=3 => {
            let byte = |i: usize| u64::from(s[i]) << (8 * i);
            [byte(0) | byte(n / 2) | byte(n - 1), 0, 0]
        }
        4..=7 => [load4(0) | load4(n - 4) << (8 * (n - 4)), 0, 0],
        8 => [load8(0), 0, 0],
        9..=15 => [load8(0), load8(n - 8) >> (8 * (16 - n)), 0],
        16 => [load8(0), load8(8), 0],
        _ => [load8(0), load8(8), load8(n - 8) >> (8 * (24 - n))],
    }
}

/// Copies `s` to `raw[at..at + s.len()]` (within the first [`Pair::INLINE`] bytes) with at
/// most three fixed-size moves, overlapping, instead of a call to `memcpy`.
#[inline(always)]
fn put(raw: &mut [u8; 24], at: usize, s: &[u8]) {
    let n = s.len();
    if n >= 8 {
        let first: [u8; 8] = s[..8].try_into().unwrap();
        let last: [u8; 8] = s[n - 8..].try_into().unwrap();
        if n > 16 {
            let middle: [u8; 8] = s[8..16].try_into().unwrap();
            raw[at + 8..at + 16].copy_from_slice(&middle);
        }
        raw[at..at + 8].copy_from_slice(&first);
        raw[at + n - 8..at + n].copy_from_slice(&last);
    } else if n >= 4 {
        let first: [u8; 4] = s[..4].try_into().unwrap();
        let last: [u8; 4] = s[n - 4..].try_into().unwrap();
        raw[at..at + 4].copy_from_slice(&first);
        raw[at + n - 4..at + n].copy_from_slice(&last);
    } else if n > 0 {
        raw[at] = s[0];
        raw[at + n / 2] = s[n / 2];
        raw[at + n - 1] = s[n - 1];
    }
}

impl std::fmt::Debug for Pair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Pair")
            .field(&self.first())
            .field(&self.second())
            .finish()
    }
}

/// String equality that never calls `memcmp` for empty strings. An empty `Box<str>`
/// points to the dangling address 1, and glibc's AVX-512 `memcmp` reads even zero bytes
/// with a masked load, which at an unmapped address costs a microcode assist (several
/// times the cost of a whole record).
///
/// Strings of up to 16 bytes are compared with at most two word loads each instead of a
/// call.
#[inline]
fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word8 = |s: &[u8], i: usize| u64::from_ne_bytes(s[i..i + 8].try_into().unwrap());
    let word4 = |s: &[u8], i: usize| u32::from_ne_bytes(s[i..i + 4].try_into().unwrap());
    match n {
        0 => true,
        // The first, middle and last bytes: every byte of 1 to 3.
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        // The first and last 4 (or 8) bytes, overlapping: every byte.
        4..=7 => word4(a, 0) == word4(b, 0) && word4(a, n - 4) == word4(b, n - 4),
        8..=16 => word8(a, 0) == word8(b, 0) && word8(a, n - 8) == word8(b, n - 8),
        _ => a == b,
    }
}

impl PartialEq for Pair {
    #[inline]
    fn eq(&self, other: &Pair) -> bool {
        match (self.words(), other.words()) {
            (Some(a), Some(b)) => a == b,
            (None, None) => {
                str_eq(self.first(), other.first()) && str_eq(self.second(), other.second())
            }
            _ => false,
        }
    }
}

impl Hash for Pair {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Must hash exactly as `PairRef` does.
        match self.words() {
            Some(words) => hash_words(words, state),
            None => hash_long(self.first(), self.second(), state),
        }
    }
}

#[inline(always)]
fn hash_words<H: Hasher>(words: &[u64; 3], state: &mut H) {
    for &w in words {
        state.write_u64(w);
    }
}

fn hash_long<H: Hasher>(a: &str, b: &str, state: &mut H) {
    a.hash(state);
    b.hash(state);
}

/// A borrowed `(a, b)` that looks up a [`Pair`] without allocating: packed once, as the
/// pair it looks for is ([`Pair`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum PairRef<'a> {
    /// The inline words of the pair.
    Inline([u64; 3]),
    /// A pair longer than [`Pair::INLINE`] bytes.
    Long(&'a str, &'a str),
}

impl<'a> PairRef<'a> {
    #[inline(always)]
    pub fn new(a: &'a str, b: &'a str) -> PairRef<'a> {
        match pack(a.as_bytes(), b.as_bytes()) {
            Some(words) => PairRef::Inline(words),
            None => PairRef::Long(a, b),
        }
    }
}

impl Hash for PairRef<'_> {
    #[inline(always)]
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Must hash exactly as `Pair` does.
        match self {
            PairRef::Inline(words) => hash_words(words, state),
            PairRef::Long(a, b) => hash_long(a, b, state),
        }
    }
}

impl crate::sync::hash_map::Equivalent<Pair> for PairRef<'_> {
    #[inline(always)]
    fn equivalent(&self, key: &Pair) -> bool {
        match (self, key.words()) {
            (PairRef::Inline(words), Some(key)) => words == key,
            (PairRef::Long(a, b), None) => str_eq(key.first(), a) && str_eq(key.second(), b),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests;
