//! The errors of the data path. Each names the offending value and what was expected; a
//! connection that gets one is closed, as Kafka's socket server closes it.

use std::{fmt, io};

/// A frame that cannot be read: the connection it came from is closed.
#[derive(Debug)]
pub enum FrameError {
    /// The size prefix is negative.
    NegativeSize(i32),
    /// The size prefix is larger than the configured bound (Kafka's
    /// `socket.request.max.bytes`, 100 MiB by default).
    TooLarge { size: usize, max: usize },
    /// The peer closed the connection inside a frame.
    Truncated { expected: usize, got: usize },
    /// Reading the socket failed.
    Io(io::Error),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::NegativeSize(size) => {
                write!(f, "invalid frame size {size}: a Kafka frame's size is >= 0")
            }
            FrameError::TooLarge { size, max } => write!(
                f,
                "frame of {size} bytes is larger than the {max} bytes allowed \
                 (socket.request.max.bytes)"
            ),
            FrameError::Truncated { expected, got } => write!(
                f,
                "connection closed inside a frame: {got} of its {expected} bytes received"
            ),
            FrameError::Io(err) => write!(f, "socket error: {err}"),
        }
    }
}

impl std::error::Error for FrameError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FrameError::Io(err) => Some(err),
            _ => None,
        }
    }
}

impl From<io::Error> for FrameError {
    fn from(err: io::Error) -> Self {
        FrameError::Io(err)
    }
}

/// A request or response header that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// The frame ends before the header does.
    Short { needed: usize, len: usize },
    /// An API key Kafka does not define: its header version is unknown.
    UnknownApiKey(i16),
    /// A length or count that cannot be right (negative, or past the frame's end).
    BadLength { field: &'static str, value: i64 },
    /// A message body the codec of Kafka's schemas cannot read at its version.
    Unreadable { message: &'static str, version: i16 },
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderError::Short { needed, len } => write!(
                f,
                "frame of {len} bytes ends inside its header (at least {needed} bytes needed)"
            ),
            HeaderError::UnknownApiKey(key) => {
                write!(f, "unknown API key {key}: not one of Kafka's request types")
            }
            HeaderError::BadLength { field, value } => {
                write!(
                    f,
                    "invalid {field} {value} in a header: past the frame's end"
                )
            }
            HeaderError::Unreadable { message, version } => {
                write!(
                    f,
                    "unreadable {message} v{version}: not as Kafka's schema defines it"
                )
            }
        }
    }
}

impl std::error::Error for HeaderError {}

/// Why a connection closed: a handler's refusal or the transport's failure.
#[derive(Debug)]
pub(crate) enum Closed {
    /// The client sent what the proxy cannot read.
    Client(String),
    /// The broker is unreachable, silent, or answered what the proxy cannot read.
    Upstream(String),
    /// A socket failed.
    Io(io::Error),
    /// The quota core refused a value (a bug, or a manager misused by its owner).
    Quota(kquota_core::Error),
}

impl Closed {
    /// A request the proxy cannot read.
    pub(crate) fn request(err: HeaderError) -> Self {
        Closed::Client(format!("request: {err}"))
    }
}

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Closed::Client(msg) | Closed::Upstream(msg) => f.write_str(msg),
            Closed::Io(err) => write!(f, "{err}"),
            Closed::Quota(err) => write!(f, "quota error: {err}"),
        }
    }
}

impl From<io::Error> for Closed {
    fn from(err: io::Error) -> Self {
        Closed::Io(err)
    }
}

impl From<kquota_core::Error> for Closed {
    fn from(err: kquota_core::Error) -> Self {
        Closed::Quota(err)
    }
}
