"""Recommended quotas: per entity, the smallest quota that keeps its throttled fraction
at most a target (:func:`recommend`), and the quota file to apply from them
(:func:`applicable`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Final

import numpy as np
import numpy.typing as npt
import pandas as pd  # type: ignore[import-untyped]

from kquota import Entity
from kquota._core import recommend_quotas
from kquota.backtest.frames import schema
from kquota.backtest.frames.entities import SENSOR_CLIENT, SENSOR_USER, USAGE, entity_label
from kquota.config import QuotaConfig, Window
from kquota.config.model import PROPERTY_OF
from kquota.quota_types import QuotaType

__all__ = [
    "CHANGES",
    "RECOMMENDATION_COLUMNS",
    "applicable",
    "proposed_quota",
    "recommend",
]

RECOMMENDATION_COLUMNS: Final = (
    "quota_type",
    SENSOR_USER,
    SENSOR_CLIENT,
    "entity",
    "brokers",
    "requests",
    "recommended_quota",
    "throttled_fraction",
)
"""The columns of :func:`recommend`, one row per entity (sensor tags, across brokers)."""


def recommend(
    usage: pd.DataFrame,
    window: Window,
    quota_type: QuotaType,
    target: float,
    kafka_version: str | None = None,
) -> pd.DataFrame:
    """Per entity, the smallest quota that keeps its throttled fraction at most ``target``.

    An entity is a sensor's tags (:data:`SENSOR_USER`, :data:`SENSOR_CLIENT`) of one quota
    type, on every broker it was seen (the quota applies per broker, the fraction is over
    all its requests). ``usage`` holds every request of the entities it contains, with
    :data:`BROKER`, :data:`TS` (the recorded time: recommendations replay the recorded
    timeline), :data:`USAGE`, optionally :data:`SEQ_COLUMNS` and, for fetch,
    ``unrecord_if`` (the request quota throttled it). The quota is found in the core
    (``kquota._core.recommend_quotas``, one call for all the entities, without the GIL): a
    bisection that replays the entity's traffic under each candidate, one sensor per
    broker; the fraction falls as the quota grows except for small wiggles (an unrecorded
    fetch changes what later requests see), and the result is checked to meet the target.
    ``recommended_quota`` is rounded up to whole bytes/s (hundredths of a percent for
    ``request``), within 0.1 % of the smallest found; ``throttled_fraction`` is at that value.
    Throttles follow Kafka ``kafka_version``'s rules (4.1's by default).
    """
    if not 0.0 <= target < 1.0:
        raise ValueError(f"invalid target {target!r}: expected a fraction in [0, 1)")
    if usage.empty:
        return pd.DataFrame(columns=list(RECOMMENDATION_COLUMNS))
    user_codes, user_tags = pd.factorize(usage[SENSOR_USER], sort=True, use_na_sentinel=False)
    client_codes, client_tags = pd.factorize(usage[SENSOR_CLIENT], sort=True, use_na_sentinel=False)
    broker_codes, _ = pd.factorize(usage[schema.BROKER], sort=True, use_na_sentinel=False)
    keys: list[npt.NDArray[np.generic]] = [
        usage[name].to_numpy() for name in reversed(schema.SEQ_COLUMNS) if name in usage.columns
    ]
    keys += [usage[schema.TS].to_numpy(dtype=np.int64), broker_codes, client_codes, user_codes]
    order = np.lexsort(keys)
    users, clients, brokers = user_codes[order], client_codes[order], broker_codes[order]
    n = len(order)
    new_entity = np.ones(n, dtype=np.bool_)
    new_entity[1:] = (users[1:] != users[:-1]) | (clients[1:] != clients[:-1])
    new_run = new_entity.copy()
    new_run[1:] |= brokers[1:] != brokers[:-1]
    run_starts = np.flatnonzero(new_run)
    runs = np.append(run_starts, n).astype(np.int64)
    entity_runs = np.append(np.flatnonzero(new_entity[run_starts]), len(run_starts)).astype(
        np.int64
    )
    drops = (
        usage["unrecord_if"].to_numpy(dtype=np.bool_)[order]
        if quota_type == "fetch" and "unrecord_if" in usage.columns
        else None
    )
    quotas, fractions = recommend_quotas(
        quota_type,
        usage[schema.TS].to_numpy(dtype=np.int64)[order],
        usage[USAGE].to_numpy(dtype=np.float64)[order],
        runs,
        entity_runs,
        target=target,
        num_samples=window.num_samples,
        window_ms=window.window_ms,
        unrecord_if=drops,
        kafka_version=kafka_version,
    )
    firsts = runs[entity_runs[:-1]]
    user_of = [user_tags[c] for c in users[firsts]]
    client_of = [client_tags[c] for c in clients[firsts]]
    return pd.DataFrame(
        {
            "quota_type": quota_type,
            SENSOR_USER: user_of,
            SENSOR_CLIENT: client_of,
            "entity": [
                entity_label(str(u), str(c)) for u, c in zip(user_of, client_of, strict=True)
            ],
            "brokers": np.diff(entity_runs),
            "requests": np.diff(np.append(firsts, n)),
            "recommended_quota": quotas,
            "throttled_fraction": fractions,
        },
        columns=list(RECOMMENDATION_COLUMNS),
    )


# -- a quota file an operator can apply ------------------------------------------------------

CHANGES: Final = ("raise", "lower", "add", "keep", "none")
"""What :func:`applicable` does with an entity's quota: ``raise``, ``lower`` (only when
asked), ``add`` (an entity without a quota, only when asked), ``keep`` (the quota meets the
target with the headroom already, or would be lowered) and ``none`` (no quota, left so)."""


def proposed_quota(demand: float, quota_type: QuotaType, headroom: float) -> float:
    """``demand`` (the smallest quota meeting the target) with ``headroom`` on top, rounded
    up to a value a quota file holds: whole bytes/s, hundredths of a percent for
    ``request``."""
    per_unit = 100.0 if quota_type == "request" else 1.0
    # divided, not multiplied by 0.01: 5880 / 100 is 58.8, 5880 * 0.01 is not
    return float(np.ceil(demand * (1.0 + headroom) * per_unit - 1e-9) / per_unit)


def _entity(user_tag: str, client_tag: str) -> Entity | None:
    """The quota entity a sensor's tags name (the user tag is sanitized, as Kafka's metric
    tags are), or ``None`` for a sensor of neither."""
    from urllib.parse import unquote

    user = unquote(user_tag) if user_tag else None
    client = client_tag or None
    if user is None and client is None:
        return None
    return Entity(user=user, client_id=client)


def applicable(
    config: QuotaConfig,
    recommendations: pd.DataFrame,
    headroom: float,
    lower: bool = False,
    add: bool = False,
) -> tuple[QuotaConfig, pd.DataFrame]:
    """The quota file to apply after ``recommendations`` (:func:`recommend`'s rows, with
    ``current_quota``: NaN for an entity without a quota), and the rows with ``change``
    (:data:`CHANGES`) and ``applied_quota`` (what the file sets, NaN where it is left).

    Each entity's quota becomes the demand that meets the target plus ``headroom`` (a
    fraction: 0.2 is 20 %, :func:`proposed_quota`) where that is more than its quota; it is
    lowered only with ``lower``, and an entity without a quota gets one only with ``add``.
    The file is ``config`` (the quotas the recommendations were found under) with those
    quotas set on the entities the sensors name (a quota from a ``<default>`` entity
    becomes the named entity's own), its window, callback and Kafka release kept."""
    if not (headroom >= 0.0 and np.isfinite(headroom)):
        raise ValueError(f"invalid headroom {headroom!r}: expected a fraction >= 0, e.g. 0.2")
    by_entity = config.by_entity()
    changes, applied = [], []
    for row in recommendations.itertuples(index=False):
        quota_type = row.quota_type
        proposal = proposed_quota(float(row.recommended_quota), quota_type, headroom)
        current = float(row.current_quota) if pd.notna(row.current_quota) else None
        entity = _entity(getattr(row, SENSOR_USER), getattr(row, SENSOR_CLIENT))
        if entity is None:
            change = "none"
        elif current is None:
            change = "add" if add else "none"
        elif proposal > current:
            change = "raise"
        elif proposal < current and lower:
            change = "lower"
        else:
            change = "keep"
        value = float("nan")
        if entity is not None and change in ("raise", "lower", "add"):
            by_entity.setdefault(entity, {})[PROPERTY_OF[quota_type]] = proposal
            value = proposal
        changes.append(change)
        applied.append(value)
    out = recommendations.assign(change=changes, applied_quota=applied)
    # the entities left alone keep the values the back-test replayed (a scaled one need
    # not be whole); the quotas set here are whole (proposed_quota)
    new = QuotaConfig.from_entities(by_entity, config.window, bounds=True)
    return replace(
        new, quota_callback=config.quota_callback, kafka_version=config.kafka_version
    ), out
