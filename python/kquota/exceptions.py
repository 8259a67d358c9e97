"""kquota's one exception hierarchy.

Every error kquota raises derives from :class:`KquotaError`; every rejected value is
also a :class:`ValueError`. The classes raised by the Rust core are declared there
once and re-exported here; errors that only the Python layers raise subclass them.
"""

from kquota._core import (
    InvalidConfigError,
    InvalidQuotaError,
    InvalidUsageError,
    InvalidValueError,
    KquotaError,
    QuotaCallbackError,
)


class ScenarioError(InvalidValueError):
    """A conformance scenario file that is not valid JSON or not of the documented format."""


class QuotaFileError(InvalidValueError):
    """A quota file or configuration value that is not of the documented format."""


class StoreError(KquotaError):
    """A configuration store that cannot be used: not a store, locked, unreadable."""


class ChannelError(InvalidValueError):
    """A throttled-channel call with a bad value or an unknown channel."""


class MetricsServerError(KquotaError, OSError):
    """The metrics endpoint could not be started (e.g. its port is in use)."""


class MissingExtraError(KquotaError, ImportError):
    """A part of kquota used without the optional dependencies it needs: the message names
    the extra that installs them (``pip install "kquota[proxy]"``)."""


class ProxyError(KquotaError):
    """A client connection the proxy closes: a malformed or oversized frame, an unknown API
    key or version, a response that does not match its request, or a dead upstream."""


class TrafficError(InvalidValueError):
    """Back-test traffic input that is missing, empty or not of the documented schema."""


class OutputError(KquotaError):
    """A file or folder kquota was asked to write (generated traffic, back-test results)
    that cannot be written: a name too long, a path through a file, no permission, a full
    disk, or a write that Spark refused."""


__all__ = [
    "ChannelError",
    "InvalidConfigError",
    "InvalidQuotaError",
    "InvalidUsageError",
    "InvalidValueError",
    "KquotaError",
    "MetricsServerError",
    "MissingExtraError",
    "OutputError",
    "ProxyError",
    "QuotaCallbackError",
    "QuotaFileError",
    "ScenarioError",
    "StoreError",
    "TrafficError",
]
