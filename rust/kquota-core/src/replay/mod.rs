//! [`ReplayKernel`]: a sequential replay of one broker's requests through Kafka's quota
//! rules, for back-testing: several scenarios (quota configurations) side by side, in
//! one pass over columns of events, fed batch after batch.
//!
//! It does what [`crate::RequestPath`] over three [`crate::QuotaManager`]s does for each
//! request, with the same rules ([`crate::managers::request_path`]'s functions, the manager's
//! precedence, units, int conversion and expiry rule, [`crate::kafka::samples`]' arithmetic),
//! but for one thread: each distinct `(user, client-id)` pair of the trace is resolved
//! once to a dense sensor id per quota type (again only when a quota changes), and the
//! sensors live in plain vectors. No atomics, no hash lookup per event.
//!
//! **Events** are columns ([`Events`]): time in ms, a pair id into the pair table given
//! at construction (or added with [`ReplayKernel::add_pairs`]), the API kind
//! ([`KIND_PRODUCE`], [`KIND_FETCH`], [`KIND_OTHER`], [`KIND_MUTATION`]), bytes,
//! handler-thread time in ns (NaN = unknown: the request quota is then not consulted, as
//! `RequestPath` with `thread_time_ns=None`), the produce `acks` and, for controller
//! mutations, the partitions and whether the request version is strict (optional
//! columns: a batch without mutations leaves them empty). They must come in time order (ties in
//! input order), within a batch and across batches: the caller sorts; an event earlier
//! than the one before it is refused, naming both. Every column is checked before
//! anything is replayed, so a refused batch changes nothing.
//!
//! **Open loop** replays each event at its time. A request's throttles depend only on its
//! own sensors there, so a batch is replayed quota type by quota type (the request quota
//! first: a fetch's bytes are taken back when it throttles) and, within one, sensor by
//! sensor, each sensor's records in time order (module `groups`: the records sorted by sensor,
//! so a sensor's samples and summary are read once per batch, in memory order; the
//! decisions are those of the request-by-request order, which a property test compares
//! with [`crate::RequestPath`]). **Closed loop** lets clients honour
//! KIP-219: a client (one pair) throttled for `T` ms at `t` sends nothing before `t + T`,
//! and its later requests shift later by what it waited (the shift never shrinks):
//! `sent = max(recorded + shift, mute end)`; events are replayed in order of `sent`, ties
//! in input order. **Bounded clients** ([`ReplayOptions::clients`], [`ClientLimits`]) are
//! what Kafka's clients are: a producer holds at most `buffer.memory` bytes unsent (a
//! produce request that finds no room is not served), and a request still waiting in its
//! client after its timeout (`delivery.timeout.ms` for a produce, `default.api.timeout.ms`
//! for others) is given up then (a fetch is not: a consumer that falls behind reads
//! later, its lag). A pair's produce, fetch and other requests are three bounded clients
//! (in Kafka, three connections, each muted by its own throttled responses); a bounded
//! client sends what it holds as soon as its channel is unmuted
//! (`sent = max(recorded, its last send, mute end)`), so it catches up when its demand
//! drops instead of staying behind. The rows say which requests were not served
//! ([`Output::unserved`]). This is the back-test's `replay_closed`, streamed: an event is
//! replayed once no event fed later can come before it (it is sent at or before the last
//! time fed), so only the events not sent yet are held, per client in time order;
//! [`ReplayKernel::finish`] replays the rest. Outputs come out as events are replayed, with their input position.
//!
//! **Sensor expiry** is Kafka's: the broker's expiry task runs every
//! [`ReplayOptions::expiry_task_ms`] (Kafka: 30 s; here at the multiples of it, before
//! the events of that millisecond) and removes sensors idle for longer than the manager's
//! `sensor_expiry_ms`; the next request re-creates its sensor empty. An explicit
//! [`ReplayKernel::expire_sensors`] runs it at a given time. Between runs an idle sensor
//! keeps working, as in Kafka. `expiry_task_ms = None` never runs it (the back-test's
//! Python kernel does not).
//!
//! **Quota changes** ([`ReplayKernel::set_quota`], [`ReplayKernel::remove_quota`]) apply
//! at a time, between batches, as a manager's `set_quota` does: bounds refresh, samples
//! stay, and a pair whose tags change moves to another sensor.
//!
//! **Summaries** ([`ReplayKernel::summaries`]) are accumulated in the same pass, per
//! scenario, quota type and sensor tags (see [`stats`]).

mod clock;
mod columns;
mod groups;
mod kernel;
mod mutation;
pub mod recommend;
mod ring;
mod scenario;
mod sensor;
mod stats;

pub use columns::{
    quota_code, ClientLimits, Events, Output, QuotaPass, ReplayOptions, BY_MUTATION, BY_NONE,
    EXPIRY_TASK_MS, KIND_FETCH, KIND_MUTATION, KIND_OTHER, KIND_PRODUCE, MAX_BATCH, SERVED,
    UNSERVED_BUFFER_FULL, UNSERVED_TIMED_OUT,
};
pub use kernel::ReplayKernel;
pub use stats::{EntitySummary, SummaryType};
