"""``kquota proxy``: Kafka's client quotas in front of any Kafka-protocol broker.

:class:`ProxyServer` sits beside one broker, which advertises the proxy's address, or
(as a gateway, with ``broker_ports``) in front of a whole cluster, giving each broker a
port of its own and rewriting the broker addresses clients see. It applies a
:class:`~kquota.broker.QuotaPlugin`'s produce, fetch and request quotas to every client
connection, with Kafka's KIP-219 throttling, and optionally the controller-mutation quota
(KIP-599) of CreateTopics, CreatePartitions and DeleteTopics and the connection-creation
rates (KIP-612) of its listener and of each client IP. Its connections are served by the
Rust data path (``kquota._core.ProxyDataPath``), whose quota decisions it can keep as
:class:`ProxyDecision` (``keep_decisions``). A :class:`TrafficCapture` given to it
writes the traffic it sees as Parquet for ``kquota backtest`` (``kquota proxy --capture
DIR``; needs the ``proxy`` extra, which installs pyarrow). With a :class:`StoreAdmin`, it
answers Kafka's own quota administration (``kafka-configs.sh --bootstrap-server``,
KIP-546) from a quota store, for the principals its :class:`AdminAccess` admits.
"""

from typing import TYPE_CHECKING, Any, Final

from kquota._core import ProxyDataPath, ProxyDecision
from kquota.proxy.admin import AdminAccess, StoreAdmin
from kquota.proxy.capture import TrafficCapture

if TYPE_CHECKING:
    from kquota.proxy.server import (
        BOOTSTRAP_NODE_ID,
        BrokerManagers,
        GatewayBroker,
        ProxyServer,
    )

__all__ = [
    "ANONYMOUS",
    "BOOTSTRAP_NODE_ID",
    "AdminAccess",
    "BrokerManagers",
    "GatewayBroker",
    "ProxyDecision",
    "ProxyServer",
    "StoreAdmin",
    "TrafficCapture",
]

ANONYMOUS: Final[str] = ProxyDataPath.ANONYMOUS
"""The user of a connection without SASL, or whose SASL principal the proxy cannot read
(GSSAPI, OAUTHBEARER): Kafka's ``KafkaPrincipal.ANONYMOUS`` name."""

_SERVER_NAMES = frozenset({"BOOTSTRAP_NODE_ID", "BrokerManagers", "GatewayBroker", "ProxyServer"})


def __getattr__(name: str) -> Any:
    # The server is imported on first use: the command line's help loads without it.
    if name in _SERVER_NAMES:
        from kquota.proxy import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
