"""A KIP-257 quota callback whose limits depend on the broker it serves: on broker ``n``,
half of each user's ``<user>`` quota times ``n + 1`` (on no known broker, half of it).

It learns its broker from the cluster metadata (``local_broker``) and asks for new limits
when that changes, so a test can tell each broker's instance by the limits its sensors
enforce. The factory ``PerBrokerQuota`` is what
``--quota-callback callbacks.per_broker_quota:PerBrokerQuota`` names.
"""

from __future__ import annotations

from collections.abc import Mapping

import kquota

from callbacks.half_user_quota import HalfUserQuota


class PerBrokerQuota(HalfUserQuota):
    """:class:`HalfUserQuota` times ``n + 1`` on broker ``n``."""

    def __init__(self, broker: int | None = None) -> None:
        super().__init__()
        self.broker = broker

    def quota_limit(self, quota_type: str, tags: Mapping[str, str]) -> float | None:
        half = super().quota_limit(quota_type, tags)
        return None if half is None else half * (1 + (self.broker or 0))

    def update_cluster_metadata(self, metadata: kquota.ClusterMetadata) -> bool:
        super().update_cluster_metadata(metadata)
        changed = metadata.local_broker != self.broker
        self.broker = metadata.local_broker
        return changed
