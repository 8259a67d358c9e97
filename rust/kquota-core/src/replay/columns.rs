//! The replay's columns in and out: events, decisions, the codes they use, options.

use crate::error::{Error, Result};
use crate::kafka::quota_type::QuotaType;
use crate::kafka::request::ApiKind;

/// The most events one batch may hold (the open loop numbers a batch's events in 32 bits).
pub const MAX_BATCH: usize = u32::MAX as usize;

pub use crate::kafka::broker::EXPIRY_TASK_MS;

/// Event kind code of a produce request.
pub const KIND_PRODUCE: i8 = 0;
/// Event kind code of a consumer fetch.
pub const KIND_FETCH: i8 = 1;
/// Event kind code of any other throttle-able request.
pub const KIND_OTHER: i8 = 2;
/// Event kind code of a controller mutation (CreateTopics, CreatePartitions,
/// DeleteTopics): [`Events::partitions`] partitions, strict or permissive as
/// [`Events::strict`] says, on the controller-mutation quota, and its thread time on the
/// request quota as any other request.
pub const KIND_MUTATION: i8 = 3;

/// `throttled_by` code: not throttled.
pub const BY_NONE: i8 = -1;
/// `throttled_by` code of the controller-mutation quota.
pub const BY_MUTATION: i8 = 3;

/// The `throttled_by` code of a quota type: its index in [`QuotaType::ALL`].
pub fn quota_code(quota_type: QuotaType) -> i8 {
    match quota_type {
        QuotaType::Produce => 0,
        QuotaType::Fetch => 1,
        QuotaType::Request => 2,
    }
}

pub(super) fn kind_of(code: i8) -> Option<ApiKind> {
    match code {
        KIND_PRODUCE => Some(ApiKind::Produce),
        KIND_FETCH => Some(ApiKind::Fetch),
        KIND_OTHER | KIND_MUTATION => Some(ApiKind::Other),
        _ => None,
    }
}

/// A batch of events, as columns of equal length, in time order.
#[derive(Debug, Clone, Copy)]
pub struct Events<'a> {
    /// When the request was handled (open loop) or recorded (closed loop), ms.
    pub time_ms: &'a [i64],
    /// Index into the kernel's pair table.
    pub pair: &'a [i32],
    /// [`KIND_PRODUCE`], [`KIND_FETCH`], [`KIND_OTHER`] or [`KIND_MUTATION`].
    pub kind: &'a [i8],
    /// Produce request size or fetch response size (finite, >= 0; ignored for other).
    pub bytes: &'a [f64],
    /// Handler-thread time in ns (finite, >= 0), or NaN when unknown.
    pub thread_ns: &'a [f64],
    /// The produce request's `acks` (`0` skips the request quota; ignored otherwise).
    pub acks: &'a [i16],
    /// Partitions created or deleted by a [`KIND_MUTATION`] event (>= 0; ignored
    /// otherwise). Empty when the batch has no mutation.
    pub partitions: &'a [i32],
    /// Whether a [`KIND_MUTATION`] event's request version is enforced strictly
    /// ([`crate::MutationApi::is_strict`]); ignored otherwise. Empty with `partitions`.
    pub strict: &'a [bool],
    /// Per-topic partitions of the mutations, in request order: event `i`'s topics are
    /// `topic_partitions[topic_offsets[i]..topic_offsets[i + 1]]`. A mutation with topics
    /// is recorded topic by topic, as Kafka's controller does (a strict request's topics
    /// are refused once the bucket is overdrawn); their sum must equal `partitions[i]`.
    /// A mutation with no topic (or a batch without these columns) is one topic of
    /// `partitions[i]`. Ignored for other events. Empty, or `n + 1` offsets.
    pub topic_offsets: &'a [i32],
    /// The per-topic partitions `topic_offsets` indexes (each >= 0).
    pub topic_partitions: &'a [i32],
    /// With [`QuotaPass::Bytes`]: each scenario's request-quota throttles of these events,
    /// replayed before (scenario by scenario, `n` each), for the rule that a fetch the
    /// request quota throttled is not recorded. Empty otherwise.
    pub request_throttle_ms: &'a [i32],
}

