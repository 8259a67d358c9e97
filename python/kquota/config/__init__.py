"""Quota configuration: Kafka's vocabulary, the quota file format, stores and live updates.

* :mod:`kquota.config.model`: :class:`QuotaConfig` and the quota file format.
* :mod:`kquota.config.static`: KIP-13 static defaults from a properties file.
* :mod:`kquota.config.store`: :class:`QuotaStore`, :class:`SQLiteStore`, :class:`MemoryStore`.
* :mod:`kquota.config.live`: :class:`LiveQuotas`, managers that follow a store.
"""

from kquota.config.live import LiveQuotas
from kquota.config.model import (
    PROPERTIES,
    PROPERTY_OF,
    QuotaConfig,
    QuotaEntry,
    Window,
)
from kquota.config.static import load_static_defaults
from kquota.config.store import (
    Alteration,
    ChangeSet,
    MemoryStore,
    QuotaStore,
    SQLiteStore,
    StoreSnapshot,
    open_store,
)

__all__ = [
    "PROPERTIES",
    "PROPERTY_OF",
    "Alteration",
    "ChangeSet",
    "LiveQuotas",
    "MemoryStore",
    "QuotaConfig",
    "QuotaEntry",
    "QuotaStore",
    "SQLiteStore",
    "StoreSnapshot",
    "Window",
    "load_static_defaults",
    "open_store",
]
