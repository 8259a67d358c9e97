"""Controller mutations in Kafka's request log (kquota.backtest.requestlog): CreateTopics,
CreatePartitions and DeleteTopics lines become rows with the partitions they create or
delete (topic counts tracked over the log in time order from CreateTopics, CreatePartitions
and Metadata lines) and whether their version is strict; a topic whose count is unknown is
counted and reported, never guessed; and ``kquota backtest`` on such a log gives the
throttles the core's ControllerMutationQuotaManager gives fed the same mutations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import requestlog_gen as gen
from kquota import ControllerMutationQuotaManager
from kquota.backtest import requestlog
from kquota.backtest.frames import MUTATION_THROTTLE, REFUSED_PARTITIONS, THROTTLE
from kquota.backtest.outputs import read_requests
from kquota.backtest.requestlog import LogOptions
from kquota.cli import main
from kquota.config import QuotaConfig

pytestmark = pytest.mark.slow

T0 = 1_717_372_800_000  # 2024-06-03 00:00:00 UTC
NAMES = {3: "METADATA", 19: "CREATE_TOPICS", 20: "DELETE_TOPICS", 37: "CREATE_PARTITIONS"}


def _line(ms: int, key: int, version: int, cid: int, request: Any, response: Any, user: str) -> str:
    return gen.completed_line(
        ms, key, NAMES[key], version, cid, request, response, client=f"{user}-admin", user=user
    )


def _backtest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: list[str], rate: int, *options: str
) -> tuple[pd.DataFrame, ControllerMutationQuotaManager]:
    """``kquota backtest`` on a log of ``lines`` under a <default> user mutation quota of
    ``rate``: its requests by correlation id, and a core manager with the same quotas."""
    folder = _write(tmp_path / "log", lines)
    config = QuotaConfig.from_json(
        {
            "window": {"num_samples": 11, "window_ms": 1000},
            "quotas": [
                {"entity": {"user": "<default>"}, "config": {"controller_mutation_rate": rate}},
            ],
        }
    )
    quotas = tmp_path / "quotas.json"
    quotas.write_text(config.dumps())
    args = ["--traffic", str(folder), "--quotas", str(quotas), "--out", str(tmp_path / "out")]
    assert main(["backtest", *args, *options]) == 0, capsys.readouterr().err
    got = read_requests(tmp_path / "out" / "requests").set_index("correlation_id").sort_index()
    manager = ControllerMutationQuotaManager()
    for entity, value in config.mutation_quotas():
        manager.set_quota(entity, value)
    return got, manager


def _create(*topics: tuple[str, int, int]) -> dict[str, Any]:
    return {
        "topics": [
            {
                "name": name,
                "numPartitions": n,
                "replicationFactor": -1,
                "assignments": [{"partitionIndex": i, "brokerIds": [1]} for i in range(a)],
                "configs": [],
            }
            for name, n, a in topics
        ],
        "timeoutMs": 30000,
        "validateOnly": False,
    }


def _write(folder: Path, lines: list[str]) -> Path:
    broker = folder / "broker-1"
    broker.mkdir(parents=True)
    (broker / "kafka-request.log").write_text("\n".join(lines) + "\n")
    return folder


def test_partition_counts_are_tracked_and_unknown_ones_reported(spark: Any, tmp_path: Path) -> None:
    metadata = {
        "topics": [
            {
                "errorCode": 0,
                "name": "old",
                "partitions": [{"partitionIndex": i} for i in range(4)],
            },
            {"errorCode": 3, "name": "missing", "partitions": []},
        ]
    }
    grow = lambda name, count: {"topics": [{"name": name, "count": count, "assignments": None}]}  # noqa: E731
    lines = [
        _line(T0, 3, 12, 1, {"topics": None}, metadata, "ops"),
        # a: 3; b: -1 with two assignments; c: -1 -> num.partitions (2 here)
        _line(T0 + 10, 19, 7, 2, _create(("a", 3, 0), ("b", -1, 2), ("c", -1, 0)), "", "ops"),
        _line(T0 + 20, 37, 2, 3, grow("a", 5), "", "ops"),  # a: 3 -> 5
        _line(T0 + 30, 20, 4, 4, {"topicNames": ["a", "old"]}, "", "ops"),  # 5 + 4
        _line(T0 + 40, 20, 6, 5, {"topics": [{"name": "ghost", "topicId": None}]}, "", "ops"),
        _line(T0 + 50, 37, 3, 6, grow("a", 6), "", "ops"),  # a was deleted: unknown
        _line(T0 + 60, 20, 5, 7, {"topics": [{"name": "b", "topicId": None}]}, "", "ops"),
        _line(T0 + 70, 20, 6, 8, {"topics": [{"name": "missing", "topicId": None}]}, "", "ops"),
    ]
    folder = _write(tmp_path / "log", lines)
    out = tmp_path / "traffic"
    summary = requestlog.import_log(spark, str(folder), str(out), LogOptions(num_partitions=2))
    rows = pd.read_parquet(out).set_index("correlation_id").sort_index()
    expected = {2: 3 + 2 + 2, 3: 2, 4: 9, 5: None, 6: None, 7: 2, 8: None}
    got = {
        cid: (None if pd.isna(v) else int(v)) for cid, v in rows["partitions"].items() if cid > 1
    }
    assert got == expected
    assert pd.isna(rows.loc[1, "partitions"]) and pd.isna(rows.loc[1, "strict"])
    topics = {
        cid: (None if v is None else [int(x) for x in v])
        for cid, v in rows["topic_partitions"].items()
        if cid > 1
    }
    assert topics == {2: [3, 2, 2], 3: [2], 4: [5, 4], 5: None, 6: None, 7: [2], 8: None}
    strict = {cid: bool(v) for cid, v in rows["strict"].items() if cid > 1}
    assert strict == {2: True, 3: False, 4: False, 5: True, 6: True, 7: True, 8: True}
    assert (summary.mutations, summary.unknown_counts) == (7, 3)
    assert summary.unknown_topics == ["a", "ghost", "missing"]
    note = summary.notes()[-1]
    assert note.startswith("3 of 7 mutation request(s) not replayed") and "'ghost'" in note
    with pytest.raises(Exception, match="invalid --num-partitions 0"):
        LogOptions(num_partitions=0)


def _forwarded(line: str, end_ms: int, remote_ms: float, throttle: int) -> str:
    """The controller's line of the broker's ``line``: ``isForwarded``, ending at
    ``end_ms`` after ``remote_ms`` of remote time, its response throttled ``throttle``."""
    document = line.split(" Completed request:", 1)[1].removesuffix(" (kafka.request.logger)")
    document = (
        document.replace('"isForwarded":false', '"isForwarded":true', 1)
        .replace('"remoteTimeMs":0.0', f'"remoteTimeMs":{gen.logged_double(remote_ms)}', 1)
        .replace('"response":""', f'"response":{{"throttleTimeMs":{throttle},"topics":[]}}', 1)
    )
    return gen.line(end_ms, "DEBUG", document)


def test_forwarded_mutations_take_their_controllers_time(spark: Any, tmp_path: Path) -> None:
    """A broker's CreateTopics line ends after the forwarding, the controller's work and the
    metadata commit; the controller's own line of it says when the controller took it (its
    end less its remote, response-queue and send times), and the row takes that time. A
    request whose controller line is missing, or belongs to another request, keeps the
    broker's."""
    first = _line(T0 + 40, 19, 7, 2, _create(("a", 3, 0)), "", "ops")
    second = _line(T0 + 90, 19, 7, 3, _create(("b", 1, 0)), "", "ops")
    third = _line(T0 + 140, 19, 7, 4, _create(("c", 1, 0)), "", "ops")
    lines = [
        _forwarded(first, T0 + 38, 30.0, 250),
        first,
        second,  # no controller line
        _forwarded(third.replace('"correlationId":4', '"correlationId":9'), T0 + 139, 30.0, 0),
        third,
    ]
    out = tmp_path / "traffic"
    summary = requestlog.import_log(spark, str(_write(tmp_path / "log", lines)), str(out))
    rows = pd.read_parquet(out).set_index("correlation_id")
    assert sorted(rows.index) == [2, 3, 4], "a controller's line is not a request of its own"
    # the controller's line ended at T0 + 38 after 30 ms of remote time
    assert rows.loc[2, "ts_ms"] == T0 + 38 - 30
    assert (rows.loc[3, "ts_ms"], rows.loc[4, "ts_ms"]) == (T0 + 90, T0 + 140)
    assert summary.controller_lines == 2 and summary.controller_timed == 1
    assert summary.skipped[requestlog.FORWARDED] == 2
    assert "1 of 3 mutation request(s) timed by their controller's line" in summary.notes()[-1]


