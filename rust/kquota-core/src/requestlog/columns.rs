//! Arrow-layout column builders: values, a validity mask where a column can be null, and
//! strings as offsets + bytes, so a binding hands them to Arrow without copying.

/// A string column: `offsets[i]..offsets[i + 1]` are row `i`'s bytes of `data`.
#[derive(Debug, Clone, PartialEq)]
pub struct Strings {
    pub offsets: Vec<i32>,
    pub data: Vec<u8>,
    /// `None`: no null; else one flag per row, `true` when the row has a value.
    pub valid: Option<Vec<bool>>,
}

impl Strings {
    pub fn new(nullable: bool) -> Self {
        Strings {
            offsets: vec![0],
            data: Vec::new(),
            valid: nullable.then(Vec::new),
        }
    }

    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn close(&mut self, valid: bool) {
        // Arrow's i32 offsets: the caller keeps batches far below 2 GiB of text
        self.offsets
            .push(i32::try_from(self.data.len()).unwrap_or(i32::MAX));
        if let Some(v) = &mut self.valid {
            v.push(valid);
        }
    }

    pub fn push(&mut self, text: &str) {
        self.data.extend_from_slice(text.as_bytes());
        self.close(true);
    }

    /// Pushes `parts` concatenated.
    pub fn push_parts(&mut self, parts: &[&str]) {
        for p in parts {
            self.data.extend_from_slice(p.as_bytes());
        }
        self.close(true);
    }

    pub fn push_null(&mut self) {
        self.close(false);
    }

    /// The bytes of row `i` (for tests and checks).
    pub fn get(&self, i: usize) -> Option<&str> {
        if self.valid.as_ref().is_some_and(|v| !v[i]) {
            return None;
        }
        let (a, b) = (self.offsets[i] as usize, self.offsets[i + 1] as usize);
        std::str::from_utf8(&self.data[a..b]).ok()
    }
}

/// A nullable fixed-width column.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Nullable<T> {
    pub values: Vec<T>,
    pub valid: Vec<bool>,
}

impl<T: Copy + Default> Nullable<T> {
    pub fn push(&mut self, value: Option<T>) {
        self.values.push(value.unwrap_or_default());
        self.valid.push(value.is_some());
    }

    pub fn get(&self, i: usize) -> Option<T> {
        self.valid[i].then(|| self.values[i])
    }
}

/// What a line says about a topic's partition count (`_kq_topics`' `op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum TopicOp {
    /// CreateTopics: the topic and its requested count.
    Create = 0,
    /// CreatePartitions: the topic and its new count.
    Grow = 1,
    /// DeleteTopics: the topic (no count).
    Delete = 2,
    /// A Metadata response's topic without error, and its partitions.
    Seen = 3,
}

/// The names of [`TopicOp`] by code.
pub const TOPIC_OPS: [&str; 4] = ["create", "grow", "delete", "seen"];

/// What a line says about the bytes in a partition (`_kq_reads`' `kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadKind {
    /// A produced batch: its first offset and its size (from a Produce line).
    Produced,
    /// A partition a throttled consumer fetch asked for: its fetch offset and
    /// `partitionMaxBytes`.
    Asked,
}

/// The names of [`ReadKind`] by code.
pub const READ_KINDS: [&str; 2] = ["produced", "asked"];