impl Events<'_> {
    /// The range of event `i`'s topics in `topic_partitions`; `None` without topics.
    #[inline]
    pub(super) fn topic_range(&self, i: usize) -> Option<std::ops::Range<usize>> {
        let o = self.topic_offsets;
        if o.is_empty() {
            return None;
        }
        let (a, b) = (o[i] as usize, o[i + 1] as usize);
        (b > a).then_some(a..b)
    }

    /// The number of events; an error naming the lengths if the columns differ.
    pub fn checked_len(&self) -> Result<usize> {
        let n = self.time_ms.len();
        let lens = [
            self.pair.len(),
            self.kind.len(),
            self.bytes.len(),
            self.thread_ns.len(),
            self.acks.len(),
        ];
        if lens.iter().any(|&l| l != n) {
            return Err(Error::InvalidUsage(format!(
                "event columns differ in length: time_ms {n}, pair {}, kind {}, bytes {}, \
                 thread_ns {}, acks {}",
                lens[0], lens[1], lens[2], lens[3], lens[4]
            )));
        }
        if n > MAX_BATCH {
            return Err(Error::InvalidUsage(format!(
                "a batch of {n} events: a batch holds at most {MAX_BATCH}; feed them in \
                 smaller batches"
            )));
        }
        let (p, s) = (self.partitions.len(), self.strict.len());
        if p != s || (p != 0 && p != n) {
            return Err(Error::InvalidUsage(format!(
                "mutation columns: partitions has {p} rows and strict {s}; both must have \
                 the {n} rows of time_ms, or be empty when no event is a mutation"
            )));
        }
        let (o, t) = (self.topic_offsets.len(), self.topic_partitions.len());
        if o != 0 && (o != n + 1 || p == 0) {
            return Err(Error::InvalidUsage(format!(
                "topic columns: topic_offsets has {o} rows; it must have the {n} rows of \
                 time_ms plus one (with the partitions and strict columns), or be empty"
            )));
        }
        if o == 0 && t != 0 {
            return Err(Error::InvalidUsage(format!(
                "topic columns: topic_partitions has {t} values but topic_offsets is empty"
            )));
        }
        if let (Some(&first), Some(&last)) = (self.topic_offsets.first(), self.topic_offsets.last())
        {
            let ordered = self.topic_offsets.windows(2).all(|w| w[0] <= w[1]);
            if first < 0 || !ordered || last as usize != t {
                return Err(Error::InvalidUsage(format!(
                    "topic columns: topic_offsets must rise from >= 0 to the {t} values of \
                     topic_partitions (first {first}, last {last})"
                )));
            }
        }
        Ok(n)
    }
}

/// What the replay decided for each event, per scenario: one row per (scenario, event),
/// in the order they were replayed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Output {
    /// The scenario's index.
    pub scenario: Vec<u32>,
    /// The event's position in the input, counted over every batch fed (from 0).
    pub seq: Vec<u64>,
    /// The applied throttle (what the response carries): > 0, or 0.
    pub throttle_ms: Vec<i32>,
    /// The quota whose throttle applied ([`quota_code`]), or [`BY_NONE`].
    pub throttled_by: Vec<i8>,
    /// The produce manager's throttle (Kafka's int; may be negative after a wrap).
    pub produce_throttle_ms: Vec<i32>,
    /// The fetch manager's throttle.
    pub fetch_throttle_ms: Vec<i32>,
    /// The request manager's throttle.
    pub request_throttle_ms: Vec<i32>,
    /// The controller-mutation quota's throttle (0 for events that are not mutations).
    pub mutation_throttle_ms: Vec<i32>,
    /// The partitions a strict mutation was refused (Kafka fails them with
    /// THROTTLING_QUOTA_EXCEEDED); 0 when accepted or not a mutation.
    pub refused_partitions: Vec<i32>,
    /// When the request reached the broker (its time in open loop).
    pub sent_ms: Vec<i64>,
    /// `sent_ms` minus the event's time (0 in open loop).
    pub added_latency_ms: Vec<i64>,
    /// Whether the request reached the broker: [`SERVED`], or why its bounded client gave
    /// it up ([`UNSERVED_BUFFER_FULL`], [`UNSERVED_TIMED_OUT`]; closed loop with
    /// [`ClientLimits`] only). An unserved request is recorded on no sensor, carries no
    /// throttle, and its `sent_ms` is when the client gave it up.
    pub unserved: Vec<i8>,
}

impl Output {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.seq.len()
    }

    /// Whether there is no row.
    pub fn is_empty(&self) -> bool {
        self.seq.is_empty()
    }
}

