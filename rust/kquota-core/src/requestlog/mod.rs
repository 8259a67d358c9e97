//! Kafka's request log (`kafka.request.logger`): each line's back-test row, or why it has
//! none. The spec is `shared/docs/kafka-request-log.md`; the Python side
//! (`kquota.backtest.requestlog`) reads the files and applies the broker's time zone.
//!
//! Input is an Arrow string column (offsets + bytes), output columns in Arrow layout
//! ([`Columns`]), so a batch crosses the binding without a copy per line. Layers:
//! [`line`] (head, body, timestamp), [`json`] (the typed view of the JSON object),
//! [`sizes`] (Kafka's byte counts), [`fetch`] (where a consumer fetch reads from),
//! [`request_time`] (the network-thread time the line does not show), [`columns`] (the
//! builders).

pub mod columns;
pub mod fetch;
pub mod json;
pub mod line;
pub mod request_time;
pub mod sizes;

pub use columns::{Columns, Nullable, ReadKind, Strings, TopicOp, READ_KINDS, TOPIC_OPS};
pub use fetch::{read_sizes, throttled_fetch_size, PartitionRead};
pub use sizes::{
    empty_fetch_response_size, fetch_response_size, fetch_response_size_with, produce_request_size,
    uvarint_size,
};

use crate::kafka::mutation_api::{
    CREATE_PARTITIONS_STRICT_SINCE, CREATE_TOPICS_STRICT_SINCE, DELETE_TOPICS_STRICT_SINCE,
};
use json::Line;
use line::Head;

/// Why a line gives no row, by code (code k is `REASONS[k - 1]`; 0 is a row). The codes
/// follow the order the Python side lists them in; the tests apply in [`classify`]'s order.
pub const REASONS: [&str; 12] = [
    "not UTF-8",
    "line over 16 MiB (not read; counted from missing bytes)",
    "RequestChannel$ TRACE line",
    "not a Completed request line",
    "pre-2.8 text format (unsupported)",
    "truncated or corrupt JSON",
    "invalid timestamp",
    "forwarded to the controller (isForwarded)",
    "inter-broker API (exempt from quotas)",
    "follower fetch (outside client quotas)",
    "produce or fetch without its request body",
    "produce or fetch version not known",
];
pub const NOT_UTF8: u8 = 1;
pub const TOO_LONG: u8 = 2;
pub const TRACE_LINE: u8 = 3;
pub const OTHER_LINE: u8 = 4;
pub const OLD_FORMAT: u8 = 5;
pub const CORRUPT: u8 = 6;
pub const BAD_TIME: u8 = 7;
pub const FORWARDED: u8 = 8;
pub const EXEMPT: u8 = 9;
pub const FOLLOWER: u8 = 10;
pub const NO_BODY: u8 = 11;
pub const UNKNOWN_VERSION: u8 = 12;

/// Lines longer than this are not parsed (corrupt): the text reader drops longer ones.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;
/// Characters of a skipped line kept as an example.
pub const EXAMPLE_CHARS: usize = 300;
/// The id a Metadata response gives a topic without one (22 characters of base64url zeros).
const ZERO_TOPIC_ID: &str = "AAAAAAAAAAAAAAAAAAAAAA";

pub const PRODUCE: i32 = 0;
pub const FETCH: i32 = 1;
pub const METADATA: i32 = 3;
pub const CREATE_TOPICS: i32 = 19;
pub const DELETE_TOPICS: i32 = 20;
pub const CREATE_PARTITIONS: i32 = 37;
/// ShareFetch: its fetch bytes are not logged, so its rows are flagged.
pub const SHARE_FETCH: i32 = 78;
pub const MAX_PRODUCE_VERSION: i32 = 13;
pub const MAX_FETCH_VERSION: i32 = 18;
/// Inter-broker APIs Kafka answers on the exempt path (LeaderAndIsr, StopReplica,
/// UpdateMetadata, ControlledShutdown, WriteTxnMarkers, AlterPartition).
pub const EXEMPT_API_KEYS: [i32; 6] = [4, 5, 6, 7, 27, 56];

/// How to read lines.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Kafka's `num.partitions`: a created topic's count when it asks for -1 and has
    /// no assignments.
    pub num_partitions: i32,
}

impl Default for Options {
    fn default() -> Self {
        Options { num_partitions: 1 }
    }
}

