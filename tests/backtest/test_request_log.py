"""Kafka's request log as back-test traffic (kquota.backtest.requestlog).

The log is written by requestlog_gen (beside the tests) from kio message structures; every
field read must equal what the generator put in, and every byte count must equal kio's
own encoding of the same messages (requestlog_gen.expected_bytes). Spark tests share the
session's ``spark`` fixture.
"""

from __future__ import annotations

import collections
import gzip
from pathlib import Path
from typing import Any

import pytest
import requestlog_gen as gen
from kquota.backtest import requestlog
from kquota.backtest.frames import API, BROKER, BYTES, CLIENT, THREAD, TS, USER
from kquota.backtest.requestlog import LogOptions
from kquota.backtest.requestlog.description import _describe_apis
from kquota.backtest.requestlog.import_job import _import_rows
from kquota.backtest.requestlog.summary import _metrics, _summary
from kquota.exceptions import TrafficError

pytest.importorskip("kio", reason="the generator needs kio, a dev dependency")

SPEC = gen.LogSpec(requests=500, brokers=3, seed=7)


# -- plain functions -----------------------------------------------------------------------------


def test_the_reasons_are_the_cores_in_order() -> None:
    # the core reports a reason by its position in this tuple
    from kquota._core import REQUEST_LOG_REASONS

    assert REQUEST_LOG_REASONS == requestlog.REASONS