/// `unserved` code: the request reached the broker.
pub const SERVED: i8 = 0;
/// `unserved` code: a produce request found its client's buffer full (the Java producer's
/// `send` blocks for `max.block.ms`, then fails; a client held at its quota stays full).
pub const UNSERVED_BUFFER_FULL: i8 = 1;
/// `unserved` code: the request was still waiting in its client when its timeout ran out
/// (`delivery.timeout.ms` for a produce, `default.api.timeout.ms` for any other but a
/// fetch, which waits: a consumer that falls behind reads later).
pub const UNSERVED_TIMED_OUT: i8 = 2;

/// What bounds a closed-loop client: how much produce data it holds unsent, and how long
/// it keeps a request that has not gone out yet. A bounded client sends what it holds as
/// soon as its channel is unmuted, so it catches up when its demand drops; what it cannot
/// hold or send in time is not served ([`Output::unserved`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    /// Produce bytes waiting to be sent, at most (`buffer.memory`).
    pub buffer_bytes: i64,
    /// How long a produce request may wait to be sent, ms (`delivery.timeout.ms`).
    pub delivery_timeout_ms: i64,
    /// How long any other request but a fetch may wait to be sent, ms
    /// (`default.api.timeout.ms`); a consumer's fetch waits as long as it takes.
    pub api_timeout_ms: i64,
}

impl ClientLimits {
    /// The Java clients' defaults: `buffer.memory` 32 MiB, `delivery.timeout.ms` 120 s,
    /// `default.api.timeout.ms` 60 s.
    pub const KAFKA_DEFAULTS: ClientLimits = ClientLimits {
        buffer_bytes: 33_554_432,
        delivery_timeout_ms: 120_000,
        api_timeout_ms: 60_000,
    };

    /// Checks that every limit is > 0.
    pub fn checked(self) -> Result<Self> {
        for (name, value) in [
            ("buffer_bytes", self.buffer_bytes),
            ("delivery_timeout_ms", self.delivery_timeout_ms),
            ("api_timeout_ms", self.api_timeout_ms),
        ] {
            if value <= 0 {
                return Err(Error::InvalidConfig(format!(
                    "invalid client limit {name} {value}: it must be > 0"
                )));
            }
        }
        Ok(self)
    }

    /// How long a request of `kind` may wait to be sent. A consumer's fetch is never
    /// given up: a consumer that falls behind reads the same data later (its lag).
    pub(super) fn timeout_ms(&self, kind: ApiKind) -> i64 {
        match kind {
            ApiKind::Produce => self.delivery_timeout_ms,
            ApiKind::Fetch => i64::MAX,
            _ => self.api_timeout_ms,
        }
    }
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits::KAFKA_DEFAULTS
    }
}

/// Which client quotas an open-loop [`super::ReplayKernel`] replays. A replay split by
/// sensor (more parallel than one task per broker) runs two passes, because one request's
/// request sensor and byte sensor may land in different partitions: first the request
/// quota alone, then the byte quotas with the first pass's throttles given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum QuotaPass {
    /// Every quota, in one pass.
    #[default]
    All,
    /// The request quota only; produce and fetch throttles are 0.
    Request,
    /// The produce and fetch quotas, with the request quota's throttles given
    /// ([`Events::request_throttle_ms`]).
    Bytes,
}

impl QuotaPass {
    /// Whether this pass replays `quota_type`.
    pub fn replays(self, quota_type: QuotaType) -> bool {
        match self {
            QuotaPass::All => true,
            QuotaPass::Request => quota_type == QuotaType::Request,
            QuotaPass::Bytes => quota_type != QuotaType::Request,
        }
    }
}

/// How a [`super::ReplayKernel`] replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayOptions {
    /// Closed loop (clients honour KIP-219) instead of open loop.
    pub closed_loop: bool,
    /// The period of the broker's sensor-expiry task, ms (> 0); `None`: never expire.
    pub expiry_task_ms: Option<i64>,
    /// Closed loop: bounded clients ([`ClientLimits`]); `None`: unbounded clients, whose
    /// later requests shift by what they waited.
    pub clients: Option<ClientLimits>,
    /// Open loop: which quotas this kernel replays (every one by default).
    pub pass: QuotaPass,
}

impl Default for ReplayOptions {
    /// Open loop, Kafka's expiry task every 30 s.
    fn default() -> Self {
        ReplayOptions {
            closed_loop: false,
            expiry_task_ms: Some(EXPIRY_TASK_MS),
            clients: None,
            pass: QuotaPass::All,
        }
    }
}
