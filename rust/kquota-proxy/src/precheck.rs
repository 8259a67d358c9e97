//! A walk over a message's bytes as Kafka's schema lays them out, checking every length and
//! count against the bytes there, without building anything.
//!
//! The `kquota-proxy` crate decodes a few client requests whole with the `kafka-protocol`
//! crate, which reserves room for an array's elements from the count the message claims
//! before reading them: a count of two billion in a request of a few bytes would have the
//! proxy ask for hundreds of gigabytes and abort. A client's message is therefore walked
//! first: every element is read where the schema puts it, so a message that passes holds
//! as many elements as its counts say, and decoding it costs memory in proportion to its
//! bytes. (Responses come from the broker the proxy is configured with and are decoded as
//! they are.)

use crate::error::HeaderError;

/// A cursor over one message body, flexible (compact lengths, tagged fields) or not.
pub(crate) struct Skim<'a> {
    buf: &'a [u8],
    pos: usize,
    flexible: bool,
}

type Result<T> = std::result::Result<T, HeaderError>;

impl<'a> Skim<'a> {
    pub(crate) fn new(buf: &'a [u8], flexible: bool) -> Self {
        Skim {
            buf,
            pos: 0,
            flexible,
        }
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Whether every byte was walked.
    pub(crate) fn done(&self) -> bool {
        self.pos == self.buf.len()
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(HeaderError::Short {
                needed: self.pos + n,
                len: self.buf.len(),
            });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    pub(crate) fn int32(&mut self) -> Result<i32> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn int16(&mut self) -> Result<i16> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn uvarint(&mut self, field: &'static str) -> Result<u32> {
        let mut value: u64 = 0;
        for i in 0..5 {
            let byte = self.take(1)?[0];
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return u32::try_from(value).map_err(|_| HeaderError::BadLength {
                    field,
                    value: value as i64,
                });
            }
        }
        Err(HeaderError::BadLength { field, value: -1 })
    }

    /// A string (`nullable`: -1, or 0 in a compact one, is null).
    pub(crate) fn string(&mut self, nullable: bool) -> Result<()> {
        let len = if self.flexible {
            i64::from(self.uvarint("string length")?) - 1
        } else {
            i64::from(self.int16()?)
        };
        if len < 0 {
            return if nullable && len == -1 {
                Ok(())
            } else {
                Err(HeaderError::BadLength {
                    field: "string length",
                    value: len,
                })
            };
        }
        self.take(len as usize).map(drop)
    }

    /// An array whose elements `each` walks (`nullable`: a null one is allowed). Every
    /// element takes at least a byte: a count over the bytes left is refused before any.
    pub(crate) fn array(
        &mut self,
        nullable: bool,
        mut each: impl FnMut(&mut Self) -> Result<()>,
    ) -> Result<()> {
        let count = if self.flexible {
            i64::from(self.uvarint("array length")?) - 1
        } else {
            i64::from(self.int32()?)
        };
        if count < 0 {
            return if nullable && count == -1 {
                Ok(())
            } else {
                Err(HeaderError::BadLength {
                    field: "array length",
                    value: count,
                })
            };
        }
        if count as u64 > self.remaining() as u64 {
            return Err(HeaderError::BadLength {
                field: "array length",
                value: count,
            });
        }
        for _ in 0..count {
            each(self)?;
        }
        Ok(())
    }

    /// The tagged fields of a flexible structure (nothing in an older one), each given to
    /// `each` as its tag and bytes.
    pub(crate) fn tagged_fields(
        &mut self,
        mut each: impl FnMut(u32, &'a [u8]) -> Result<()>,
    ) -> Result<()> {
        if !self.flexible {
            return Ok(());
        }
        let count = self.uvarint("tagged field count")?;
        if count as usize > self.remaining() {
            return Err(HeaderError::BadLength {
                field: "tagged field count",
                value: i64::from(count),
            });
        }
        for _ in 0..count {
            let tag = self.uvarint("tag")?;
            let size = self.uvarint("tagged field size")?;
            let bytes = self.take(size as usize)?;
            each(tag, bytes)?;
        }
        Ok(())
    }

    /// Tagged fields, skipped.
    pub(crate) fn skip_tagged_fields(&mut self) -> Result<()> {
        self.tagged_fields(|_, _| Ok(()))
    }
}

/// The replica id of a Fetch request body of `version` >= 15, where it moved from the body
/// into the `ReplicaState` tagged field (tag 1): -1 (a consumer) without it.
pub(crate) fn fetch_replica_id(body: &[u8], version: i16) -> Result<i32> {
    let mut s = Skim::new(body, true);
    // max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch
    s.take(4 + 4 + 4 + 1 + 4 + 4)?;
    s.array(false, |s| {
        s.take(16)?; // topic id
        s.array(false, |s| {
            // partition, current_leader_epoch, fetch_offset, last_fetched_epoch,
            // log_start_offset, partition_max_bytes
            s.take(4 + 4 + 8 + 4 + 8 + 4)?;
            s.skip_tagged_fields()
        })?;
        s.skip_tagged_fields()
    })?;
    s.array(false, |s| {
        s.take(16)?; // forgotten topic id
        s.array(false, |s| s.take(4).map(drop))?;
        s.skip_tagged_fields()
    })?;
    s.string(false)?; // rack id
    let mut replica_id = -1;
    s.tagged_fields(|tag, bytes| {
        if tag == 1 {
            replica_id = Skim::new(bytes, true).int32()?;
        }
        Ok(())
    })?;
    if !s.done() {
        return Err(unreadable("fetch request", version));
    }
    Ok(replica_id)
}

fn unreadable(message: &'static str, version: i16) -> HeaderError {
    HeaderError::Unreadable { message, version }
}

/// Checks a CreateTopics (19), DeleteTopics (20) or CreatePartitions (37) request body of
/// `version` against its schema before it is decoded whole.
pub(crate) fn check_mutation_request(body: &[u8], api_key: i16, version: i16) -> Result<()> {
    let int32s = |s: &mut Skim<'_>| s.array(false, |s| s.take(4).map(drop));
    let (s, message) = match api_key {
        19 => {
            let mut s = Skim::new(body, version >= 5);
            s.array(false, |s| {
                s.string(false)?; // name
                s.take(4 + 2)?; // num_partitions, replication_factor
                s.array(false, |s| {
                    s.take(4)?; // partition index
                    int32s(s)?; // broker ids
                    s.skip_tagged_fields()
                })?;
                s.array(false, |s| {
                    s.string(false)?; // config name
                    s.string(true)?; // value
                    s.skip_tagged_fields()
                })?;
                s.skip_tagged_fields()
            })?;
            s.take(4)?; // timeout_ms
            if version >= 1 {
                s.take(1)?; // validate_only
            }
            (s, "CreateTopics request")
        }
        20 => {
            let mut s = Skim::new(body, version >= 4);
            if version >= 6 {
                s.array(false, |s| {
                    s.string(true)?; // name
                    s.take(16)?; // topic id
                    s.skip_tagged_fields()
                })?;
            } else {
                s.array(false, |s| s.string(false))?;
            }
            s.take(4)?; // timeout_ms
            (s, "DeleteTopics request")
        }
        37 => {
            let mut s = Skim::new(body, version >= 2);
            s.array(false, |s| {
                s.string(false)?; // name
                s.take(4)?; // count
                s.array(true, |s| {
                    int32s(s)?; // broker ids
                    s.skip_tagged_fields()
                })?;
                s.skip_tagged_fields()
            })?;
            s.take(4 + 1)?; // timeout_ms, validate_only
            (s, "CreatePartitions request")
        }
        key => return Err(HeaderError::UnknownApiKey(key)),
    };
    let mut s = s;
    s.skip_tagged_fields()?;
    if s.done() {
        Ok(())
    } else {
        Err(unreadable(message, version))
    }
}

/// Checks a DescribeClientQuotas (48) or AlterClientQuotas (49) request body of `version`
/// against its schema before it is decoded whole.
pub(crate) fn check_client_quotas_request(body: &[u8], api_key: i16, version: i16) -> Result<()> {
    let mut s = Skim::new(body, version >= 1);
    let message = match api_key {
        48 => {
            s.array(false, |s| {
                s.string(false)?; // entity type
                s.take(1)?; // match type
                s.string(true)?; // match
                s.skip_tagged_fields()
            })?;
            s.take(1)?; // strict
            "DescribeClientQuotas request"
        }
        49 => {
            s.array(false, |s| {
                s.array(false, |s| {
                    s.string(false)?; // entity type
                    s.string(true)?; // entity name
                    s.skip_tagged_fields()
                })?;
                s.array(false, |s| {
                    s.string(false)?; // key
                    s.take(8 + 1)?; // value, remove
                    s.skip_tagged_fields()
                })?;
                s.skip_tagged_fields()
            })?;
            s.take(1)?; // validate_only
            "AlterClientQuotas request"
        }
        key => return Err(HeaderError::UnknownApiKey(key)),
    };
    s.skip_tagged_fields()?;
    if s.done() {
        Ok(())
    } else {
        Err(unreadable(message, version))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_over_the_bytes_left_is_refused_before_any_element() {
        // a non-flexible array claiming 2^31 - 1 elements, then two bytes
        let body = [0x7f, 0xff, 0xff, 0xff, 0, 0];
        let err = Skim::new(&body, false)
            .array(false, |s| s.take(1).map(drop))
            .unwrap_err();
        assert!(
            matches!(err, HeaderError::BadLength { field: "array length", value } if value == i64::from(i32::MAX)),
            "{err:?}"
        );
        // a compact one claiming 2^32 - 2 elements
        let body = [0xff, 0xff, 0xff, 0xff, 0x0f, 0];
        assert!(Skim::new(&body, true).array(false, |_| Ok(())).is_err());
        // null where allowed, refused where not
        assert!(Skim::new(&[0], true).array(true, |_| Ok(())).is_ok());
        assert!(Skim::new(&[0], true).array(false, |_| Ok(())).is_err());
    }

    #[test]
    fn hostile_mutation_requests_are_refused_before_decoding() {
        // CreateTopics v7 whose topics array claims a billion topics
        let body = [0xff, 0xff, 0xff, 0xff, 0x03, 0, 0, 0, 0, 0, 0];
        let err = check_mutation_request(&body, 19, 7).unwrap_err();
        assert!(matches!(err, HeaderError::BadLength { .. }), "{err:?}");
        // DeleteTopics v3: one name and the timeout; then with a byte too many
        let mut body = vec![0, 0, 0, 1, 0, 1, b'a', 0, 0, 0, 5];
        assert_eq!(check_mutation_request(&body, 20, 3), Ok(()));
        body.push(0);
        assert!(check_mutation_request(&body, 20, 3).is_err());
        // the same in v5 (compact lengths, tagged fields)
        let body = [2, 2, b'a', 0, 0, 0, 5, 0];
        assert_eq!(check_mutation_request(&body, 20, 5), Ok(()));
    }
}
