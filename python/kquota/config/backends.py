"""Which store a spec names, and opening it: a SQLite file (the default), a compacted
Kafka topic (:mod:`kquota.config.kafka_store`), or the store of a backend installed under
the ``kquota.stores`` entry-point group.

Apart from :mod:`kquota.config.store` so that the backends, which build on that module,
are imported by this one and not by it.
"""

from __future__ import annotations

import os
import re
from importlib.metadata import entry_points
from pathlib import Path
from typing import Final

from kquota.config.store import DEFAULT_LOCK_TIMEOUT, QuotaStore, SQLiteStore
from kquota.exceptions import KquotaError, StoreError

STORE_ENV: Final = "KQUOTA_STORE"
"""The environment variable naming the store when ``--store`` is not given."""

ENTRY_POINT_GROUP: Final = "kquota.stores"
"""The entry-point group of store backends, named after the URL scheme they serve."""


def default_store_path() -> Path:
    """``$XDG_STATE_HOME/kquota/quotas.sqlite``: ``~/.local/state/kquota/quotas.sqlite``
    when ``XDG_STATE_HOME`` is not set."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "kquota" / "quotas.sqlite"


def store_spec(spec: str | os.PathLike[str] | None = None) -> str:
    """The store to use: ``spec`` if given, else ``$KQUOTA_STORE``, else the default path."""
    if spec is not None and str(spec):
        return str(spec)
    return os.environ.get(STORE_ENV) or str(default_store_path())


_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://(.*)", re.DOTALL)


def open_store(
    spec: str | os.PathLike[str] | None = None, *, timeout: float = DEFAULT_LOCK_TIMEOUT
) -> QuotaStore:
    """The store named by ``spec`` (see :func:`store_spec`).

    A plain path or ``sqlite://PATH`` is a :class:`SQLiteStore` waiting at most ``timeout``
    seconds for a lock; ``kafka://HOST:PORT[,...]/TOPIC`` a
    :class:`~kquota.config.kafka_store.KafkaTopicStore` on a compacted topic, shared by
    every process following it (waiting at most ``timeout`` seconds for the cluster).
    ``SCHEME://...`` with another scheme is opened by the factory registered under that
    name in the ``kquota.stores`` entry-point group.
    """
    text = store_spec(spec)
    match = _SCHEME.fullmatch(text)
    if match is None:
        return SQLiteStore(text, timeout=timeout)
    scheme, rest = match.groups()
    if scheme == "sqlite":
        return SQLiteStore(rest, timeout=timeout)
    if scheme == "kafka":
        from kquota.config.kafka_store import open_kafka_store

        return open_kafka_store(text, timeout=timeout)
    found = list(entry_points(group=ENTRY_POINT_GROUP, name=scheme))
    if not found:
        raise StoreError(
            f"no store backend for {scheme}:// in {text!r}: use a file path, sqlite://PATH, "
            f"or install a backend registering {scheme!r} in the {ENTRY_POINT_GROUP!r} "
            "entry-point group"
        )
    try:
        store = found[0].load()(text)
    except KquotaError:
        raise
    except Exception as exc:
        raise StoreError(f"store backend {scheme!r} cannot open {text!r}: {exc}") from exc
    if not isinstance(store, QuotaStore):
        raise StoreError(
            f"store backend {scheme!r} returned {type(store).__name__}, not a QuotaStore"
        )
    return store
