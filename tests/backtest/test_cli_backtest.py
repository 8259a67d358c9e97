"""``kquota backtest`` on the command line: outputs, progress and exit statuses.

The command reuses the session-scoped ``spark`` fixture (an active session is used as it
is and left running).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kquota.backtest import synthetic
from kquota.backtest.outputs import read_requests
from kquota.cli import main
from kquota.config import SQLiteStore
from test_backtest_job import BAD_CSV
from test_backtest_kernel import mixed_config


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("cli")
    table = synthetic.generate(synthetic.TrafficSpec(requests=20_000, brokers=3, hours=1.0, seed=4))
    path = synthetic.write(table, folder / "traffic.parquet")
    quotas = folder / "quotas.json"
    quotas.write_text(synthetic.suggest_quotas(table).dumps())
    return path, quotas


def backtest(*args: str) -> int:
    return main(["backtest", *args])


def backtest_ok(
    capsys: pytest.CaptureFixture[str], inputs: tuple[Path, Path], out: Path, *options: str
) -> pytest.CaptureResult[str]:
    """``kquota backtest`` of ``inputs`` into ``out`` with ``options`` succeeds: what it
    printed."""
    path, quotas = inputs
    status = backtest("--traffic", str(path), "--quotas", str(quotas), "--out", str(out), *options)
    captured = capsys.readouterr()
    assert status == 0, captured.err
    return captured


@pytest.mark.slow
def test_a_run_prints_the_summary_and_where_everything_is(
    spark: Any, inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options = ("--scale", "0.5,1,2", "--recommend", "--target", "0.05")
    out = tmp_path / "out"
    captured = backtest_ok(capsys, inputs, out, *options)
    assert "replaying the traffic x 3 scenario(s), open loop" in captured.err
    assert "20,000 rows, 0 refused" in captured.err
    lines = captured.out.splitlines()
    assert lines[0].startswith("20,000 requests read, 20,000 replayed, 0 quarantined; open loop")
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["scenario", "requests"])
    # the header, its rule, then a row per scenario
    assert [line.split()[0] for line in lines[header + 2 : header + 5]] == ["x0.5", "x1", "x2"]
    assert "Recommended quotas" in captured.out
    for name in ("requests", "entities", "recommendations"):
        assert f"{name}: {out}/{name}/" in captured.out
        assert (out / name).is_dir()
    assert f"report: {out / 'report.html'}" in captured.out
    assert not (out / "quarantine").exists()


@pytest.mark.slow
def test_quotas_from_a_store_equal_the_quota_file(
    spark: Any, inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--store STORE`` and ``--quotas FILE`` holding the same quotas replay alike, and so
    does ``--quotas STORE``, the old name of ``--store``, with a note naming ``--store``."""
    path, _ = inputs
    store = tmp_path / "quotas.sqlite"
    SQLiteStore(store).replace(mixed_config())
    (tmp_path / "q.json").write_text(mixed_config().dumps())
    notes = {}
    for option, source, out in (
        ("--store", store, "store"),
        ("--quotas", tmp_path / "q.json", "file"),
        ("--quotas", store, "alias"),
    ):
        status = backtest(
            "--traffic", str(path), option, str(source), "--out", str(tmp_path / out), "--quiet"
        )
        err = capsys.readouterr().err
        assert status == 0, err
        notes[out] = err  # --quiet: no progress
    assert notes == {
        "store": "",
        "file": "",
        "alias": f"kquota backtest: note: --quotas {str(store)!r} is a store; --quotas for a "
        "store is deprecated, name it with --store\n",
    }
    throttles = {
        out: read_requests(tmp_path / out / "requests")
        .sort_values("request_id")["throttle_ms"]
        .tolist()
        for out in notes
    }
    assert throttles["store"] == throttles["file"] == throttles["alias"]
    assert any(t > 0 for t in throttles["store"])


def one_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("kquota backtest: ")
    return err[0]


