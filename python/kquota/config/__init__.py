"""Quota configuration: Kafka's vocabulary, the quota file format, stores and live updates.

* :mod:`kquota.config.model`: :class:`QuotaConfig`, the quota file format, and the
  entities and properties Kafka's controller accepts (user / client-id entities, and
  :class:`IpEntity` for ``connection_creation_rate``).
* :mod:`kquota.config.static`: KIP-13 static defaults from a properties file.
* :mod:`kquota.config.store`: :class:`QuotaStore`, :class:`SQLiteStore`, :class:`MemoryStore`.
* :mod:`kquota.config.live`: :class:`LiveQuotas`, managers that follow a store.
"""

from kquota.config.backends import open_store
from kquota.config.live import LiveQuotas
from kquota.config.model import (
    ALL_PROPERTIES,
    CONNECTION_CREATION_RATE,
    CONTROLLER_MUTATION_RATE,
    PROPERTIES,
    PROPERTY_OF,
    AnyEntity,
    IpEntity,
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
)

__all__ = [
    "ALL_PROPERTIES",
    "CONNECTION_CREATION_RATE",
    "CONTROLLER_MUTATION_RATE",
    "PROPERTIES",
    "PROPERTY_OF",
    "Alteration",
    "AnyEntity",
    "ChangeSet",
    "IpEntity",
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
