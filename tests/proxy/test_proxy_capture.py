"""``kquota proxy --capture DIR``: the traffic the proxy saw, as back-test input.

The round trip is the point: real clients run through ``kquota proxy --capture`` with
quotas that throttle them, then ``kquota backtest`` over the capture with the same quotas
gives, request for request, the throttles the proxy applied live.
"""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from kquota.backtest.outputs import read_requests
from kquota.exceptions import InvalidConfigError, OutputError
from kquota.proxy.capture import TrafficCapture
from proxy_support import create_topic, produce_greedily

HANG_S = 60.0

COLUMNS = [
    "ts_ms",
    "broker",
    "user",
    "client_id",
    "api",
    "bytes",
    "thread_time_ns",
    "acks",
    "kafka_throttle_ms",
    "api_version",
    "correlation_id",
    "connection",
]
"""The traffic schema of an imported request log, which a capture shares, and the
connection."""


def _kquota(*args: str) -> list[str]:
    return [sys.executable, "-m", "kquota", *args]


def _set_client_quota(store: Path, client: str, config: str) -> None:
    """``kquota configs --alter``: ``config`` (``K=V``) for ``client`` in ``store``."""
    subprocess.run(
        _kquota(
            *("configs", "--store", str(store), "--alter"),
            "--client",
            client,
            "--add-config",
            config,
        ),
        check=True,
        capture_output=True,
        timeout=60,
    )


def _row(i: int) -> tuple[Any, ...]:
    api = ("produce", "fetch", "metadata")[i % 3]
    return (
        1_700_000_000_000 + i,
        "alice" if i % 2 else "",
        f"client-{i % 7}",
        api,
        0 if api == "metadata" else 1000 + i,
        None if i % 5 == 0 else 20_000 + i,
        -1 if api == "produce" else None,
        i % 4,
        9,
        i,
        f"127.0.0.1:{40000 + i % 3}",
    )


def _add(capture: TrafficCapture, rows: range) -> None:
    for i in rows:
        capture.add(*_row(i))


def _visible(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if not p.name.startswith("."))


def _wait_for(condition: Any) -> None:
    deadline = time.monotonic() + HANG_S
    while not condition():
        assert time.monotonic() < deadline, "not within the hang bound"
        time.sleep(0.05)


