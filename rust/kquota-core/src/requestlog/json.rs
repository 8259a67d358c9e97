//! The typed, borrowed view of a line's JSON object: only the fields a row needs, read
//! with serde (every other key is skipped unparsed).
//!
//! Reads as Spark's `from_json` did before this module (its tests pin the behaviour): a
//! field of the wrong type, `null` or absent reads as `None` ([`Lax`]), so a `""` or
//! `null` request/response body is `None`; the caller decides whether a missing field
//! makes the line corrupt. Strings borrow from the line unless they hold escapes.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::{
    BoolDeserializer, BorrowedStrDeserializer, F64Deserializer, I64Deserializer,
    MapAccessDeserializer, SeqAccessDeserializer, StrDeserializer, U64Deserializer,
};
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize as DeriveDeserialize;

/// A JSON string that borrows from the line when it has no escapes (serde's own `Cow`
/// always copies when nested in another type).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Str<'a>(pub Cow<'a, str>);

impl Str<'_> {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// The JSON kind a field must have to be read.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Object,
    Array,
    Integer,
    Number,
    String,
    Bool,
}

/// A type read from one JSON kind.
pub trait Shape {
    const KIND: Kind;
}

impl Shape for i32 {
    const KIND: Kind = Kind::Integer;
}
impl Shape for i64 {
    const KIND: Kind = Kind::Integer;
}
impl Shape for f64 {
    const KIND: Kind = Kind::Number;
}
impl Shape for bool {
    const KIND: Kind = Kind::Bool;
}
impl Shape for Str<'_> {
    const KIND: Kind = Kind::String;
}
impl<T> Shape for Vec<T> {
    const KIND: Kind = Kind::Array;
}

/// A field read leniently: `None` when absent, `null` or of another kind than `T`'s
/// (an integer out of `T`'s range too), as Spark's `from_json` reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Lax<T>(pub Option<T>);

impl<T> Default for Lax<T> {
    fn default() -> Self {
        Lax(None)
    }
}

impl<T> Lax<T> {
    pub fn get(&self) -> Option<&T> {
        self.0.as_ref()
    }
}

impl<T: Copy> Lax<T> {
    pub fn value(&self) -> Option<T> {
        self.0
    }
}

impl<'de, T: Deserialize<'de> + Shape> Deserialize<'de> for Lax<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LaxVisitor(PhantomData))
    }
}

struct LaxVisitor<T>(PhantomData<T>);

impl<T> LaxVisitor<T> {
    /// A scalar of `T`'s kind converted, else `None` (a conversion error, such as an
    /// integer out of range, is a wrong type too).
    fn scalar<'de, D, E>(kind: Kind, d: D) -> Result<Lax<T>, E>
    where
        T: Deserialize<'de> + Shape,
        D: Deserializer<'de, Error = de::value::Error>,
        E: de::Error,
    {
        if T::KIND != kind {
            return Ok(Lax(None));
        }
        Ok(Lax(T::deserialize(d).ok()))
    }
}

impl<'de, T: Deserialize<'de> + Shape> Visitor<'de> for LaxVisitor<T> {
    type Value = Lax<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Self::scalar(Kind::Bool, BoolDeserializer::new(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        if T::KIND == Kind::Number {
            return Self::scalar(Kind::Number, F64Deserializer::new(v as f64));
        }
        Self::scalar(Kind::Integer, I64Deserializer::new(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        if T::KIND == Kind::Number {
            return Self::scalar(Kind::Number, F64Deserializer::new(v as f64));
        }
        Self::scalar(Kind::Integer, U64Deserializer::new(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Self::scalar(Kind::Number, F64Deserializer::new(v))
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Self::scalar(Kind::String, BorrowedStrDeserializer::new(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Self::scalar(Kind::String, StrDeserializer::new(v))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Self::scalar(Kind::String, StrDeserializer::new(&v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Lax(None))
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Lax(None))
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        if T::KIND == Kind::Object {
            return T::deserialize(MapAccessDeserializer::new(map)).map(|v| Lax(Some(v)));
        }
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Lax(None))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        if T::KIND == Kind::Array {
            return T::deserialize(SeqAccessDeserializer::new(seq)).map(|v| Lax(Some(v)));
        }
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Lax(None))
    }
}

/// An array read only for its length (its elements skipped unparsed).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Count(pub i64);

impl Shape for Count {
    const KIND: Kind = Kind::Array;
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
                let mut n = 0;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Count(n))
            }
        }
        d.deserialize_seq(V)
    }
}