def test_a_log_without_mutations_imports_as_before(spark: Any, tmp_path: Path) -> None:
    lines = [_line(T0, 3, 12, 1, {"topics": None}, {"topics": []}, "ops")]
    out = tmp_path / "traffic"
    summary = requestlog.import_log(spark, str(_write(tmp_path / "log", lines)), str(out))
    assert list(pd.read_parquet(out).columns) == list(requestlog.COLUMNS)
    assert summary.mutations == 0 and summary.notes()[-1].startswith("request log")


def test_backtest_of_a_log_gives_the_managers_throttles(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``kquota backtest`` on a log where two admins create, grow and delete topics in
    bursts, with old (permissive) and new (strict) versions: its throttles equal a
    ControllerMutationQuotaManager fed each request's partitions in time order."""
    lines = []
    for step in range(60):
        user = ("alice", "bob")[(step // 6) % 2]
        ms = T0 + 150 * step
        name = f"{user}-t{step // 6}"
        cid = step + 1
        kind = step % 6
        if kind in (0, 1):
            n = 4 + step % 5
            version = 7 if kind == 0 else 5
            topic = f"{name}-{kind}"
            lines.append(_line(ms, 19, version, cid, _create((topic, n, 0)), "", user))
        elif kind == 2:
            topic = f"{name}-0"
            lines.append(
                _line(ms, 37, 3, cid, {"topics": [{"name": topic, "count": 12}]}, "", user)
            )
        elif kind in (3, 4):
            topic = f"{name}-{kind - 3}"
            request = {"topicNames": [topic]} if kind == 4 else {"topics": [{"name": topic}]}
            lines.append(_line(ms, 20, 4 if kind == 4 else 6, cid, request, "", user))
        else:
            lines.append(_line(ms, 3, 12, cid, {"topics": None}, {"topics": []}, user))
    # the partitions each request mutates, by hand from what the lines above create
    created: dict[str, int] = {}
    mutations = []
    for step in range(60):
        user = ("alice", "bob")[(step // 6) % 2]
        ms = T0 + 150 * step
        name = f"{user}-t{step // 6}"
        kind = step % 6
        if kind in (0, 1):
            n = 4 + step % 5
            created[f"{name}-{kind}"] = n
            mutations.append((step + 1, user, ms, n, kind == 0))
        elif kind == 2:
            topic = f"{name}-0"
            mutations.append((step + 1, user, ms, 12 - created[topic], True))
            created[topic] = 12
        elif kind in (3, 4):
            topic = f"{name}-{kind - 3}"
            mutations.append((step + 1, user, ms, created.pop(topic), kind == 3))
    got, manager = _backtest(tmp_path, capsys, lines, 3, "--num-partitions", "3")
    throttles, refused = {}, {}
    for cid_, user, ms, n, strict in mutations:
        record = manager.record_strict if strict else manager.record_permissive
        check = record(user, f"{user}-admin", float(n), now_ms=ms)
        throttles[cid_] = check.throttle_ms if check.violated else 0
        refused[cid_] = 0 if check.accepted else n
    mine = got.loc[list(throttles)]
    assert mine[MUTATION_THROTTLE].tolist() == list(throttles.values())
    assert mine[REFUSED_PARTITIONS].tolist() == list(refused.values())
    assert mine[THROTTLE].tolist() == list(throttles.values())
    assert sum(1 for v in refused.values() if v) >= 2
    assert sum(1 for c, *_, s in mutations if not s and throttles[c]) >= 2
    others = got.drop(index=list(throttles))
    assert (others[MUTATION_THROTTLE] == 0).all() and others["partitions"].isna().all()


def test_a_strict_request_s_later_topics_are_refused(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A strict CreateTopics whose earlier topic overdraws the bucket has its later topics
    refused, as Kafka's controller checks topic by topic: ``kquota backtest`` on the log
    gives what the core's MutationRequestQuota (the proxy's path) gives fed each topic in
    request order; a permissive request is recorded topic by topic too."""
    delete = {"topics": [{"name": "x1", "topicId": None}, {"name": "x2", "topicId": None}]}
    requests = [  # (ms, key, version, user, request, topic counts)
        (T0, 19, 7, "alice", _create(("x1", 15, 0), ("x2", 10, 0), ("x3", 4, 0), ("x4", 1, 0))),
        (T0 + 100, 19, 5, "alice", _create(("y1", 3, 0), ("y2", 2, 0))),
        (T0 + 200, 19, 7, "bob", _create(("z1", 30, 0), ("z2", 1, 0), ("z3", 2, 0))),
        (T0 + 400, 19, 6, "alice", _create(("w1", 1, 0))),
        (T0 + 9000, 20, 6, "alice", delete),
    ]
    counts = {1: [15, 10, 4, 1], 2: [3, 2], 3: [30, 1, 2], 4: [1], 5: [15, 10]}
    strict = {1: True, 2: False, 3: True, 4: True, 5: True}
    lines = [
        _line(ms, key, version, cid, request, "", user)
        for cid, (ms, key, version, user, request) in enumerate(requests, start=1)
    ]
    got, manager = _backtest(tmp_path, capsys, lines, 2)
    throttles, refused = [], []
    for cid, (ms, _, _, user, _) in enumerate(requests, start=1):
        quota = manager.request_quota(user, f"{user}-admin", strict[cid])
        refused.append(
            sum(n for n in counts[cid] if not quota.record(float(n), now_ms=ms).accepted)
        )
        throttles.append(quota.throttle_time(now_ms=ms))
    assert [[int(x) for x in v] for v in got["topic_partitions"]] == list(counts.values())
    assert got[REFUSED_PARTITIONS].tolist() == refused
    assert got[MUTATION_THROTTLE].tolist() == throttles
    # the burst of 22 partitions: x1 and x2 accepted (7 then -3 tokens), x3 and x4 refused;
    # z1 overdraws bob's bucket, z2 and z3 refused
    assert refused[0] == 5 and refused[2] == 3 and refused[3] == 1
    assert throttles[1] > 0