/// The lines of an Arrow string column: line `i` is `data[offsets[i]..offsets[i + 1]]`,
/// null when `valid` says so (a null line reads as an empty one).
#[derive(Debug, Clone, Copy)]
pub struct Lines<'a> {
    pub offsets: &'a [i32],
    pub data: &'a [u8],
    /// Arrow validity bitmap (LSB first) and the bit of line 0, or `None`: no null.
    pub valid: Option<(&'a [u8], usize)>,
}

impl<'a> Lines<'a> {
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Line `i`; an out-of-range or inverted offset (a malformed array) reads as empty.
    pub fn get(&self, i: usize) -> &'a [u8] {
        if let Some((bits, first)) = self.valid {
            let bit = first + i;
            if bits.get(bit / 8).is_none_or(|b| b & (1 << (bit % 8)) == 0) {
                return &[];
            }
        }
        let (a, b) = (self.offsets[i], self.offsets[i + 1]);
        match (usize::try_from(a), usize::try_from(b)) {
            (Ok(a), Ok(b)) if a <= b && b <= self.data.len() => &self.data[a..b],
            _ => &[],
        }
    }
}

/// Every line's columns.
pub fn parse_lines(lines: Lines<'_>, options: Options) -> Columns {
    let mut out = Columns::default();
    for i in 0..lines.len() {
        push_line(&mut out, lines.get(i), options);
    }
    out
}

/// The fields a row reads from a complete line.
struct Row<'l, 'a> {
    line: &'l Line<'a>,
    key: i32,
    version: i32,
    throttle: i64,
}

/// The line's reason code (0: a row), its wall-clock end and its parsed object.
fn classify<'a>(raw: &'a [u8]) -> (u8, Option<i64>, Option<Line<'a>>) {
    let Ok(text) = std::str::from_utf8(raw) else {
        return (NOT_UTF8, None, None);
    };
    let json = match line::head(raw) {
        Head::None if raw.ends_with(line::TRACE_SUFFIX) => return (TRACE_LINE, None, None),
        Head::None => return (OTHER_LINE, None, None),
        Head::Text => return (OLD_FORMAT, None, None),
        Head::Json { json } => json,
    };
    let parsed = match line::body(raw, json) {
        Some(_) if raw.len() > MAX_LINE_BYTES => None,
        // the body is ASCII-delimited, so its ends are character boundaries
        Some(body) => json::parse(&text[json..json + body.len()]),
        None => None,
    };
    let Some(parsed) = parsed else {
        return (CORRUPT, None, None);
    };
    let Some(row) = complete(&parsed) else {
        return (CORRUPT, None, Some(parsed));
    };
    let wall = line::wall_clock_micros(raw);
    let reason = if wall.is_none() {
        BAD_TIME
    } else if parsed.is_forwarded.value() == Some(true) {
        FORWARDED
    } else if EXEMPT_API_KEYS.contains(&row.key) {
        EXEMPT
    } else if (row.key == PRODUCE || row.key == FETCH) && parsed.request.get().is_none() {
        NO_BODY
    } else if row.key == FETCH && replica_id(&parsed) >= 0 {
        FOLLOWER
    } else if (row.key == PRODUCE && !(0..=MAX_PRODUCE_VERSION).contains(&row.version))
        || (row.key == FETCH && !(0..=MAX_FETCH_VERSION).contains(&row.version))
    {
        UNKNOWN_VERSION
    } else {
        0
    };
    (reason, wall, Some(parsed))
}

/// The line's row fields when every required one is there, else `None` (corrupt).
fn complete<'l, 'a>(line: &'l Line<'a>) -> Option<Row<'l, 'a>> {
    let header = line.request_header.get()?;
    line.local_time_ms.get()?;
    line.response_queue_time_ms.get()?;
    line.send_time_ms.get()?;
    line.principal.get()?;
    Some(Row {
        line,
        key: header.request_api_key.value()?,
        version: header.request_api_version.value()?,
        throttle: line.throttle_time_ms.value()?,
    })
}

/// A fetch's replica id: `replicaState.replicaId` (v15+), else `replicaId`, else -1.
fn replica_id(line: &Line<'_>) -> i32 {
    let request = line.request.get();
    request
        .and_then(|r| r.replica_state.get())
        .and_then(|s| s.replica_id.value())
        .or_else(|| request.and_then(|r| r.replica_id.value()))
        .unwrap_or(-1)
}