/// An object read only for being there (its fields skipped unparsed).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Present;

impl Shape for Present {
    const KIND: Kind = Kind::Object;
}

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(d).map(|_| Present)
    }
}

macro_rules! object {
    ($($t:ident),*) => {$(
        impl Shape for $t<'_> {
            const KIND: Kind = Kind::Object;
        }
    )*};
}

/// An array of objects: an element of another kind reads as an object of absent fields.
pub type Objects<T> = Lax<Vec<Lax<T>>>;

/// The line's JSON object (`requestDescMetrics`).
#[derive(DeriveDeserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct Line<'a> {
    pub is_forwarded: Lax<bool>,
    #[serde(borrow)]
    pub request_header: Lax<Header<'a>>,
    #[serde(borrow)]
    pub request: Lax<Request<'a>>,
    #[serde(borrow)]
    pub response: Lax<Response<'a>>,
    pub local_time_ms: Lax<f64>,
    pub remote_time_ms: Lax<f64>,
    pub throttle_time_ms: Lax<i64>,
    pub response_queue_time_ms: Lax<f64>,
    pub send_time_ms: Lax<f64>,
    #[serde(borrow)]
    pub principal: Lax<Str<'a>>,
    #[serde(borrow)]
    pub connection: Lax<Str<'a>>,
}

#[derive(DeriveDeserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct Header<'a> {
    pub request_api_key: Lax<i32>,
    pub request_api_version: Lax<i32>,
    pub correlation_id: Lax<i32>,
    #[serde(borrow)]
    pub client_id: Lax<Str<'a>>,
    #[serde(borrow)]
    pub request_api_key_name: Lax<Str<'a>>,
}

/// A request body: the fields of Produce, Fetch and the three mutation APIs in one.
#[derive(DeriveDeserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct Request<'a> {
    pub acks: Lax<i32>,
    #[serde(borrow)]
    pub transactional_id: Lax<Str<'a>>,
    #[serde(borrow)]
    pub topic_data: Objects<ProduceTopic<'a>>,
    pub replica_id: Lax<i32>,
    pub replica_state: Lax<ReplicaState>,
    pub session_id: Lax<i32>,
    pub session_epoch: Lax<i32>,
    #[serde(borrow)]
    pub topics: Objects<RequestTopic<'a>>,
    #[serde(borrow)]
    pub forgotten_topics_data: Objects<ForgottenTopic<'a>>,
    #[serde(borrow)]
    pub topic_names: Lax<Vec<Lax<Str<'a>>>>,
    /// Fetch (v3+): the response's limit over all partitions.
    pub max_bytes: Lax<i64>,
}

#[derive(DeriveDeserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct ProduceTopic<'a> {
    #[serde(borrow)]
    pub name: Lax<Str<'a>>,
    /// v13+: the topic by id.
    #[serde(borrow)]
    pub topic_id: Lax<Str<'a>>,
    pub partition_data: Objects<ProducePartition>,
}

#[derive(DeriveDeserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct ProducePartition {
    pub index: Lax<i32>,
    pub records_size_in_bytes: Lax<i64>,
}

#[derive(DeriveDeserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct ReplicaState {
    pub replica_id: Lax<i32>,
}

/// A topic of a request's `topics`: CreateTopics (`numPartitions`, `assignments`),
/// CreatePartitions (`count`), DeleteTopics v6+ (`name` only) or Fetch (`topic` up to
/// v12, `topicId` from v13, and the partitions to fetch).
#[derive(DeriveDeserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct RequestTopic<'a> {
    #[serde(borrow)]
    pub name: Lax<Str<'a>>,
    pub num_partitions: Lax<i32>,
    pub count: Lax<i32>,
    pub assignments: Lax<Count>,
    #[serde(borrow)]
    pub topic: Lax<Str<'a>>,
    #[serde(borrow)]
    pub topic_id: Lax<Str<'a>>,
    pub partitions: Objects<FetchRequestPartition>,
}