def test_the_broker_is_the_folder_holding_the_file_by_default() -> None:
    options = LogOptions()
    assert requestlog.broker_of("file:/logs/broker-3/kafka-request.log.gz", options) == "broker-3"
    assert requestlog.broker_of("/logs/7/kafka-request.log", LogOptions(r"/(\d+)/")) == "7"
    assert requestlog.broker_of("/any/x", LogOptions(broker_id=4)) == "4"
    with pytest.raises(TrafficError, match=r"no broker id in traffic file '/logs/a'.*--broker-id"):
        requestlog.broker_of("/logs/a", LogOptions(r"kafka-(\d+)"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timezone": "Mars/Olympus"}, "invalid --log-timezone 'Mars/Olympus'"),
        ({"broker_id_from": "(unclosed"}, "invalid --broker-id-from '(unclosed'"),
        ({"broker_id_from": "(a)(b)"}, "at most one group"),
        ({"broker_id": -1}, "invalid --broker-id -1"),
    ],
)
def test_bad_options_name_the_value(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(TrafficError, match=message.replace("(", r"\(").replace(")", r"\)")):
        LogOptions(**kwargs)


def test_zones_and_offsets_are_accepted() -> None:
    assert LogOptions(timezone="Europe/Paris").timezone == "Europe/Paris"
    assert LogOptions(timezone="+02:00").timezone == "+02:00"


def test_files_of_a_folder_a_glob_and_empty_files(tmp_path: Path) -> None:
    (tmp_path / "b1").mkdir()
    (tmp_path / "b1" / "kafka-request.log").write_text("x\n")
    (tmp_path / "b1" / "kafka-request.log.2024-06-03-01.gz").write_bytes(gzip.compress(b"y\n"))
    (tmp_path / "b1" / "server.log").write_text("z\n")
    (tmp_path / "b1" / "kafka-request.log.2024-06-03-02").write_text("")
    found = requestlog.log_files(str(tmp_path))
    assert [Path(f).name for f in found.files] == [
        "kafka-request.log",
        "kafka-request.log.2024-06-03-01.gz",
    ]
    assert [Path(f).name for f in found.empty] == ["kafka-request.log.2024-06-03-02"]
    globbed = requestlog.log_files(str(tmp_path / "*" / "kafka-request.log*"))
    assert globbed.files == found.files
    assert requestlog.is_request_log(str(tmp_path))
    assert requestlog.is_request_log(str(tmp_path / "b1" / "*.gz"))
    assert not requestlog.is_request_log(str(tmp_path / "b1" / "server.log"))


def test_a_folder_of_1000_empty_files_is_a_clear_error(tmp_path: Path) -> None:
    for i in range(1000):
        (tmp_path / f"kafka-request.log.{i:04d}").touch()
    with pytest.raises(TrafficError, match=r"has no line to read: all 1,000 file\(s\) are empty"):
        requestlog.log_files(str(tmp_path))


def test_paths_that_name_nothing_are_errors(tmp_path: Path) -> None:
    with pytest.raises(TrafficError, match="does not exist"):
        requestlog.log_files(str(tmp_path / "missing"))
    with pytest.raises(TrafficError, match=r"holds no kafka-request\.log\* file"):
        requestlog.log_files(str(tmp_path))
    with pytest.raises(TrafficError, match="matches no file"):
        requestlog.log_files(str(tmp_path / "*.log"))


def test_logged_doubles_print_as_java_does() -> None:
    assert [gen.logged_double(x) for x in (0.0, 0.05, 12.0, 1.0e7, 12_345_678.0)] == [
        "0.0",
        "0.05",
        "12.0",
        "1.0E7",
        "1.2345678E7",
    ]


def test_the_generator_covers_the_doc() -> None:
    logged, lines = gen.generate(SPEC)
    versions = {(r.api_key, r.api_version) for r in logged if r.reason is None}
    assert {(0, v) for v in range(14)} | {(1, v) for v in range(19)} <= versions
    text = "\n".join(t for broker in lines.values() for t in broker)
    for needle in (
        '"transactionalId":null',
        '"transactionalId":"txn-1"',
        '"abortedTransactions":null',
        '"abortedTransactions":[{',
        '"divergingEpoch":',
        '"nodeEndpoints":',
        '"replicaState":{"replicaId":',
        '"request":""',
        '"request":null',
        '"response":""',
        '"response":null',
        '"requestApiVersionDeprecated":true',
        "] INFO Completed request:",
        "-2001:db8:0:0:0:0:0:1:",
        "E7,",
        "TRACE ",
        '"clientId":""',
    ):
        assert needle in text, needle
    assert gen.generate(SPEC)[1] == lines  # deterministic


def test_byte_counts_are_not_the_bare_record_sizes() -> None:
    logged, _ = gen.generate(SPEC)
    produce = [r for r in logged if r.api_key == 0 and r.request is not None]
    records = [
        sum(len(p.records) for t in r.request.topic_data for p in t.partition_data) for r in produce
    ]
    assert all(gen.expected_bytes(r) > n for r, n in zip(produce, records, strict=True))


# -- Spark: every field read --------------------------------------------------------------------


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> gen.WrittenLog:
    folder = tmp_path_factory.mktemp("request-log")
    return folder, gen.write(SPEC, folder)


def _collect(spark: Any, path: str, options: LogOptions | None = None) -> tuple[Any, Any]:
    lines = requestlog.read(spark, path, options)
    frame = lines.frame.toPandas()
    return frame[frame["_kq_reason"].isna()], frame[frame["_kq_reason"].notna()]


@pytest.mark.slow
def test_every_field_equals_what_the_generator_logged(spark: Any, written: gen.WrittenLog) -> None:
    folder, logged = written
    rows, skipped = _collect(spark, str(folder))
    expected = {r.correlation_id: r for r in logged if r.reason is None}
    assert sorted(rows[requestlog.CORRELATION_ID]) == sorted(expected)
    for row in rows.itertuples(index=False):
        want = expected[getattr(row, requestlog.CORRELATION_ID)]
        got = row._asdict()
        assert got[TS] == want.record_ms, want.line
        assert got[BROKER] == want.broker
        assert got[USER] == want.user
        assert got[CLIENT] == want.client_id
        assert got[API] == want.api
        assert got[requestlog.API_VERSION] == want.api_version
        assert got[requestlog.KAFKA_THROTTLE] == want.throttle_ms
        if want.acks is None:
            assert got[requestlog.ACKS] != got[requestlog.ACKS]  # NaN: not a produce
        else:
            assert got[requestlog.ACKS] == want.acks
        if want.thread_ns is None:
            assert got[THREAD] != got[THREAD]
        else:
            assert got[THREAD] == gen.expected_thread_ns(want), want.line
        assert got[BYTES] == gen.expected_bytes(want), (want.api, want.api_version, want.line)
    reasons = collections.Counter(skipped["_kq_reason"])
    want_reasons = collections.Counter(r.reason for r in logged if r.reason is not None)
    traces = sum(
        1
        for path in folder.rglob("kafka-request.log*")
        for text in (
            gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        ).splitlines()
        if text.endswith(b"(kafka.network.RequestChannel$)")
    )
    assert traces > 0
    want_reasons[requestlog.TRACE_LINE] = traces
    assert reasons == want_reasons


@pytest.mark.slow
def test_fetch_bytes_of_every_version_equal_kio(spark: Any, written: gen.WrittenLog) -> None:
    folder, logged = written
    rows, _ = _collect(spark, str(folder))
    fetched = rows[(rows[API] == "fetch") & (rows[requestlog.KAFKA_THROTTLE] == 0)]
    by_id = {r.correlation_id: r for r in logged}
    seen = set()
    for cid, size, version in zip(
        fetched[requestlog.CORRELATION_ID],
        fetched[BYTES],
        fetched[requestlog.API_VERSION],
        strict=True,
    ):
        r = by_id[cid]
        assert size == gen.expected_bytes(r) > 0
        seen.add(int(version))
    assert seen == set(range(19))
    throttled = rows[(rows[API] == "fetch") & (rows[requestlog.KAFKA_THROTTLE] > 0)]
    assert len(throttled) and (throttled[BYTES] == 0).all()


@pytest.mark.slow
def test_timestamps_in_the_brokers_zone(spark: Any, tmp_path: Path) -> None:
    spec = gen.LogSpec(requests=60, brokers=1, seed=3, timezone="America/New_York")
    logged = gen.write(spec, tmp_path)
    rows, _ = _collect(spark, str(tmp_path), LogOptions(timezone="America/New_York"))
    expected = {r.correlation_id: r.record_ms for r in logged if r.reason is None}
    assert dict(zip(rows[requestlog.CORRELATION_ID], rows[TS], strict=True)) == expected
    utc, _ = _collect(spark, str(tmp_path))
    assert (utc[TS].to_numpy() - rows[TS].to_numpy() == -4 * 3_600_000).all()  # EDT is UTC-4


# -- Spark: hostile logs -------------------------------------------------------------------------

# A line with no newline: Hadoop's line reader keeps at most MAX_LINE_BYTES (16 MiB) of
# it and drops it, so memory is bounded whatever its size; it is counted from the bytes
# no line accounts for. Without the bound a 100 MB line exhausts a 1 GB executor
# (OutOfMemoryError). 24 MB (> 16 MiB) takes the same code path at a fraction of the cost.
LONG_LINE_MB = 24


@pytest.mark.slow
def test_hostile_lines_are_counted_not_fatal(spark: Any, tmp_path: Path) -> None:
    good_logged, lines = gen.generate(gen.LogSpec(requests=40, brokers=1, seed=1, trace=False))
    good = lines["broker-0"]
    folder = tmp_path / "broker-0"
    folder.mkdir()
    deep = '{"x":' * 100_000 + "1" + "}" * 100_000
    nested = good[0].replace('"request":', f'"deep":{deep},"request":', 1)
    lines_out = [
        *good[:10],
        "[2024-06-03 00:00:00,000]",  # a header of one field
        nested,  # JSON nested 10^5 deep
        good[11][: len(good[11]) // 2],  # truncated
        "[2024-06-03 00:00:00,000] DEBUG Completed request:RequestHeader(apiKey=PRODUCE, "
        "apiVersion=8, clientId=a, correlationId=1) -- {acks=1},response:x from connection "
        "c;totalTime:1.0 (kafka.request.logger)",
        "[2024-06-03 00:00:00,000] INFO [KafkaServer id=1] started (kafka.server.KafkaServer)",
        "[2024-13-45 99:00:00,000]" + good[12].split("]", 1)[1],  # an impossible time
        "",
        *good[13:],
    ]
    data = "\n".join(lines_out).encode() + b"\n"
    data += good[10].encode()[:60] + b"\xff\xfe\xc0" + good[10].encode()[60:] + b"\n"
    (folder / "kafka-request.log.1").write_bytes(data)
    (folder / "kafka-request.log.2").write_bytes(b"")  # an empty file
    with (folder / "kafka-request.log").open("wb") as out:  # a very long line, no newline
        out.write(good[0].encode() + b"\n")
        out.write(b"[2024-06-03 00:00:00,000] DEBUG Completed request:{")
        chunk = b'"k":"' + b"v" * 1_048_000 + b'",'
        for _ in range(LONG_LINE_MB):
            out.write(chunk)
    lines = requestlog.read(spark, str(tmp_path))
    assert [Path(f).name for f in lines.files.empty] == ["kafka-request.log.2"]
    frame = lines.frame.toPandas()
    summary = _summary(lines, lines.frame.agg(*_metrics()).first().asDict())
    assert summary.skipped[requestlog.TOO_LONG] == 1
    assert summary.examples[requestlog.TOO_LONG][0].endswith(
        "bytes of the input are in lines not read"
    )
    rows = frame[frame["_kq_reason"].isna()]
    reasons = collections.Counter(frame["_kq_reason"].dropna())
    by_line = {r.line: r for r in good_logged}
    intact = [by_line[t] for t in (*good[:10], *good[13:], good[0])]
    # Spark splits the long line's file; the split that starts inside the line yields the
    # rest of it (up to the limit) as a line of its own: one more "not a Completed request"
    others = frame.loc[frame["_kq_reason"] == requestlog.OTHER_LINE, "_kq_example"].tolist()
    fragments = [e for e in others if e and set(e) <= set('"kv,')]
    assert len(fragments) <= 1
    assert reasons == {
        # the one-field header, another logger, an empty line (and a fragment)
        requestlog.OTHER_LINE: 3 + len(fragments),
        requestlog.CORRUPT: 2,  # 10^5 deep, truncated
        requestlog.OLD_FORMAT: 1,
        requestlog.BAD_TIME: 1,
        requestlog.NOT_UTF8: 1,
    } | collections.Counter(r.reason for r in intact if r.reason)
    assert sorted(rows[requestlog.CORRELATION_ID]) == sorted(
        r.correlation_id for r in intact if r.reason is None
    )
    assert summary.rows == len(rows)
    assert summary.lines_skipped == sum(reasons.values()) + 1
    assert all(len(e) <= requestlog.EXAMPLE_CHARS for e in frame["_kq_example"].dropna())


@pytest.mark.slow
def test_a_file_with_no_usable_line_is_an_error_naming_it(spark: Any, tmp_path: Path) -> None:
    _, lines = gen.generate(gen.LogSpec(requests=20, brokers=1, seed=2))
    (tmp_path / "b1").mkdir()
    (tmp_path / "b2").mkdir()
    (tmp_path / "b1" / "kafka-request.log").write_text("\n".join(lines["broker-0"]) + "\n")
    (tmp_path / "b2" / "kafka-request.log").write_text("garbage\nmore garbage\n")
    with pytest.raises(TrafficError, match=r"b2/kafka-request\.log'.*no usable Completed request"):
        requestlog.import_log(spark, str(tmp_path), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_import_and_describe_parse_each_line_once(spark: Any, written: gen.WrittenLog) -> None:
    # the core's reader runs once a line: one mapInArrow in each plan, and the filter on
    # the skip reason above it
    from pyspark.sql import Observation

    folder, _ = written
    lines = requestlog.read(spark, str(folder))
    for query in (
        _import_rows(lines, Observation("kquota-test-import")),
        _describe_apis(lines, Observation("kquota-test-describe")),
    ):
        plan = query._jdf.queryExecution().executedPlan().toString()
        assert plan.count("MapInArrow") == 1, plan
        assert plan.count("from_json(") == 0
