"""A real KIP-257 quota callback for the tests: every user's ``<user>`` quota divided by 2.

Clients of a user share one sensor tagged by the user alone (as Kafka's ``<user>`` level),
whatever other quotas are configured. The factory ``HalfUserQuota`` is what
``--quota-callback callbacks.half_user_quota:HalfUserQuota`` names (with ``tests/`` on
the path). Every call is counted in ``calls`` so tests can see when it was asked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import kquota


class HalfUserQuota:
    """Half of each user's configured quota; ``None`` (no quota) for other users."""

    def __init__(self) -> None:
        self.quotas: dict[tuple[str, str], float] = {}
        self.calls: Counter[str] = Counter()
        self.metadata: list[kquota.ClusterMetadata] = []
        self.closed = False

    def quota_metric_tags(self, quota_type: str, user: str, client_id: str) -> Mapping[str, str]:
        self.calls["quota_metric_tags"] += 1
        return {"user": kquota.sanitize_user(user), "client-id": ""}

    def quota_limit(self, quota_type: str, tags: Mapping[str, str]) -> float | None:
        self.calls["quota_limit"] += 1
        quota = self.quotas.get((quota_type, tags["user"]))
        return None if quota is None else quota / 2

    def update_quota(self, quota_type: str, entity: kquota.Entity, value: float) -> None:
        self.calls["update_quota"] += 1
        if entity.user is not None and entity.client_id is None:
            self.quotas[(quota_type, kquota.sanitize_user(entity.user))] = value

    def remove_quota(self, quota_type: str, entity: kquota.Entity) -> None:
        self.calls["remove_quota"] += 1
        if entity.user is not None and entity.client_id is None:
            self.quotas.pop((quota_type, kquota.sanitize_user(entity.user)), None)

    def quota_reset_required(self, quota_type: str) -> bool:
        self.calls["quota_reset_required"] += 1
        return False

    def update_cluster_metadata(self, metadata: kquota.ClusterMetadata) -> bool:
        self.calls["update_cluster_metadata"] += 1
        self.metadata.append(metadata)
        return False

    def close(self) -> None:
        self.calls["close"] += 1
        self.closed = True


def not_a_factory() -> None:
    """A factory that returns nothing usable (for the bad-callback tests)."""
    return None


def raising_factory() -> HalfUserQuota:
    raise RuntimeError("no configuration for the callback")


NOT_CALLABLE = 42