def test_rows_are_written_as_traffic_and_files_roll_by_size(tmp_path: Path) -> None:
    folder = tmp_path / "capture"  # created by the capture
    with TrafficCapture(folder, "broker-7", roll_bytes=1) as capture:
        capture.align(1_700_000_000_000 - 5)  # the quota clock: epoch time minus 5 ms
        _add(capture, range(40_000))  # hand-overs of 16 384 rows: each closes a file
    assert capture.error is None and capture.rows == 40_000
    files = _visible(folder)
    assert files == capture.files and len(files) == 3
    assert all(f.name.startswith("traffic-") and f.suffix == ".parquet" for f in files)
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # nothing in progress
    table = ds.dataset(folder).to_table()
    assert table.schema.names == COLUMNS
    assert table.schema.field("ts_ms").type == pa.int64()
    assert table.schema.field("kafka_throttle_ms").type == pa.int32()
    got = sorted(zip(*(table.column(c).to_pylist() for c in COLUMNS), strict=True))
    assert [r[1:] for r in got] == [("broker-7", *r[1:]) for r in map(_row, range(40_000))]
    # written in epoch ms: the quota clock's times plus one offset, within the test's span
    offsets = {g[0] - r[0] for g, r in zip(got, map(_row, range(40_000)), strict=True)}
    assert len(offsets) == 1
    assert 0 <= offsets.pop() - 5 <= (time.time_ns() // 1_000_000 - 1_700_000_000_000)


def test_a_file_appears_only_when_complete_and_rolls_by_age(tmp_path: Path) -> None:
    with TrafficCapture(tmp_path, "b", roll_seconds=3600) as capture:
        _add(capture, range(10))
        time.sleep(1.05)  # the batch is a second old: the next flush hands it over
        capture.flush_due()
        _wait_for(lambda: [p for p in tmp_path.iterdir() if p.name.endswith(".inprogress")])
        assert _visible(tmp_path) == []  # written, but not complete: hidden
        assert ds.dataset(tmp_path).to_table().num_rows == 0  # readers skip it
    assert [pq.read_table(f).num_rows for f in _visible(tmp_path)] == [10]

    aged = tmp_path / "aged"
    with TrafficCapture(aged, "b", roll_seconds=0.2) as capture:
        _add(capture, range(3))
        time.sleep(1.05)
        capture.flush_due()
        _wait_for(lambda: len(_visible(aged)) == 1)  # completed by age, capture still open
        _add(capture, range(3, 5))
    assert [pq.read_table(f).num_rows for f in _visible(aged)] == [3, 2]


def test_bad_folder_and_roll_values_are_named(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(OutputError, match="a-file/capture"):
        TrafficCapture(blocker / "capture", "b")
    for bad in (0, -5, 1.5, True):
        with pytest.raises(InvalidConfigError, match=f"roll size {bad!r}"):
            TrafficCapture(tmp_path, "b", roll_bytes=bad)  # type: ignore[arg-type]
    for bad_age in (0, -1.0, float("nan")):
        with pytest.raises(InvalidConfigError, match="roll age"):
            TrafficCapture(tmp_path, "b", roll_seconds=bad_age)
    assert list(tmp_path.iterdir()) == [blocker]


def test_a_failing_write_stops_the_capture_with_one_line_and_nothing_else(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="kquota.proxy")
    folder = tmp_path / "capture"
    capture = TrafficCapture(folder, "b", roll_bytes=1)
    shutil.rmtree(folder)  # the folder goes away under the running capture
    _add(capture, range(20_000))  # a hand-over: the writer cannot create its file
    _wait_for(lambda: capture.error is not None)
    _add(capture, range(5))  # ignored from now on, no error raised to the proxy
    capture.close()
    assert "capture to" in caplog.text and "stopped" in caplog.text
    assert len([r for r in caplog.records if r.name == "kquota.proxy"]) == 1


def test_cli_capture_options_are_checked(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    store = tmp_path / "quotas.sqlite"
    _set_client_quota(store, "x", "producer_byte_rate=1000")
    base = _kquota("proxy", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:9")
    base += ["--store", str(store)]
    for extra, message in (
        (["--capture-roll-mb", "5"], "--capture-roll-mb 5 needs --capture DIR"),
        (["--capture-broker", "b1"], "--capture-broker b1 needs --capture DIR"),
        (["--capture", str(tmp_path / "c"), "--capture-roll-mb", "0"], "--capture-roll-mb 0"),
        (["--capture", str(blocker / "c")], f"cannot write the capture to '{blocker}/c'"),
    ):
        done = subprocess.run(base + extra, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, (extra, done.stderr)
        assert message in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


# -- the round trip: live throttles == back-test throttles ----------------------------------


@pytest.mark.slow
def test_backtest_over_a_capture_gives_the_throttles_the_proxy_applied(
    tansu: Any, tmp_path: Path
) -> None:
    from confluent_kafka import Consumer

    store = tmp_path / "quotas.sqlite"
    for entity, config in (
        ("producer", "producer_byte_rate=150000"),
        ("consumer", "consumer_byte_rate=120000"),
    ):
        _set_client_quota(store, entity, config)
    capture = tmp_path / "capture"
    started_ms = time.time_ns() // 1_000_000
    proxy = subprocess.Popen(
        _kquota(
            "proxy",
            "--listen",
            f"127.0.0.1:{tansu.proxy_port}",
            "--store",
            str(store),
            "--upstream",
            f"127.0.0.1:{tansu.port}",
            "--capture",
            str(capture),
            "--capture-broker",
            "1",
            "--log-level",
            "WARNING",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    bootstrap = f"127.0.0.1:{tansu.proxy_port}"
    try:
        assert proxy.stdout is not None
        assert proxy.stdout.readline().startswith("kquota proxy: listening")
        topic = "capture-roundtrip"
        create_topic(bootstrap, topic)
        sent, throttles = produce_greedily(bootstrap, topic, 14, "producer")

        def throttled(event: Any) -> None:
            if event.throttle_time > 0:
                throttles.append(round(event.throttle_time * 1000))

        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "capture-group",
                "client.id": "consumer",
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100,
                "fetch.max.bytes": 65_536,
                "max.partition.fetch.bytes": 65_536,
                "message.max.bytes": 65_536,
                "throttle_cb": throttled,
            }
        )
        consumer.subscribe([topic])
        start = time.monotonic()
        received = 0
        while time.monotonic() - start < 14:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                received += 1
        consumer.close()
    finally:
        proxy.send_signal(signal.SIGTERM)
        _, stderr = proxy.communicate(timeout=60)
    assert proxy.returncode == 0, stderr

    live = ds.dataset(capture).to_table().to_pandas()
    applied = live[live["kafka_throttle_ms"] > 0]
    assert set(applied["client_id"]) == {"producer", "consumer"}, "both must be throttled"
    assert set(applied["api"]) == {"produce", "fetch"}

    out = tmp_path / "backtest"
    done = subprocess.run(
        _kquota(
            "backtest",
            "--traffic",
            str(capture),
            "--store",
            str(store),
            "--out",
            str(out),
            "--quiet",
        ),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    replayed = read_requests(out / "requests")
    key = ["connection", "correlation_id"]
    both = live.merge(replayed, on=key, suffixes=("", "_replayed"), validate="one_to_one")
    assert len(both) == len(live) > 0
    mismatched = both[both["kafka_throttle_ms"] != both["throttle_ms"]]
    assert mismatched.empty, mismatched[[*key, "api", "kafka_throttle_ms", "throttle_ms"]]
    # the report puts what the proxy did beside the replay: they agree on every request
    assert "What the broker did" in done.stdout
    (agree_row,) = [line for line in done.stdout.splitlines() if line.lstrip().startswith("x1 ")][
        -1:
    ]
    assert "100.00%" in agree_row, done.stdout
    # the times are epoch ms of the run
    assert live["ts_ms"].between(started_ms, time.time_ns() // 1_000_000).all()
    print(
        f"capture round trip: {len(live)} requests ({sent} messages produced,"
        f" {received} consumed), {len(applied)} throttled live, all {len(both)} replayed alike"
    )
