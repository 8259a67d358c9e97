//! Kafka's framing: a 4-byte big-endian size, then that many bytes (a request or a
//! response). Frames are read with a buffer that grows only as bytes arrive, so a size
//! prefix alone never allocates what it announces, and never past the bound.

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::error::FrameError;

/// Kafka's default `socket.request.max.bytes` (100 MiB): the largest frame read.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 104_857_600;

/// Bytes asked of the socket at a time: a frame larger than this is read in steps.
const READ_CHUNK: usize = 64 * 1024;

/// Bytes asked of the socket before a frame's size is known. An idle connection holds only
/// this much (its buffer is let go whenever it has been read out), so ten thousand idle
/// connections cost tens of megabytes, not gigabytes.
const FIRST_READ: usize = 4 * 1024;

/// The first whole frame at the front of `buf` (without its size prefix), removed from
/// it; `Ok(None)` when `buf` does not hold a whole frame yet. A negative size or one over
/// `max` is an error, and `buf` is then left as it was.
pub fn split_frame(buf: &mut BytesMut, max: usize) -> Result<Option<BytesMut>, FrameError> {
    let Some(size) = frame_size(buf, max)? else {
        return Ok(None);
    };
    if buf.len() < 4 + size {
        return Ok(None);
    }
    buf.advance(4);
    Ok(Some(buf.split_to(size)))
}

/// The size prefix at the front of `buf`, checked; `Ok(None)` when it is not all there.
fn frame_size(buf: &[u8], max: usize) -> Result<Option<usize>, FrameError> {
    let Some(prefix) = buf.get(..4) else {
        return Ok(None);
    };
    let size = i32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
    let size = usize::try_from(size).map_err(|_| FrameError::NegativeSize(size))?;
    if size > max {
        return Err(FrameError::TooLarge { size, max });
    }
    Ok(Some(size))
}

/// Reads frames from one side of a connection.
#[derive(Debug)]
pub struct FrameReader<R> {
    inner: R,
    buf: BytesMut,
    max: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// A reader of frames of at most `max` bytes.
    pub fn new(inner: R, max: usize) -> Self {
        FrameReader {
            inner,
            buf: BytesMut::new(),
            max,
        }
    }

    /// The next frame (without its size prefix); `Ok(None)` when the peer closed the
    /// connection between frames.
    pub async fn read_frame(&mut self) -> Result<Option<BytesMut>, FrameError> {
        loop {
            if let Some(frame) = split_frame(&mut self.buf, self.max)? {
                if self.buf.is_empty() {
                    // read out: let the rest of the allocation go with the frame
                    self.buf = BytesMut::new();
                }
                return Ok(Some(frame));
            }
            // Room for what is still missing of this frame, a chunk at a time; a little
            // until its size is known.
            let wanted = match frame_size(&self.buf, self.max)? {
                Some(size) => (4 + size - self.buf.len()).min(READ_CHUNK),
                None => FIRST_READ,
            };
            self.buf.reserve(wanted);
            if self.inner.read_buf(&mut self.buf).await? == 0 {
                return match frame_size(&self.buf, self.max)? {
                    _ if self.buf.is_empty() => Ok(None),
                    Some(size) => Err(FrameError::Truncated {
                        expected: size,
                        got: self.buf.len() - 4,
                    }),
                    None => Err(FrameError::Truncated {
                        expected: 4,
                        got: self.buf.len(),
                    }),
                };
            }
        }
    }

    /// Bytes read from the socket that no frame returned yet holds.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The reader's source.
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(body: &[u8]) -> Vec<u8> {
        let mut out = (body.len() as i32).to_be_bytes().to_vec();
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn whole_frames_are_split_off_in_order() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&framed(b"abc"));
        buf.extend_from_slice(&framed(b""));
        buf.extend_from_slice(&framed(b"xy")[..4]);
        assert_eq!(&split_frame(&mut buf, 10).unwrap().unwrap()[..], b"abc");
        assert_eq!(&split_frame(&mut buf, 10).unwrap().unwrap()[..], b"");
        assert!(split_frame(&mut buf, 10).unwrap().is_none());
        buf.extend_from_slice(b"xy");
        assert_eq!(&split_frame(&mut buf, 10).unwrap().unwrap()[..], b"xy");
        assert!(buf.is_empty());
    }

    #[test]
    fn bad_sizes_are_errors_that_name_them() {
        let mut buf = BytesMut::from(&(-2i32).to_be_bytes()[..]);
        let err = split_frame(&mut buf, 10).unwrap_err();
        assert!(matches!(err, FrameError::NegativeSize(-2)), "{err:?}");
        assert!(err.to_string().contains("-2"));
        assert_eq!(buf.len(), 4);
        let mut buf = BytesMut::from(&11i32.to_be_bytes()[..]);
        let err = split_frame(&mut buf, 10).unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { size: 11, max: 10 }));
        assert!(err.to_string().contains("11 bytes"));
    }

    #[tokio::test]
    async fn a_reader_reads_frames_across_reads_and_reports_truncation() {
        let mut bytes = framed(&[7u8; 200_000]);
        bytes.extend_from_slice(&framed(b"tail"));
        let mut reader = FrameReader::new(&bytes[..], DEFAULT_MAX_FRAME_BYTES);
        assert_eq!(reader.read_frame().await.unwrap().unwrap().len(), 200_000);
        assert_eq!(&reader.read_frame().await.unwrap().unwrap()[..], b"tail");
        assert!(reader.read_frame().await.unwrap().is_none());

        let cut = &framed(b"abcdef")[..7];
        let err = FrameReader::new(cut, 100).read_frame().await.unwrap_err();
        assert!(
            matches!(
                err,
                FrameError::Truncated {
                    expected: 6,
                    got: 3
                }
            ),
            "{err:?}"
        );
        let err = FrameReader::new(&[0u8, 0][..], 100)
            .read_frame()
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                FrameError::Truncated {
                    expected: 4,
                    got: 2
                }
            ),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn an_announced_size_alone_allocates_no_more_than_a_chunk() {
        // 100 MiB announced, 10 bytes sent: the buffer holds what arrived, not the size.
        let mut bytes = (DEFAULT_MAX_FRAME_BYTES as i32).to_be_bytes().to_vec();
        bytes.extend_from_slice(&[1u8; 10]);
        let mut reader = FrameReader::new(&bytes[..], DEFAULT_MAX_FRAME_BYTES);
        assert!(reader.read_frame().await.is_err());
        assert!(
            reader.buf.capacity() <= 2 * READ_CHUNK,
            "{}",
            reader.buf.capacity()
        );
    }
}
