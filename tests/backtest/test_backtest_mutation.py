"""The back-test replays controller mutations (KIP-599) when the traffic has them: a table
with ``partitions`` and ``strict`` columns, replayed by the Spark job (a real local
SparkSession), gives per request the throttles and refusals the core's
ControllerMutationQuotaManager gives fed the same sequence, with the request quota beside it
(the applied throttle the larger, ties to the request quota, as QuotaPlugin.on_mutation),
in open and closed loop and at every ``--scale``; traffic without the columns replays as
before; bad mutation rows are quarantined with their reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
from kquota import DEFAULT, Entity, RequestPath
from kquota.backtest.frames import (
    MUTATION_THROTTLE,
    REFUSED_PARTITIONS,
    REQUEST_THROTTLE,
    SENT,
    SEQ_COLUMNS,
    THROTTLE,
)
from kquota.backtest.job import run
from kquota.backtest.options import BacktestOptions, BacktestResult
from kquota.backtest.outputs import read_requests
from kquota.config import QuotaConfig

pytestmark = pytest.mark.slow

T0 = 1_700_000_000_000


def _config() -> QuotaConfig:
    return QuotaConfig.from_json(
        {
            "window": {"num_samples": 11, "window_ms": 1000},
            "quotas": [
                {"entity": {"user": "<default>"}, "config": {"controller_mutation_rate": 2}},
                {"entity": {"user": "admin"}, "config": {"controller_mutation_rate": 20}},
                {"entity": {"user": "ops"}, "config": {"request_percentage": 5}},
            ],
        }
    )


def _traffic() -> pd.DataFrame:
    """Two brokers; admin, ops and app mutate in bursts, among produce and metadata requests."""
    rows = []
    apis = ["CreateTopics", "DeleteTopics", "CreatePartitions"]
    for i in range(160):
        user = ["app", "admin", "ops", "app"][i % 4]
        api = apis[i % 3] if i % 5 else "Metadata"
        mutation = api != "Metadata"
        rows.append(
            {
                "ts_ms": T0 + 137 * i,
                "broker": f"b{i % 2}",
                "user": user,
                "client_id": f"c{i % 3}",
                "api": api if i % 7 else "Produce",
                "bytes": 100 if i % 7 == 0 else 0,
                "thread_time_ns": 30_000_000 + 1_000_000 * (i % 11),
                "partitions": (3 + (i * 5) % 17) if mutation and i % 7 else None,
                "strict": bool(i % 3 != 1) if mutation and i % 7 else None,
            }
        )
    frame = pd.DataFrame(rows)
    frame["partitions"] = frame["partitions"].astype("Int32")
    frame["strict"] = frame["strict"].astype("boolean")
    return frame


def _reference(frame: pd.DataFrame, config: QuotaConfig, closed: bool) -> pd.DataFrame:
    """Per broker, request by request: the core's managers (RequestPath for the request quota,
    ControllerMutationQuotaManager for mutations); closed loop: a client throttled for T at t
    sends nothing before t + T, later requests shift by what it waited."""
    out = []
    for _, part in frame.groupby("broker", sort=False):
        managers = {t: config.manager(t) for t in ("produce", "fetch", "request")}
        path = RequestPath(managers["produce"], managers["fetch"], managers["request"])
        mutation = config.mutation_manager()
        shift: dict[tuple[str, str], int] = {}
        mute: dict[tuple[str, str], int] = {}
        queue = []
        for index, r in part.iterrows():
            queue.append((int(r["ts_ms"]), index, r))
        results: dict[Any, tuple[int, int, int, int, int]] = {}
        pending = sorted(queue, key=lambda q: (q[0], q[1]))
        if closed:
            # replay in order of sending time, per client in input order
            by_client: dict[tuple[str, str], list[Any]] = {}
            for q in pending:
                by_client.setdefault((q[2]["user"], q[2]["client_id"]), []).append(q)
            order = []
            heads = {c: 0 for c in by_client}
            while any(heads[c] < len(v) for c, v in by_client.items()):
                best = None
                for c, v in by_client.items():
                    if heads[c] >= len(v):
                        continue
                    t, idx, _ = v[heads[c]]
                    due = max(t + shift.get(c, 0), mute.get(c, -(2**62)))
                    key = (due, int(part.loc[idx, SEQ_COLUMNS[1]]))
                    if best is None or key < best[0]:
                        best = (key, c)
                assert best is not None
                (due, _), c = best
                t, idx, r = by_client[c][heads[c]]
                heads[c] += 1
                shift[c] = due - t
                applied = _one(path, mutation, r, due, results, idx)
                if applied > 0:
                    mute[c] = max(mute.get(c, -(2**62)), due + applied)
                order.append(idx)
        else:
            for t, idx, r in pending:
                _one(path, mutation, r, t, results, idx)
        for idx, (req, mut, refused, applied, sent) in results.items():
            out.append((idx, req, mut, refused, applied, sent))
    ref = pd.DataFrame(
        out,
        columns=["index", REQUEST_THROTTLE, MUTATION_THROTTLE, REFUSED_PARTITIONS, THROTTLE, SENT],
    )
    return ref.set_index("index").sort_index()


def _one(
    path: RequestPath, mutation: Any, r: Any, now: int, results: dict[Any, Any], idx: Any
) -> int:
    api = str(r["api"]).lower()
    kind: Literal["produce", "fetch", "other"] = (
        "produce" if api == "produce" else "fetch" if api == "fetch" else "other"
    )
    outcome = path.record(
        r["user"], r["client_id"], kind, float(r["bytes"]), float(r["thread_time_ns"]), now_ms=now
    )
    request = outcome.request_throttle_ms
    applied = outcome.throttle_ms if outcome.throttled_by is not None else 0
    m = refused = 0
    topics = r.get("topic_partitions")
    if topics is not None and not isinstance(topics, float) and len(topics):
        # per-topic counts: one request quota, each topic recorded in turn (the proxy's
        # path, as Kafka's controller): a strict one refuses topics once overdrawn
        quota = mutation.request_quota(r["user"], r["client_id"], bool(r["strict"]), now_ms=now)
        refused = sum(int(n) for n in topics if not quota.record(float(n), now_ms=now).accepted)
        m = quota.throttle_time(now_ms=now)
        applied = max(applied, m)
    elif not pd.isna(r["partitions"]):
        record = mutation.record_strict if bool(r["strict"]) else mutation.record_permissive
        check = record(r["user"], r["client_id"], float(r["partitions"]), now_ms=now)
        m = check.throttle_ms if check.violated else 0
        refused = 0 if check.accepted else int(r["partitions"])
        applied = max(applied, m)
    results[idx] = (request, m, refused, applied, now)
    return applied


def _backtest(
    spark: Any,
    tmp_path: Path,
    frame: pd.DataFrame,
    config: QuotaConfig | None = None,
    **options: Any,
) -> BacktestResult:
    """``frame`` written as Parquet and back-tested under ``config`` (:func:`_config` if
    none) into ``tmp_path / "out"``, with no report."""
    path = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    quotas = _config() if config is None else config
    out = str(tmp_path / "out")
    return run(
        spark, BacktestOptions(traffic=str(path), quotas=quotas, out=out, report=False, **options)
    )


def _against_the_reference(
    spark: Any, tmp_path: Path, frame: pd.DataFrame, mode: str
) -> tuple[pd.DataFrame, list[tuple[QuotaConfig, pd.DataFrame, pd.DataFrame]]]:
    """``frame`` back-tested at x1 and x0.5 in ``mode`` with unbounded clients (the
    reference's): every request's throttles must be the reference's. The requests, and
    per scenario its configuration, the reference's results and the controller_mutation
    rows of entities/."""
    config = _config()
    _backtest(spark, tmp_path, frame, config, mode=mode, scales=(1.0, 0.5), clients=None)
    got = read_requests(tmp_path / "out" / "requests")
    entities = pd.read_parquet(tmp_path / "out" / "entities")
    frame[SEQ_COLUMNS[1]] = np.arange(len(frame), dtype=np.int64)
    scenarios = []
    for scenario, scale in (("x1", 1.0), ("x0.5", 0.5)):
        mine = got[got["scenario"] == scenario].set_index(SEQ_COLUMNS[1]).sort_index()
        expected = _reference(frame, config.scaled(scale), closed=mode == "closed")
        for column in (REQUEST_THROTTLE, MUTATION_THROTTLE, REFUSED_PARTITIONS, THROTTLE, SENT):
            assert mine[column].tolist() == expected[column].tolist(), (scenario, column)
        mine_e = entities[
            (entities["scenario"] == scenario) & (entities["quota_type"] == "controller_mutation")
        ]
        scenarios.append((config.scaled(scale), expected, mine_e))
    return got, scenarios


def _per_sensor(
    entities: pd.DataFrame, mutations: pd.DataFrame
) -> Iterator[tuple[dict[str, Any], pd.DataFrame]]:
    """Each controller_mutation row of ``entities`` (one per broker and sensor; user-level
    quotas: tags (user, "")) with the requests of ``mutations`` it counts."""
    mutations = mutations[mutations["partitions"].notna()]
    groups = mutations.groupby(["broker", "user"])
    assert len(entities) == groups.ngroups
    for (broker, user), part in groups:
        (row,) = entities[
            (entities["broker"] == broker) & (entities["sensor_user"] == user)
        ].to_dict("records")
        yield row, part


@pytest.mark.parametrize("mode", ["open", "closed"])
def test_mutations_equal_the_core_managers(spark: Any, tmp_path: Path, mode: str) -> None:
    frame = _traffic()
    got, scenarios = _against_the_reference(spark, tmp_path, frame, mode)
    for config, expected, entities in scenarios:
        # entities/ counted from the reference's decisions
        quotas = dict(config.mutation_quotas())
        ref = frame.join(expected[[MUTATION_THROTTLE, REFUSED_PARTITIONS]])
        for row, part in _per_sensor(entities, ref):
            accepted = part["partitions"].where(part[REFUSED_PARTITIONS] == 0, 0)
            assert row["requests"] == len(part)
            assert row["usage"] == int(accepted.sum())
            assert row["throttled_requests"] == int((part[MUTATION_THROTTLE] > 0).sum())
            assert row["total_throttle_ms"] == int(part[MUTATION_THROTTLE].sum())
            user = part["user"].iloc[0]
            assert row["quota"] == quotas.get(Entity(user=user), quotas[Entity(user=DEFAULT)])
    x1 = got[got["scenario"] == "x1"]
    assert (x1[REFUSED_PARTITIONS] > 0).sum() >= 3
    assert ((x1[MUTATION_THROTTLE] > 0) & ~x1["strict"].astype("boolean").fillna(True)).sum() >= 3
    assert (x1[MUTATION_THROTTLE] == x1[THROTTLE]).sum() < len(x1)


def test_traffic_without_mutation_columns_has_no_mutation_results(
    spark: Any, tmp_path: Path
) -> None:
    _backtest(spark, tmp_path, _traffic().drop(columns=["partitions", "strict"]))
    got = read_requests(tmp_path / "out" / "requests")
    assert MUTATION_THROTTLE not in got.columns and REFUSED_PARTITIONS not in got.columns


def test_bad_mutation_rows_are_quarantined_with_their_reason(spark: Any, tmp_path: Path) -> None:
    frame = _traffic()
    frame.loc[1, "partitions"] = -4
    frame.loc[2, "strict"] = None
    frame.loc[6, "api"] = "Metadata"  # partitions on a request that is not a mutation
    frame["topic_partitions"] = pd.Series([None] * len(frame), dtype=object)
    frame.at[3, "topic_partitions"] = [1, 2]  # CreateTopics of 18 partitions
    _backtest(spark, tmp_path, frame)
    bad = pd.read_parquet(tmp_path / "out" / "quarantine")
    assert sorted(bad["reason"]) == sorted(
        [
            "partitions negative",
            "strict missing (a mutation needs it)",
            "partitions on an api not CreateTopics, CreatePartitions, DeleteTopics",
            "topic_partitions sum is not partitions",
        ]
    )


def test_topic_partitions_without_partitions_are_quarantined(spark: Any, tmp_path: Path) -> None:
    """Per-topic counts with no ``partitions`` column cannot be replayed: the rows that
    have them are refused with their reason, the others replay as plain requests."""
    frame = _traffic().drop(columns=["partitions", "strict"])
    frame["topic_partitions"] = pd.Series([None] * len(frame), dtype=object)
    frame.at[3, "topic_partitions"] = [1, 2]
    frame.at[5, "topic_partitions"] = [4]
    result = _backtest(spark, tmp_path, frame)
    bad = pd.read_parquet(tmp_path / "out" / "quarantine")
    assert list(bad["reason"]) == ["topic_partitions without partitions"] * 2
    assert sorted(bad["topic_partitions"].map(list)) == [[1, 2], [4]]
    assert result.rows_valid == len(frame) - 2
    got = read_requests(tmp_path / "out" / "requests")
    assert MUTATION_THROTTLE not in got.columns


def _split(partitions: Any, i: int) -> list[int] | None:
    """Row ``i``'s partitions over 1 to 4 topics (None on some rows: one topic)."""
    if pd.isna(partitions) or i % 9 == 0:
        return None
    k = 1 + i % 4
    p = int(partitions)
    return [p // k] * (k - 1) + [p - (p // k) * (k - 1)]


@pytest.mark.parametrize("mode", ["open", "closed"])
def test_topics_of_a_strict_request_are_refused_one_by_one(
    spark: Any, tmp_path: Path, mode: str
) -> None:
    """With ``topic_partitions`` a mutation is recorded topic by topic, as Kafka's
    controller does: a strict request's topics after the one that overdrew the bucket are
    refused, so refused_partitions counts only those; the reference is the core's
    MutationRequestQuota fed each topic (the proxy's path)."""
    frame = _traffic()
    # sparser than _traffic's: a bucket refills part way between a client's requests, so
    # a strict request's first topics often fit and a later one overdraws
    frame["ts_ms"] = T0 + 500 * np.arange(len(frame), dtype=np.int64)
    frame["topic_partitions"] = pd.Series(
        [_split(p, i) for i, p in enumerate(frame["partitions"])], dtype=object
    )
    got, scenarios = _against_the_reference(spark, tmp_path, frame, mode)
    for _, expected, entities in scenarios:
        for row, part in _per_sensor(entities, frame.join(expected[[REFUSED_PARTITIONS]])):
            assert row["requests"] == len(part)
            assert row["usage"] == int((part["partitions"] - part[REFUSED_PARTITIONS]).sum())
    x1 = got[got["scenario"] == "x1"].set_index(SEQ_COLUMNS[1]).sort_index()
    strict = x1["strict"].astype("boolean").fillna(False)
    partial = strict & (x1[REFUSED_PARTITIONS] > 0) & (x1[REFUSED_PARTITIONS] < x1["partitions"])
    assert partial.sum() >= 5, "strict requests with only their later topics refused"