/// Milliseconds as Spark's `round(ms * 1000)` cast to a long: half away from zero,
/// saturating.
fn micros(ms: f64) -> i64 {
    (ms * 1000.0).round() as i64
}

fn push_line(out: &mut Columns, raw: &[u8], options: Options) {
    let (reason, wall, parsed) = classify(raw);
    out.reason.push(reason);
    if reason != 0 {
        let lossy = String::from_utf8_lossy(raw);
        let end = lossy
            .char_indices()
            .nth(EXAMPLE_CHARS)
            .map_or(lossy.len(), |(i, _)| i);
        out.example.push(&lossy[..end]);
    } else {
        out.example.push_null();
    }
    out.wall_us.push(wall);
    let row = parsed.as_ref().and_then(complete);
    match row {
        Some(row) if reason == 0 => push_row(out, &row, Some(options)),
        Some(row) if reason == FORWARDED && is_mutation(row.key) => {
            // a skipped line: its fields time the broker's row, its topics count nowhere
            push_row(out, &row, None);
            // The controller records the mutation quota when its event loop takes the
            // request, which its handler hands over at the end of its local time; the
            // remote time after is the metadata commit. So the time is the line's end
            // less the remote, response-queue and send times.
            let remote = micros(row.line.remote_time_ms.value().unwrap_or(0.0));
            if let Some(before) = out.before_us.last_mut() {
                *before = before.wrapping_add(remote);
            }
        }
        _ => push_empty(out, parsed.as_ref()),
    }
}

/// CreateTopics, CreatePartitions, DeleteTopics: the controller-mutation quota's APIs.
fn is_mutation(key: i32) -> bool {
    matches!(key, CREATE_TOPICS | CREATE_PARTITIONS | DELETE_TOPICS)
}

/// Defaults for a skipped line (its ShareFetch flag still set from its key).
fn push_empty(out: &mut Columns, parsed: Option<&Line<'_>>) {
    let key = parsed
        .and_then(|l| l.request_header.get())
        .and_then(|h| h.request_api_key.value());
    out.before_us.push(0);
    out.user.push("");
    out.client.push("");
    out.api.push("");
    out.bytes.push(0);
    out.thread_ns.push(None);
    out.acks.push(None);
    out.kafka_throttle.push(0);
    out.api_version.push(None);
    out.correlation_id.push(None);
    out.strict.push(None);
    out.share_fetch.push(key == Some(SHARE_FETCH));
    out.fetch_connection.push(None);
    out.fetch_position.push(None);
    out.fetch_empty.push(None);
    out.fetch_max_bytes.push(None);
    out.close_reads();
    out.close_topics(false);
}