/// A partition of a Fetch request: where the client reads it from.
#[derive(DeriveDeserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct FetchRequestPartition {
    pub partition: Lax<i32>,
    pub fetch_offset: Lax<i64>,
    pub partition_max_bytes: Lax<i64>,
}

/// A topic an incremental Fetch drops from its session (partitions by index).
#[derive(DeriveDeserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct ForgottenTopic<'a> {
    #[serde(borrow)]
    pub topic: Lax<Str<'a>>,
    #[serde(borrow)]
    pub topic_id: Lax<Str<'a>>,
    pub partitions: Lax<Vec<Lax<i32>>>,
}

/// A response body: Produce/mutation throttle, Fetch responses, Metadata topics.
#[derive(DeriveDeserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct Response<'a> {
    pub throttle_time_ms: Lax<i64>,
    #[serde(borrow)]
    pub responses: Objects<FetchTopic<'a>>,
    #[serde(borrow)]
    pub topics: Objects<MetadataTopic<'a>>,
}

/// A Fetch response topic, with the partitions under 3.0's key or 2.8's; or a Produce
/// response topic (`name` or, v13+, `topicId`, and `partitionResponses`).
#[derive(DeriveDeserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct FetchTopic<'a> {
    #[serde(borrow)]
    pub topic: Lax<Str<'a>>,
    #[serde(borrow)]
    pub name: Lax<Str<'a>>,
    #[serde(borrow)]
    pub topic_id: Lax<Str<'a>>,
    pub partitions: Objects<FetchPartition>,
    pub partition_responses: Objects<FetchPartition>,
}

#[derive(DeriveDeserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct FetchPartition {
    pub aborted_transactions: Lax<Count>,
    pub records_size_in_bytes: Lax<i64>,
    pub record_set_size_in_bytes: Lax<i64>,
    pub diverging_epoch: Lax<Present>,
    pub current_leader: Lax<Present>,
    pub snapshot_id: Lax<Present>,
    /// Produce: the partition, its error and where its batch went.
    pub index: Lax<i32>,
    pub error_code: Lax<i32>,
    pub base_offset: Lax<i64>,
}

#[derive(DeriveDeserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct MetadataTopic<'a> {
    #[serde(borrow)]
    pub name: Lax<Str<'a>>,
    /// v10+: the id that Fetch v13+ names the topic by.
    #[serde(borrow)]
    pub topic_id: Lax<Str<'a>>,
    pub error_code: Lax<i32>,
    pub partitions: Lax<Count>,
}

object!(
    Line,
    Header,
    Request,
    ProduceTopic,
    RequestTopic,
    ForgottenTopic,
    Response,
    FetchTopic,
    MetadataTopic
);

impl Shape for ProducePartition {
    const KIND: Kind = Kind::Object;
}
impl Shape for FetchRequestPartition {
    const KIND: Kind = Kind::Object;
}
impl Shape for ReplicaState {
    const KIND: Kind = Kind::Object;
}
impl Shape for FetchPartition {
    const KIND: Kind = Kind::Object;
}

/// The JSON parsers the bench compares; [`parse`] uses the one it picked.
pub mod parsers {
    use super::Line;

    /// serde_json on the borrowed view.
    pub fn serde_json(text: &str) -> Option<Line<'_>> {
        serde_json::from_str(text).ok()
    }
}

/// Deepest nesting read, as Jackson's default limit under Spark's `from_json`: a deeper
/// line is corrupt (serde skips unknown keys without a depth limit).
pub const MAX_DEPTH: usize = 1000;

/// Whether `text` nests arrays and objects deeper than [`MAX_DEPTH`]. Counting brackets
/// first is a vectorised pass; real lines never come near the limit.
pub fn too_deep(text: &[u8]) -> bool {
    // per 64-byte chunk a u8 count: a loop the compiler vectorises
    let open: usize = text
        .chunks(64)
        .map(|c| {
            usize::from(
                c.iter()
                    .map(|&b| u8::from(b == b'{' || b == b'['))
                    .sum::<u8>(),
            )
        })
        .sum();
    if open <= MAX_DEPTH {
        return false;
    }
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in text {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return true;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// The line's JSON object, or `None` when it is not one (invalid, truncated, nested too
/// deep, trailing text).
pub fn parse(text: &str) -> Option<Line<'_>> {
    if too_deep(text.as_bytes()) {
        return None;
    }
    parsers::serde_json(text)
}