def test_a_bad_quota_file_is_one_message(
    inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = inputs
    bad = tmp_path / "bad.json"
    bad.write_text('{"quotas": [{"entity": {"user": "a"}, "config": {"producer_byte_rate": -1}}]}')
    assert backtest("--traffic", str(path), "--quotas", str(bad), "--out", str(tmp_path)) == 2
    assert "greater than 0" in one_error(capsys)
    missing = tmp_path / "none.json"
    assert backtest("--traffic", str(path), "--quotas", str(missing), "--out", str(tmp_path)) == 2
    assert "cannot read quota file" in one_error(capsys)
    args = ["--traffic", str(path), "--quotas", str(inputs[1]), "--out", str(tmp_path)]
    assert backtest(*args, "--scale", "1,x") == 2
    assert "invalid --scale '1,x'" in one_error(capsys)
    assert backtest(*args, "--target", "2") == 2
    assert "invalid target 2.0" in one_error(capsys)


@pytest.mark.slow
def test_bad_traffic_is_one_message(
    spark: Any, inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, quotas = inputs
    out = str(tmp_path / "out")

    def run(traffic_path: Path, *more: str) -> str:
        assert (
            backtest(
                "--traffic",
                str(traffic_path),
                "--quotas",
                str(quotas),
                "--out",
                out,
                "--quiet",
                *more,
            )
            == 2
        )
        return one_error(capsys)

    assert "does not exist" in run(tmp_path / "missing.parquet")
    (tmp_path / "empty.csv").write_text("")
    assert "is empty" in run(tmp_path / "empty.csv")
    (tmp_path / "header.csv").write_text("ts_ms,client_id,api,bytes\n")
    assert "has no rows" in run(tmp_path / "header.csv")
    (tmp_path / "junk.parquet").write_text("not parquet at all")
    assert "is not Parquet" in run(tmp_path / "junk.parquet")
    (tmp_path / "bad.csv").write_text(BAD_CSV)
    message = run(tmp_path / "bad.csv", "--strict")
    assert "--strict: 6 bad row(s)" in message and "1 bytes negative" in message


@pytest.mark.slow
def test_kafka_version_picks_the_releases_rules(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 3 MB produce request under a 1 B/s quota: a throttle of 3e9 ms, past Kafka's int.
    Kafka 4.1 casts it and wraps negative (no throttle); from 4.4 it saturates at 2**31 - 1.
    ``--kafka-version`` (or the quota file's ``kafka_version``) picks which."""
    traffic = tmp_path / "traffic.csv"
    traffic.write_text("ts_ms,user,client_id,api,bytes\n1700000000000,alice,big,produce,3000000\n")
    quotas = tmp_path / "quotas.json"
    quotas.write_text(
        '{"quotas": [{"entity": {"client-id": "big"}, "config": {"producer_byte_rate": 1}}]}'
    )
    throttles = {}
    for version in ("4.1", "4.4"):
        out = tmp_path / version
        args = ["--traffic", str(traffic), "--quotas", str(quotas), "--out", str(out)]
        assert backtest(*args, "--kafka-version", version, "--quiet") == 0, capsys.readouterr()
        throttles[version] = int(read_requests(out / "requests")["throttle_ms"].iloc[0])
        report = (out / "report.html").read_text(encoding="utf-8")
        assert f"throttles follow the quota rules of Kafka {version}" in report
    assert throttles == {"4.1": 0, "4.4": 2**31 - 1}
    # the quota file says the same as the flag
    quotas.write_text(quotas.read_text()[:-1] + ', "kafka_version": "4.4.0"}')
    out = tmp_path / "file"
    args = ["--traffic", str(traffic), "--quotas", str(quotas), "--out", str(out), "--quiet"]
    assert backtest(*args) == 0
    assert int(read_requests(out / "requests")["throttle_ms"].iloc[0]) == 2**31 - 1
    capsys.readouterr()
    args = ["--traffic", str(traffic), "--quotas", str(quotas), "--out", str(tmp_path / "x")]
    assert backtest(*args, "--kafka-version", "3.7") == 2
    assert 'invalid Kafka version "3.7"' in one_error(capsys)


def test_bad_client_limits_are_one_message(
    inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, quotas = inputs
    args = ["--traffic", str(path), "--quotas", str(quotas), "--out", str(tmp_path)]
    for flag, value in (
        ("--buffer-memory", "0"),
        ("--delivery-timeout-ms", "-1"),
        ("--api-timeout-ms", "0"),
    ):
        assert backtest(*args, "--mode", "closed", flag, value) == 2
        assert f"invalid {flag} {value}: it must be an int > 0" in one_error(capsys)


@pytest.mark.slow
def test_bounded_clients_say_what_was_not_served_and_whose(
    spark: Any, inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    captured = backtest_ok(
        capsys,
        inputs,
        out,
        *("--mode", "closed", "--scale", "0.2", "--buffer-memory", "200000"),
        *("--delivery-timeout-ms", "3000", "--api-timeout-ms", "2000"),
    )
    rows = read_requests(out / "requests")
    gone = rows[rows["unserved"] > 0]
    assert len(gone) > 0
    text = " ".join(captured.out.split())
    assert f"clients could not have sent {len(gone):,} requests" in text
    limits = "buffer.memory 200,000, delivery.timeout.ms 3,000, default.api.timeout.ms 2,000"
    assert limits in text
    assert "Demand not served, by client (x0.2):" in captured.out
    busiest = gone.groupby(["user", "client_id"])["bytes"].sum().idxmax()
    assert f"user={busiest[0]}, client-id={busiest[1]}" in captured.out
    html = (out / "report.html").read_text()
    assert "Demand not served (x0.2)" in html
    assert limits in html
