"""What the proxy tells a custom quota callback (KIP-257) about the cluster: the brokers
and partition leaders of the Metadata responses that pass through it.

Kafka's broker calls ``updateClusterMetadata`` on every UpdateMetadata request from the
controller; a proxy sees no such request, so it reads the same facts from the Metadata
responses its clients ask for, and tells the callback when they changed (not on every
response: a callback that counts partition leaders would otherwise reset the quotas on
each client's metadata refresh).
"""

from __future__ import annotations

import logging
from typing import Any

from kquota._core import BrokerNode, ClusterMetadata, PartitionLeader
from kquota.broker.plugin import QuotaPlugin
from kquota.exceptions import KquotaError
from kquota.proxy import codec

__all__ = ["MetadataWatch", "cluster_metadata"]

log = logging.getLogger("kquota.proxy")

METADATA = 3
"""The Metadata API key."""


def cluster_metadata(body: Any, local: tuple[str, int] | None) -> ClusterMetadata:
    """The :class:`~kquota.ClusterMetadata` of a decoded Metadata response ``body``;
    ``local_broker`` is the broker advertised at ``local`` (the proxy's address), if any.
    Topics with an error (e.g. being deleted) are left out, as Kafka leaves them out."""
    brokers = [
        BrokerNode(
            int(b.node_id), str(b.host), int(b.port), None if b.rack is None else str(b.rack)
        )
        for b in body.brokers
    ]
    local_broker = None
    if local is not None:
        local_broker = next(
            (b.node_id for b in brokers if (b.host, b.port) == local),
            brokers[0].node_id if len(brokers) == 1 else None,
        )
    partitions = [
        PartitionLeader(
            str(t.name),
            int(p.partition_index),
            None if int(p.leader_id) < 0 else int(p.leader_id),
        )
        for t in body.topics
        if not t.error_code and t.name is not None
        for p in t.partitions
    ]
    cluster_id = getattr(body, "cluster_id", None)
    return ClusterMetadata(
        brokers,
        partitions,
        cluster_id=None if cluster_id is None else str(cluster_id),
        local_broker=local_broker,
    )


class MetadataWatch:
    """Tells ``plugin``'s quota callback about changed cluster metadata."""

    def __init__(self, plugin: QuotaPlugin) -> None:
        self.plugin = plugin
        self._last: tuple[Any, ...] | None = None

    def seen(
        self, spec: codec.Api, response: bytes, body_offset: int, local: tuple[str, int] | None
    ) -> None:
        """A Metadata response went through: tell the callback if its facts changed. A
        response that cannot be decoded or a callback that fails is logged, and the
        client's response goes on unchanged."""
        if self.plugin.quota_callback is None:
            return
        try:
            metadata = cluster_metadata(
                codec.read_fields(response, body_offset, spec.response_type), local
            )
        except KquotaError as exc:
            log.warning(
                "Metadata v%d response not read for the quota callback: %s", spec.version, exc
            )
            return
        key = (
            metadata.cluster_id,
            metadata.local_broker,
            tuple(metadata.brokers),
            tuple((p.topic, p.partition, p.leader) for p in metadata.partitions),
        )
        if key == self._last:
            return
        self._last = key
        try:
            self.plugin.update_cluster_metadata(metadata)
        except KquotaError as exc:
            log.warning("quota callback update_cluster_metadata: %s", exc)
