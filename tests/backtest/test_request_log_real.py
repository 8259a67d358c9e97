"""Request logs written by real Kafka brokers (``tests/backtest/data/``, made by
``tests/support/make_real_request_logs.py``; their README names the versions, settings and
workload), read by the reader without a broker and checked against what each log itself
says, by the rules of the spec (``../shared/docs/kafka-request-log.md``) applied here in
plain Python: the requests of each API, the throttle Kafka gave each, and the Produce and
Fetch sizes rebuilt from the logged fields."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest
from kafka_support import completed_request
from kquota.backtest import requestlog
from kquota.backtest.frames import API, BYTES, CLIENT
from kquota.backtest.requestlog import KAFKA_THROTTLE, LogOptions

DATA = Path(__file__).resolve().parent / "data"
LOGS = sorted(DATA.glob("kafka-*/kafka-request.log"))
MUTATIONS = {19, 20, 37}
"""CreateTopics, DeleteTopics, CreatePartitions: forwarded to the controller in KRaft."""


def _uv(n: int) -> int:
    """Bytes of ``n`` as Kafka's unsigned varint (written here, apart from the reader)."""
    return len(f"{n:b}") // 7 + (len(f"{n:b}") % 7 > 0) if n > 0 else 1


def _documents(log: Path) -> list[dict[str, Any]]:
    lines = log.read_text(encoding="utf-8").splitlines()
    return [d for d in map(completed_request, lines) if d is not None]


def _is_row(d: dict[str, Any]) -> bool:
    key = d["requestHeader"]["requestApiKey"]
    request = d["request"]
    if d["isForwarded"] or key in requestlog.EXEMPT_API_KEYS:
        return False
    if key in (0, 1) and not isinstance(request, dict):
        return False
    replica = request.get("replicaId", -1) if isinstance(request, dict) else -1
    return not (key == 1 and replica >= 0)


def _produce_size(d: dict[str, Any]) -> int:
    """Header + body of a Produce request, by the spec's formulas (v3+)."""
    header, request = d["requestHeader"], d["request"]
    version = header["requestApiVersion"]
    client = len((header["clientId"] or "").encode())
    txn = request.get("transactionalId")
    if version >= 9:
        size = 11 + client
        size += 1 if txn is None else _uv(len(txn.encode()) + 1) + len(txn.encode())
        size += 2 + 4 + _uv(len(request["topicData"]) + 1) + 1
        for topic in request["topicData"]:
            if version >= 13:
                size += 16
            else:
                name = len(topic["name"].encode())
                size += _uv(name + 1) + name
            parts = topic["partitionData"]
            size += _uv(len(parts) + 1) + 1
            for p in parts:
                r = p.get("recordsSizeInBytes") or 0
                size += 4 + _uv(r + 1) + r + 1
        return size
    size = 10 + client + 2 + (len(txn.encode()) if txn else 0) + 2 + 4 + 4
    for topic in request["topicData"]:
        size += 2 + len(topic["name"].encode()) + 4
        size += sum(4 + 4 + (p.get("recordsSizeInBytes") or 0) for p in topic["partitionData"])
    return size


TAGGED_PARTITION_FIELDS = {"divergingEpoch": 13, "currentLeader": 9, "snapshotId": 13}
"""The bytes of each tagged field of a Fetch response partition (its fields and its own
empty tag buffer), without its tag and size."""


def _fetch_size(d: dict[str, Any]) -> int:
    """4 + the body of a flexible (v12+) Fetch response, by the spec's formula, without
    ``nodeEndpoints``; 0 when throttled. Under 3.0+'s keys or 2.8's (``partitionResponses``,
    ``recordSetSizeInBytes``); a partition whose records are null counts as an empty one."""
    if d["throttleTimeMs"] > 0:
        return 0
    version = d["requestHeader"]["requestApiVersion"]
    response = d["response"]
    assert version >= 12, version  # what librdkafka sends these brokers
    topics = response["responses"]
    size = 4 + 2 + 4 + _uv(len(topics) + 1) + 1  # throttle, error, session, topics, tags
    for topic in topics:
        name = len((topic.get("topic") or "").encode())
        size += 16 if version >= 13 else _uv(name + 1) + name
        parts = topic["partitions"] if "partitions" in topic else topic["partitionResponses"]
        size += _uv(len(parts) + 1) + 1
        for p in parts:
            aborted = p["abortedTransactions"]
            r = p.get("recordsSizeInBytes", p.get("recordSetSizeInBytes")) or 0
            size += 4 + 2 + 8 + 8 + 8 + 4 + _uv(r + 1) + r
            size += 1 if aborted is None else _uv(len(aborted) + 1) + 17 * len(aborted)
            tagged = [n for k, n in TAGGED_PARTITION_FIELDS.items() if k in p]
            size += _uv(len(tagged)) + sum(2 + n for n in tagged)
    return 4 + size