/// A row's fields; its topic list with `options`, none without (a skipped line's).
fn push_row(out: &mut Columns, row: &Row<'_, '_>, options: Option<Options>) {
    let line = row.line;
    let (key, version) = (row.key, row.version);
    let header = line
        .request_header
        .get()
        .expect("a complete line has a header");
    let request = line.request.get();
    let response = line.response.get();
    let queue = line.response_queue_time_ms.value().unwrap_or(0.0);
    let send = line.send_time_ms.value().unwrap_or(0.0);
    out.before_us.push(micros(queue).wrapping_add(micros(send)));
    // quotas use the principal's name whatever its type: what follows the first ':'
    let principal = line.principal.get().map_or("", |p| p.as_str());
    out.user.push(
        principal
            .split_once(':')
            .map_or(principal, |(_, name)| name),
    );
    out.client
        .push(header.client_id.get().map_or("", |c| c.as_str()));
    match header.request_api_key_name.get() {
        Some(name) if name.as_str().is_ascii() => out.api.push(&name.as_str().to_ascii_lowercase()),
        Some(name) => out.api.push(&name.as_str().to_lowercase()),
        None => out.api.push_parts(&["api_", &key.to_string()]),
    }
    let bytes = match (key, request, response) {
        (PRODUCE, Some(request), _) => {
            produce_request_size(version, header.client_id.get(), request)
        }
        // a throttled fetch: Kafka un-records its size and sends an empty response
        (FETCH, _, Some(response)) if row.throttle <= 0 => fetch_response_size(version, response),
        _ => 0,
    };
    out.bytes.push(bytes);
    let acks = request.and_then(|r| r.acks.value());
    // Kafka charges the handler's time and the network threads'; the log has the first
    let (read, fetched) = match key {
        PRODUCE => (bytes, None),
        FETCH => (0, Some(bytes)),
        _ => (0, None),
    };
    let network = request_time::network_thread_ns(micros(send), read, fetched);
    let thread = micros(line.local_time_ms.value().unwrap_or(0.0))
        .wrapping_mul(1000)
        .saturating_add(network);
    // acks=0: both go to the exempt sensor, not the request quota
    out.thread_ns
        .push((!(key == PRODUCE && acks == Some(0))).then_some(thread));
    out.acks.push(if key == PRODUCE { acks } else { None });
    let strict_since = match key {
        CREATE_TOPICS => Some(CREATE_TOPICS_STRICT_SINCE),
        CREATE_PARTITIONS => Some(CREATE_PARTITIONS_STRICT_SINCE),
        DELETE_TOPICS => Some(DELETE_TOPICS_STRICT_SINCE),
        _ => None,
    };
    // A broker's line of a forwarded mutation has the request quota's throttle only; the
    // controller-mutation throttle is in the response, and the client gets the larger.
    let throttle = match strict_since {
        Some(_) => {
            let mutation = response
                .and_then(|r| r.throttle_time_ms.value())
                .unwrap_or(0);
            row.throttle.max(mutation)
        }
        None => row.throttle,
    };
    out.kafka_throttle.push(throttle);
    out.api_version.push(Some(version));
    out.correlation_id.push(header.correlation_id.value());
    out.strict
        .push(strict_since.map(|since| version >= i32::from(since)));
    out.share_fetch.push(key == SHARE_FETCH);
    // a row's fetch is a consumer's (followers are skipped before)
    let position = request.filter(|_| key == FETCH);
    out.fetch_connection.push(
        position.map(|_| fetch::connection_key(line.connection.get().map_or("", |c| c.as_str()))),
    );
    out.fetch_position.push(position.map(fetch::position_key));
    push_reads(out, row, options.is_some());
    match options {
        Some(options) => push_topics(out, key, line, options),
        None => out.close_topics(false),
    }
}

/// What the line says about the bytes in partitions (`_kq_reads`), for sizing throttled
/// fetches from the produce lines: a produce's batches where they went, and the
/// partitions a throttled full consumer fetch asked for (an incremental one lists only
/// what changed in its session, so its partitions are not all in its line). Nothing on a
/// skipped line (`row_line` false).
fn push_reads(out: &mut Columns, row: &Row<'_, '_>, row_line: bool) {
    let line = row.line;
    let (request, response) = (line.request.get(), line.response.get());
    let mut empty = None;
    let mut limit = None;
    match (row.key, request, response) {
        (PRODUCE, Some(request), Some(response)) if row_line => {
            push_produced(out, request, response);
        }
        (FETCH, Some(request), _) if row_line && row.throttle > 0 => {
            let full = row.version < 7 || request.session_epoch.value().unwrap_or(-1) <= 0;
            if full {
                for topic in request.topics.get().map_or(&[][..], Vec::as_slice) {
                    let Some(topic) = topic.get() else { continue };
                    let name = topic.topic.get().or(topic.topic_id.get());
                    let name = name.map_or("", |n| n.as_str());
                    for p in topic.partitions.get().map_or(&[][..], Vec::as_slice) {
                        let p = p.get();
                        out.push_read(
                            ReadKind::Asked,
                            name,
                            p.and_then(|p| p.partition.value()).unwrap_or(-1),
                            p.and_then(|p| p.fetch_offset.value()).unwrap_or(-1),
                            p.and_then(|p| p.partition_max_bytes.value()).unwrap_or(0),
                        );
                    }
                }
                empty = Some(sizes::empty_fetch_response_size(row.version, request));
                limit = Some(if row.version >= 3 {
                    request.max_bytes.value().unwrap_or(i64::from(i32::MAX))
                } else {
                    i64::from(i32::MAX)
                });
            }
        }
        _ => {}
    }
    out.fetch_empty.push(empty);
    out.fetch_max_bytes.push(limit);
    out.close_reads();
}

