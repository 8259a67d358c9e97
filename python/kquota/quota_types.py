"""The quota types a client-quota manager enforces, named as the core names them.

:data:`QUOTA_TYPES` is the core's own tuple; :data:`QuotaType` spells the same names out
for type checkers, which cannot read them from the extension (a test holds the two
together)."""

from __future__ import annotations

from typing import Final, Literal

from kquota import _core

__all__ = ["QUOTA_TYPES", "QuotaType"]

QuotaType = Literal["produce", "fetch", "request"]
"""``produce`` (``producer_byte_rate``), ``fetch`` (``consumer_byte_rate``) or ``request``
(``request_percentage``)."""

QUOTA_TYPES: Final[tuple[QuotaType, ...]] = _core.QUOTA_TYPES
"""The quota types in the core's order: produce, fetch, request."""