def _throttle(d: dict[str, Any]) -> int:
    response = d["response"] if isinstance(d["response"], dict) else {}
    if d["requestHeader"]["requestApiKey"] in MUTATIONS:
        return max(d["throttleTimeMs"], response.get("throttleTimeMs", 0))
    return int(d["throttleTimeMs"])


def _key(d: dict[str, Any]) -> tuple[str, str]:
    header = d["requestHeader"]
    return header["clientId"] or "", header["requestApiKeyName"].lower()


def test_the_real_logs_are_there() -> None:
    assert [p.parent.name for p in LOGS] == ["kafka-3.9.2", "kafka-4.1.2"]
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    for log in LOGS:
        assert log.parent.name in readme
        documents = _documents(log)
        assert 100 <= len(documents) <= 1000
        produce = [d for d in documents if _key(d) == ("greedy", "produce")]
        assert any(d["throttleTimeMs"] > 0 for d in produce)  # the byte quota bit
        mutations = [d for d in documents if d["requestHeader"]["requestApiKey"] in MUTATIONS]
        assert any(_throttle(d) > 0 for d in mutations if not d["isForwarded"])
    # the lines derived from real ones (the README says how): a 2.8 fetch, and a Kafka 4
    # fetch partition whose records are null
    old, new = (_documents(DATA / f"kafka-{v}" / "kafka-request.log") for v in ("3.9.2", "4.1.2"))
    fetches = [d for d in old if d["requestHeader"]["requestApiKey"] == 1]
    fetches_2_8 = [d for d in fetches if "partitionResponses" in d["response"]["responses"][0]]
    assert [d["requestHeader"]["requestApiVersion"] for d in fetches_2_8] == [12]
    partition = fetches_2_8[0]["response"]["responses"][0]["partitionResponses"][0]
    assert "recordSetSizeInBytes" in partition and "partition" in partition
    null = [
        p
        for d in new
        if d["requestHeader"]["requestApiKey"] == 1
        for t in d["response"]["responses"]
        for p in t["partitions"]
        if "records" in p
    ]
    assert [(p["records"], p["errorCode"], "recordsSizeInBytes" in p) for p in null] == [
        (None, 100, False)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("log", LOGS, ids=[p.parent.name for p in LOGS])
def test_a_real_log_reads_as_it_says(spark: Any, log: Path) -> None:
    frame = requestlog.read(spark, str(log), LogOptions(broker_id=1)).frame.toPandas()
    rows = frame[frame["_kq_reason"].isna()]
    documents = _documents(log)
    wanted = [d for d in documents if _is_row(d)]
    # every line is a row or skipped for a reason the spec gives
    skipped = collections.Counter(frame["_kq_reason"].dropna())
    assert skipped[requestlog.FORWARDED] == sum(d["isForwarded"] for d in documents)
    assert sum(skipped.values()) + len(rows) == len(documents)
    got = list(zip(rows[CLIENT], rows[API], strict=True))
    assert collections.Counter(got) == collections.Counter(_key(d) for d in wanted)

    def per_key(values: Any) -> dict[tuple[str, str], list[int]]:
        out: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
        for key, value in values:
            out[key].append(int(value))
        return {k: sorted(v) for k, v in out.items()}

    # the throttle of each request, mutations forwarded to the controller included
    assert per_key(zip(got, rows[KAFKA_THROTTLE], strict=True)) == per_key(
        (_key(d), _throttle(d)) for d in wanted
    )
    # Produce and Fetch bytes, from the logged record sizes and the spec's formulas
    read_bytes = per_key(zip(got, rows[BYTES], strict=True))
    produce = [d for d in wanted if d["requestHeader"]["requestApiKey"] == 0]
    assert produce
    for key in {_key(d) for d in produce}:
        assert read_bytes[key] == sorted(_produce_size(d) for d in produce if _key(d) == key)
    records = sum(
        p.get("recordsSizeInBytes") or 0
        for d in produce
        for t in d["request"]["topicData"]
        for p in t["partitionData"]
    )
    assert sum(rows.loc[rows[API] == "produce", BYTES]) > records > 0
    fetch = [d for d in wanted if d["requestHeader"]["requestApiKey"] == 1]
    sizes = [_fetch_size(d) for d in fetch]
    assert fetch
    for key in {_key(d) for d in fetch}:
        mine = [s for d, s in zip(fetch, sizes, strict=True) if _key(d) == key]
        assert read_bytes[key] == sorted(mine)
    others = rows[~rows[API].isin(["produce", "fetch"])]
    assert (others[BYTES] == 0).all()
