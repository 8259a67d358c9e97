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
)


class ScenarioError(InvalidValueError):
    """A conformance scenario file that is not valid JSON or not of the documented format."""


class QuotaFileError(InvalidValueError):
    """A quota file or configuration value that is not of the documented format."""


__all__ = [
    "InvalidConfigError",
    "InvalidQuotaError",
    "InvalidUsageError",
    "InvalidValueError",
    "KquotaError",
    "QuotaFileError",
    "ScenarioError",
]