/// A produce line's batches: each partition the response took without error, at its base
/// offset, with the size of its records in the request.
fn push_produced(out: &mut Columns, request: &json::Request<'_>, response: &json::Response<'_>) {
    let topics = request.topic_data.get().map_or(&[][..], Vec::as_slice);
    for answer in response.responses.get().map_or(&[][..], Vec::as_slice) {
        let Some(answer) = answer.get() else { continue };
        let name = answer.name.get().or(answer.topic_id.get());
        let Some(name) = name.map(|n| n.as_str()) else {
            continue;
        };
        let asked = topics
            .iter()
            .filter_map(|t| t.get())
            .find(|t| t.name.get().or(t.topic_id.get()).map(|n| n.as_str()) == Some(name));
        let Some(asked) = asked else { continue };
        let sent = asked.partition_data.get().map_or(&[][..], Vec::as_slice);
        for p in answer
            .partition_responses
            .get()
            .map_or(&[][..], Vec::as_slice)
        {
            let Some(p) = p.get() else { continue };
            let (Some(index), Some(offset)) = (p.index.value(), p.base_offset.value()) else {
                continue;
            };
            if p.error_code.value().unwrap_or(0) != 0 || offset < 0 {
                continue;
            }
            let size = sent
                .iter()
                .filter_map(|s| s.get())
                .find(|s| s.index.value() == Some(index))
                .and_then(|s| s.records_size_in_bytes.value());
            if let Some(size) = size {
                out.push_read(ReadKind::Produced, name, index, offset, size);
            }
        }
    }
}

/// What the line says about topics' partition counts, in order (`_kq_topics`).
fn push_topics(out: &mut Columns, key: i32, line: &Line<'_>, options: Options) {
    let request = line.request.get();
    let topics = request.and_then(|r| r.topics.get());
    let name = |t: &json::RequestTopic<'_>| t.name.get().map(|n| n.as_str().to_owned());
    let listed = match key {
        CREATE_TOPICS => topics.map(|ts| {
            ts.iter()
                .map(|t| {
                    let empty = json::RequestTopic::default();
                    let t = t.get().unwrap_or(&empty);
                    let assigned = t.assignments.value().map_or(-1, |c| c.0);
                    let count = match t.num_partitions.value() {
                        Some(n) if n >= 0 => n,
                        _ if assigned > 0 => i32::try_from(assigned).unwrap_or(i32::MAX),
                        _ => options.num_partitions,
                    };
                    (TopicOp::Create, name(t), Some(count), None)
                })
                .collect::<Vec<_>>()
        }),
        CREATE_PARTITIONS => topics.map(|ts| {
            ts.iter()
                .map(|t| match t.get() {
                    Some(t) => (TopicOp::Grow, name(t), t.count.value(), None),
                    None => (TopicOp::Grow, None, None, None),
                })
                .collect()
        }),
        DELETE_TOPICS => match topics {
            Some(ts) => Some(
                ts.iter()
                    .map(|t| (TopicOp::Delete, t.get().and_then(name), None, None))
                    .collect(),
            ),
            None => request.and_then(|r| r.topic_names.get()).map(|names| {
                names
                    .iter()
                    .map(|n| {
                        (
                            TopicOp::Delete,
                            n.get().map(|n| n.as_str().to_owned()),
                            None,
                            None,
                        )
                    })
                    .collect()
            }),
        },
        METADATA => line.response.get().and_then(|r| r.topics.get()).map(|ts| {
            ts.iter()
                .filter_map(|t| t.get())
                .filter(|t| t.error_code.value() == Some(0) && t.name.get().is_some())
                .map(|t| {
                    // Spark's size() of a null array: -1
                    let count = t.partitions.value().map_or(-1, |c| c.0);
                    let count = i32::try_from(count).unwrap_or(i32::MAX);
                    // Fetch v13+ names topics by id: the import maps them back
                    let id = t
                        .topic_id
                        .get()
                        .map(|i| i.as_str())
                        .filter(|i| *i != ZERO_TOPIC_ID);
                    (TopicOp::Seen, name_of(t), Some(count), id)
                })
                .collect()
        }),
        _ => None,
    };
    let valid = listed.is_some();
    for (op, name, count, id) in listed.unwrap_or_default() {
        out.push_topic(op, name.as_deref(), count, id);
    }
    out.close_topics(valid);
}

fn name_of(t: &json::MetadataTopic<'_>) -> Option<String> {
    t.name.get().map(|n| n.as_str().to_owned())
}

#[cfg(test)]
mod tests;
