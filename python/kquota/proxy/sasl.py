"""The principal of a SASL authentication passing through the proxy.

Kafka's quotas use the authenticated principal's name as the ``user``. The proxy does not
authenticate anyone (the broker does); it reads the user name from the client's first
SaslAuthenticate message and adopts it once the broker answers that exchange without
an error. Without SASL the principal is ``ANONYMOUS``, as in Kafka.

* PLAIN (RFC 4616): ``[authzid] NUL authcid NUL passwd``; Kafka's principal is the
  ``authcid`` (it rejects an ``authzid`` that differs from it).
* SCRAM-SHA-256/512 (RFC 5802): the client-first message
  ``gs2-header n=USER,r=NONCE``; ``USER`` with ``=2C`` and ``=3D`` unescaped.

Other mechanisms (GSSAPI, OAUTHBEARER) derive the principal inside the broker from
credentials the proxy cannot verify: their connections keep ``ANONYMOUS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["ANONYMOUS", "PRINCIPAL_MECHANISMS", "SaslExchange", "principal_from_auth_bytes"]

ANONYMOUS: Final = "ANONYMOUS"
"""Kafka's principal name of an unauthenticated connection."""

PRINCIPAL_MECHANISMS: Final = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"})
"""The SASL mechanisms whose principal the proxy can read."""


@dataclass(slots=True)
class SaslExchange:
    """One connection's SASL exchange as the proxy follows it: the mechanism its
    SaslHandshake named, the user name its first SaslAuthenticate message gave, and the
    user its quotas apply to (``user``), which takes that name once the broker accepts it."""

    user: str = ANONYMOUS
    mechanism: str | None = None
    pending_user: str | None = None

    def authenticate(self, auth_bytes: object) -> bool:
        """Take the user name from a SaslAuthenticate message's ``auth_bytes`` (the first
        that has one); ``True`` when the mechanism is one whose principal the proxy cannot
        read (the connection's quotas then apply as :data:`ANONYMOUS`)."""
        if self.mechanism is None or self.pending_user is not None:
            return False
        if not isinstance(auth_bytes, bytes):
            return False
        self.pending_user = principal_from_auth_bytes(self.mechanism, auth_bytes)
        return self.pending_user is None and self.mechanism not in PRINCIPAL_MECHANISMS

    def result(self, error_code: int) -> None:
        """The broker's answer to a SaslAuthenticate: the user name is adopted once it
        answers without an error, and forgotten when it refuses."""
        if error_code == 0 and self.pending_user is not None:
            self.user = self.pending_user
        elif error_code != 0:
            self.pending_user = None


def principal_from_auth_bytes(mechanism: str, auth_bytes: bytes) -> str | None:
    """The user name in a client's first SASL message of ``mechanism``, or ``None``.

    ``None`` when the mechanism is not one of :data:`PRINCIPAL_MECHANISMS` or the message
    is not of its format (the broker will then reject it).
    """
    try:
        if mechanism == "PLAIN":
            return _plain(auth_bytes)
        if mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            return _scram(auth_bytes)
    except UnicodeDecodeError:
        return None
    return None


def _plain(message: bytes) -> str | None:
    parts = message.split(b"\0")
    if len(parts) != 3 or not parts[1]:
        return None
    return parts[1].decode("utf-8")


def _scram(message: bytes) -> str | None:
    text = message.decode("utf-8")
    # gs2-header: "n," / "y," / "p=...," then "[a=authzid]," ; then the bare message
    parts = text.split(",", 2)
    if len(parts) != 3:
        return None
    for attribute in parts[2].split(","):
        if attribute.startswith("n="):
            name = attribute[2:]
            return name.replace("=2C", ",").replace("=3D", "=") or None
    return None