/// Every line's columns, one row per line (rows of skipped lines hold defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct Columns {
    /// 0 for a row, else k for the k-th reason of [`super::REASONS`].
    pub reason: Vec<u8>,
    /// The first [`super::EXAMPLE_CHARS`] characters of a skipped line (lossy UTF-8).
    pub example: Strings,
    /// The end time: the timestamp as wall-clock microseconds read as UTC (null when the
    /// line has no valid one); the caller applies the broker's zone.
    pub wall_us: Nullable<i64>,
    /// Microseconds from when Kafka recorded quota usage to the end:
    /// `round(responseQueueTimeMs * 1000) + round(sendTimeMs * 1000)`, plus
    /// `round(remoteTimeMs * 1000)` on a controller's line of a forwarded mutation (skipped
    /// as [`super::FORWARDED`], but with its row's fields, to time the broker's row).
    pub before_us: Vec<i64>,
    pub user: Strings,
    pub client: Strings,
    pub api: Strings,
    pub bytes: Vec<i64>,
    pub thread_ns: Nullable<i64>,
    pub acks: Nullable<i32>,
    pub kafka_throttle: Vec<i64>,
    pub api_version: Nullable<i32>,
    pub correlation_id: Nullable<i32>,
    pub strict: Nullable<bool>,
    pub share_fetch: Vec<bool>,
    /// A consumer fetch's [`super::fetch::connection_key`] (null on other rows).
    pub fetch_connection: Nullable<i64>,
    /// A consumer fetch's [`super::fetch::position_key`] (null on other rows).
    pub fetch_position: Nullable<i64>,
    /// Per line, its topics are `topic_op[topic_offsets[i]..topic_offsets[i + 1]]` (and
    /// the same range of names and counts); `topics_valid[i]` false for no list.
    pub topic_offsets: Vec<i32>,
    pub topics_valid: Vec<bool>,
    pub topic_op: Vec<u8>,
    pub topic_name: Strings,
    pub topic_count: Nullable<i32>,
    /// A Metadata topic's id (v10+), null on other entries.
    pub topic_id: Strings,
    /// Per line, its reads are `read_kind[read_offsets[i]..read_offsets[i + 1]]` (and the
    /// same range of the other `read_` columns).
    pub read_offsets: Vec<i32>,
    pub read_kind: Vec<u8>,
    /// The topic as the line names it: its name, or its id where the version has ids.
    pub read_topic: Strings,
    pub read_partition: Vec<i32>,
    pub read_offset: Vec<i64>,
    pub read_bytes: Vec<i64>,
    /// A throttled full consumer fetch: the size of the response it would have had with no
    /// records ([`super::sizes::empty_fetch_response_size`]) and its `maxBytes`.
    pub fetch_empty: Nullable<i64>,
    pub fetch_max_bytes: Nullable<i64>,
}

impl Default for Columns {
    fn default() -> Self {
        Columns {
            reason: Vec::new(),
            example: Strings::new(true),
            wall_us: Nullable::default(),
            before_us: Vec::new(),
            user: Strings::new(false),
            client: Strings::new(false),
            api: Strings::new(false),
            bytes: Vec::new(),
            thread_ns: Nullable::default(),
            acks: Nullable::default(),
            kafka_throttle: Vec::new(),
            api_version: Nullable::default(),
            correlation_id: Nullable::default(),
            strict: Nullable::default(),
            share_fetch: Vec::new(),
            fetch_connection: Nullable::default(),
            fetch_position: Nullable::default(),
            topic_offsets: vec![0],
            topics_valid: Vec::new(),
            topic_op: Vec::new(),
            topic_name: Strings::new(true),
            topic_count: Nullable::default(),
            topic_id: Strings::new(true),
            read_offsets: vec![0],
            read_kind: Vec::new(),
            read_topic: Strings::new(false),
            read_partition: Vec::new(),
            read_offset: Vec::new(),
            read_bytes: Vec::new(),
            fetch_empty: Nullable::default(),
            fetch_max_bytes: Nullable::default(),
        }
    }
}

impl Columns {
    pub fn len(&self) -> usize {
        self.reason.len()
    }

    pub fn is_empty(&self) -> bool {
        self.reason.is_empty()
    }

    pub(crate) fn push_topic(
        &mut self,
        op: TopicOp,
        name: Option<&str>,
        count: Option<i32>,
        id: Option<&str>,
    ) {
        self.topic_op.push(op as u8);
        match name {
            Some(n) => self.topic_name.push(n),
            None => self.topic_name.push_null(),
        }
        self.topic_count.push(count);
        match id {
            Some(i) => self.topic_id.push(i),
            None => self.topic_id.push_null(),
        }
    }

    pub(crate) fn push_read(
        &mut self,
        kind: ReadKind,
        topic: &str,
        partition: i32,
        offset: i64,
        bytes: i64,
    ) {
        self.read_kind.push(kind as u8);
        self.read_topic.push(topic);
        self.read_partition.push(partition);
        self.read_offset.push(offset);
        self.read_bytes.push(bytes);
    }

    /// Ends the current line's reads.
    pub(crate) fn close_reads(&mut self) {
        self.read_offsets
            .push(i32::try_from(self.read_kind.len()).unwrap_or(i32::MAX));
    }

    /// Ends the current line's topic list (`valid` false: no list).
    pub(crate) fn close_topics(&mut self, valid: bool) {
        self.topic_offsets
            .push(i32::try_from(self.topic_op.len()).unwrap_or(i32::MAX));
        self.topics_valid.push(valid);
    }
}
