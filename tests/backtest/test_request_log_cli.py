"""``kquota traffic import|describe`` and ``kquota backtest --traffic-format
kafka-request-log`` on a generated request log (the session's ``spark`` fixture)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import requestlog_gen as gen
from kquota.backtest import requestlog
from kquota.cli import main
from test_backtest_kernel import mixed_config

pytest.importorskip("kio", reason="the generator needs kio, a dev dependency")


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> gen.WrittenLog:
    folder = tmp_path_factory.mktemp("logs")
    return folder, gen.write(gen.LogSpec(requests=300, brokers=2, seed=11), folder)


@pytest.mark.slow
def test_import_writes_the_traffic_parquet(
    spark: Any, log: gen.WrittenLog, tmp_path: Path, capsys: Any
) -> None:
    folder, logged = log
    out = tmp_path / "traffic.parquet"
    assert main(["traffic", "import", str(folder), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    usable = [r for r in logged if r.reason is None]
    assert captured.out.startswith(f"wrote {len(usable):,} requests to {out}/")
    assert "follower fetch" in captured.err
    table = pq.read_table(out)
    assert table.num_rows == len(usable)
    assert table.column_names == list(requestlog.COLUMNS)
    assert sum(table.column("bytes").to_pylist()) == sum(gen.expected_bytes(r) for r in usable)


@pytest.mark.slow
def test_describe_counts_requests_brokers_and_skipped_lines(
    spark: Any, log: gen.WrittenLog, capsys: Any
) -> None:
    folder, logged = log
    assert main(["traffic", "describe", str(folder / "*" / "kafka-request.log*")]) == 0
    text = capsys.readouterr().out
    usable = [r for r in logged if r.reason is None]
    assert f"({len(usable):,} requests," in text
    assert "brokers: 2 (broker-0, broker-1)" in text
    assert f"users: {len({r.user for r in usable})}" in text
    produce = [r for r in usable if r.api == "produce"]
    produce_bytes = sum(gen.expected_bytes(r) for r in produce)
    assert re.search(rf"\n  produce +{len(produce):,} requests +{produce_bytes:,} bytes\n", text)
    assert requestlog.FOLLOWER in text and requestlog.TRACE_LINE in text
    assert "e.g. '[2024-06-03" in text


@pytest.mark.slow
def test_backtest_straight_from_the_log(
    spark: Any, log: gen.WrittenLog, tmp_path: Path, capsys: Any
) -> None:
    folder, logged = log
    quotas = tmp_path / "quotas.json"
    quotas.write_text(mixed_config().dumps())
    out = tmp_path / "out"
    status = main(
        [
            "backtest",
            "--traffic",
            str(folder),
            "--traffic-format",
            "kafka-request-log",
            "--log-timezone",
            "UTC",
            "--quotas",
            str(quotas),
            "--out",
            str(out),
        ]
    )
    captured = capsys.readouterr()
    assert status == 0, captured.err
    usable = len([r for r in logged if r.reason is None])
    assert captured.out.startswith(f"{usable:,} requests read, {usable:,} replayed")
    assert "note: request log" in captured.out and "follower fetch" in captured.out
    requests = pq.read_table(out / "requests")
    assert requests.num_rows == usable
    assert "kafka_throttle_ms" in requests.column_names  # what Kafka did, beside the replay
    assert (out / "traffic").is_dir()


@pytest.mark.slow
def test_the_format_is_recognised_and_one_broker_id_can_be_given(
    spark: Any, log: gen.WrittenLog, tmp_path: Path, capsys: Any
) -> None:
    folder, _ = log
    out = tmp_path / "t"
    one = folder / "broker-1" / "kafka-request.log.2024-06-03-00.gz"
    assert main(["traffic", "import", str(one), "--out", str(out), "--broker-id", "7"]) == 0
    assert set(pq.read_table(out).column("broker").to_pylist()) == {"7"}
    from kquota.backtest import inputs

    assert inputs.check_traffic(str(folder)) == requestlog.FORMAT
    assert inputs.check_traffic(str(one)) == requestlog.FORMAT
    capsys.readouterr()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["describe", "MISSING"], "kquota traffic describe: traffic 'MISSING' does not exist"),
        (["describe", "EMPTY"], "all 3 file(s) are empty"),
        (["describe", "LOGS", "--log-timezone", "Nowhere/X"], "invalid --log-timezone 'Nowhere/X'"),
        (["import", "LOGS", "--out", "O", "--broker-id-from", "("], "invalid --broker-id-from '('"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: Any, args: list[str], message: str
) -> None:
    (tmp_path / "empty").mkdir()
    for i in range(3):
        (tmp_path / "empty" / f"kafka-request.log.{i}").touch()
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "kafka-request.log").write_text("x\n")
    names = {
        "MISSING": "MISSING",
        "EMPTY": str(tmp_path / "empty"),
        "LOGS": str(tmp_path / "logs"),
        "O": str(tmp_path / "o"),
    }
    assert main(["traffic", *(names.get(a, a) for a in args)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
