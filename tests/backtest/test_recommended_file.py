"""The recommended quota file (``frames.applicable``): what an operator can apply from the
recommendations. Quotas are raised to the demand that meets the target plus the headroom;
lowered only when asked; an entity without a quota gets one only when asked; the rest of
the configuration is kept as it is."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from kquota import Entity
from kquota.backtest import frames
from kquota.config import QuotaConfig, Window

BASE = QuotaConfig.from_json(
    {
        "window": {"num_samples": 5, "window_ms": 2000},
        "kafka_version": "4.4",
        "quotas": [
            {"entity": {"user": "<default>"}, "config": {"producer_byte_rate": 1000}},
            {"entity": {"user": "busy"}, "config": {"consumer_byte_rate": 5000}},
            {"entity": {"client-id": "idle"}, "config": {"request_percentage": 50}},
        ],
    }
)


def _rows(*rows: tuple[str, str, str, float | None, float]) -> pd.DataFrame:
    """Recommendations as the job gives them: type, sensor tags, current quota (None: no
    quota), the demand that meets the target."""
    return pd.DataFrame(
        [
            {
                "quota_type": t,
                frames.SENSOR_USER: u,
                frames.SENSOR_CLIENT: c,
                "entity": frames.entity_label(u, c),
                "current_quota": math.nan if q is None else q,
                "current_throttled_fraction": 0.5,
                "recommended_quota": d,
                "recommended_throttled_fraction": 0.01,
            }
            for t, u, c, q, d in rows
        ]
    )


ROWS = _rows(
    ("produce", "alice", "", 1000.0, 4000.0),  # from <default>: raised, alice's own
    ("fetch", "busy", "", 5000.0, 1000.0),  # more than it needs: kept unless --lower
    ("request", "", "idle", 50.0, 49.0),  # 49 x 1.2 = 58.8 > 50: raised
    ("produce", "", "loose", None, 700.0),  # no quota: left unless --add-quotas
    ("produce", "a%20b", "", 1000.0, 2000.0),  # a sanitized user tag: the user "a b"
)


def test_quotas_are_raised_with_headroom_and_never_lowered_by_default() -> None:
    config, rows = frames.applicable(BASE, ROWS, headroom=0.2)
    assert list(rows["change"]) == ["raise", "keep", "raise", "none", "raise"]
    assert rows["applied_quota"].tolist()[:3:2] == [4800.0, 58.8]
    got = config.by_entity()
    assert got[Entity(user="alice")] == {"producer_byte_rate": 4800.0}
    assert got[Entity(user="a b")] == {"producer_byte_rate": 2400.0}
    assert got[Entity(client_id="idle")] == {"request_percentage": 58.8}
    assert got[Entity(user="busy")] == {"consumer_byte_rate": 5000.0}
    assert got[Entity(user="<default>")] == {"producer_byte_rate": 1000.0}
    assert Entity(client_id="loose") not in got
    assert config.window == Window(5, 2000) and config.kafka_version == "4.4"
    # what the file says, the file format reads back
    assert QuotaConfig.from_json(config.to_json()).by_entity() == got


def test_lower_and_add_only_when_asked() -> None:
    config, rows = frames.applicable(BASE, ROWS, headroom=0.0, lower=True, add=True)
    assert list(rows["change"]) == ["raise", "lower", "lower", "add", "raise"]
    got = config.by_entity()
    assert got[Entity(user="busy")] == {"consumer_byte_rate": 1000.0}
    assert got[Entity(client_id="idle")] == {"request_percentage": 49.0}
    assert got[Entity(client_id="loose")] == {"producer_byte_rate": 700.0}


def test_proposals_round_up_to_what_a_file_holds() -> None:
    assert frames.proposed_quota(1000.4, "produce", 0.0) == 1001.0
    assert frames.proposed_quota(1000.0, "fetch", 0.25) == 1250.0
    assert frames.proposed_quota(0.123, "request", 0.0) == 0.13
    assert frames.proposed_quota(0.12, "request", 0.0) == 0.12


def test_a_sensor_of_neither_user_nor_client_is_left_alone() -> None:
    _, rows = frames.applicable(
        BASE, _rows(("produce", "", "", 1000.0, 5000.0)), headroom=0.2, add=True
    )
    assert list(rows["change"]) == ["none"] and rows["applied_quota"].isna().all()


@pytest.mark.parametrize("headroom", [-0.1, math.nan, math.inf])
def test_a_bad_headroom_names_the_value(headroom: float) -> None:
    with pytest.raises(ValueError, match=f"invalid headroom {headroom!r}"):
        frames.applicable(BASE, ROWS, headroom=headroom)
