"""The README's quick starts, run as a user runs them.

Each quick start's blocks are taken from README.md as they are written (no copy here):

1. the Python block runs in a fresh interpreter and prints exactly the README's output;
2. the shell block's ``kquota configs`` commands build a store and ``kquota proxy`` serves
   it in front of Tansu; a librdkafka producer with the README's client id, as greedy as
   it can be, is throttled and held to the README's quota, and the metrics endpoint the
   README names shows it;
3. the shell block's ``kquota traffic import`` and ``kquota backtest`` run on the sample
   request log under ``examples/`` on a real local Spark; the import keeps exactly the
   log's client requests, and every throttle of every scenario equals Kafka's request
   path (``kquota.RequestPath``) replayed request by request.

The commands run as ``python -m kquota`` from this checkout; nothing else in them is
changed, except the addresses of quick start 2, which move to the ports the test broker
uses (the test checks that the README's addresses are the ones it replaces).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

import paths
import pytest
from scrapes import client_sample

ROOT = paths.ROOT
README = ROOT / "README.md"
EXAMPLES = ROOT / "examples"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


# -- reading the README ------------------------------------------------------------------


def section(title: str) -> str:
    """The text of the README's ``## {title}...`` section, up to the next ``## ``."""
    text = README.read_text(encoding="utf-8")
    parts = re.split(r"^## ", text, flags=re.MULTILINE)
    found = [p for p in parts if p.startswith(title)]
    assert len(found) == 1, f"README.md has {len(found)} sections starting {title!r}"
    return found[0]


def blocks(title: str, language: str) -> list[str]:
    """The fenced blocks of ``language`` in the section, in order."""
    return [code for lang, code in FENCE.findall(section(title)) if lang == language]


def commands(script: str) -> list[list[str]]:
    """The commands of a shell block: continuation lines joined, each split as the shell
    splits it."""
    joined = script.replace("\\\n", " ")
    return [shlex.split(line) for line in joined.splitlines() if line.strip()]


def kquota_argv(argv: list[str]) -> list[str]:
    """A README command as it runs from this checkout: ``kquota`` is ``python -m kquota``."""
    assert argv[0] == "kquota", f"not a kquota command: {shlex.join(argv)}"
    return [sys.executable, "-m", "kquota", *argv[1:]]


def run(argv: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, (shlex.join(argv), result.stdout, result.stderr)
    return result


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


# -- install -------------------------------------------------------------------------------


def test_install_names_the_extras_pyproject_declares() -> None:
    """Every ``kquota[EXTRA]`` of the install section is an extra of pyproject.toml, and
    each extra's table row names what it brings."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = pyproject["project"]["optional-dependencies"]
    text = section("Install")
    named = set(re.findall(r"kquota\[(\w+)\]", text))
    assert named == {"spark", "proxy", "kafka"}
    assert named <= set(extras)
    for extra in named:
        row = next(line for line in text.splitlines() if line.startswith(f"| `kquota[{extra}]`"))
        for requirement in extras[extra]:
            package = re.match(r"[A-Za-z0-9_.-]+", requirement)
            assert package is not None and package.group(0) in row, (extra, requirement)


def test_links_of_the_readme_lead_to_files() -> None:
    """Relative links point at files of the checkout."""
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)
    assert "CHANGELOG.md" in targets
    for target in targets:
        assert (ROOT / target).exists(), target


def test_make_targets_the_readme_names_exist() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    documented = set(re.findall(r"^([a-z-]+):.*## ", makefile, flags=re.MULTILINE))
    named = set(re.findall(r"`make ([a-z-]+)", README.read_text(encoding="utf-8")))
    named |= {argv[1] for argv in commands(blocks("For developers", "bash")[0])}
    assert {"demo", "test", "help", "docs", "lint"} <= named
    assert named <= documented, named - documented


# -- quick start 1: a quota in your own service ---------------------------------------------


def test_quick_start_1_prints_what_the_readme_shows(tmp_path: Path) -> None:
    (code,) = blocks("Quick start 1", "python")
    (shown,) = blocks("Quick start 1", "text")
    result = run([sys.executable, "-c", code], tmp_path, timeout=60)
    assert result.stdout == shown
    throttles = [int(line.rsplit("=", 1)[1]) for line in result.stdout.splitlines()]
    assert throttles[0] == 0 and max(throttles) > 0  # the example shows a throttle


# -- quick start 2: kquota proxy in front of a broker ---------------------------------------

PROXY = "127.0.0.1:9092"
BROKER = "127.0.0.1:19092"
METRICS_PORT = "9464"
MESSAGE = 1000
BATCH = 65_536


def _scrape(url: str, name: str, client_id: str) -> float:
    """The value of ``name`` for the client-id sensor of ``client_id`` in a scrape."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        return client_sample(reply.read().decode(), name, client_id)


@pytest.mark.slow
def test_quick_start_2_proxy_holds_a_producer_to_its_quota(tansu: Any, tmp_path: Path) -> None:
    pytest.importorskip("kio", reason="the tests' Kafka helpers need kio, a dev dependency")
    pytest.importorskip("confluent_kafka")
    from confluent_kafka import Producer
    from ports import free_port
    from proxy_support import create_topic, stopped_by_sigterm

    (script,) = blocks("Quick start 2", "bash")
    (shown,) = blocks("Quick start 2", "text")
    metrics_port = str(free_port())
    ports = {
        PROXY: f"127.0.0.1:{tansu.proxy_port}",
        BROKER: f"127.0.0.1:{tansu.port}",
        METRICS_PORT: metrics_port,
    }
    steps = commands(script)
    assert [argv[:2] for argv in steps] == [
        ["kquota", "configs"],
        ["kquota", "configs"],
        ["kquota", "proxy"],
    ]
    alter, describe, proxy = steps
    assert [option(proxy, o) for o in ("--listen", "--upstream", "--metrics-port")] == [
        PROXY,
        BROKER,
        METRICS_PORT,
    ]
    run(kquota_argv(alter), tmp_path, timeout=60)
    assert run(kquota_argv(describe), tmp_path, timeout=60).stdout == shown
    client_id = option(alter, "--entity-name")
    config = dict(pair.split("=") for pair in option(alter, "--add-config").split(","))
    quota = float(config["producer_byte_rate"])

    process = subprocess.Popen(
        kquota_argv([ports.get(arg, arg) for arg in proxy]),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    with stopped_by_sigterm(process, timeout=30):
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("kquota proxy: listening on"), (line, process.stderr)
        bootstrap = ports[PROXY]
        create_topic(bootstrap, "readme-quick-start")
        throttles: list[float] = []
        failures: list[Any] = []
        acked: list[int] = []
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client_id,
                "batch.size": BATCH,
                "linger.ms": 5,
                "acks": "all",
                "throttle_cb": lambda e: e.throttle_time > 0 and throttles.append(e.throttle_time),
            }
        )

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                acked.append(len(msg.value()))
            else:
                failures.append(err)

        start = time.monotonic()
        while time.monotonic() - start < 6:  # as greedy as the client allows
            if len(producer) < 256:
                producer.produce("readme-quick-start", b"x" * MESSAGE, on_delivery=delivered)
                producer.poll(0)
            else:
                producer.poll(0.01)
        assert producer.flush(60) == 0
        elapsed = time.monotonic() - start
        metrics = f"http://127.0.0.1:{metrics_port}/metrics"
        byte_rate = _scrape(metrics, "kafka_server_produce_byte_rate", client_id)
        throttle_time = _scrape(metrics, "kafka_server_produce_throttle_time", client_id)
        del producer

    assert failures == []
    assert throttles, "the producer was never throttled"
    # Kafka's bound for a greedy client: a fresh sensor's window is padded to 10 windows,
    # so it gets at most Q * (run + 10 s), plus the request that crossed the quota
    assert sum(acked) > quota * 10  # it did send more than the quota allows
    assert sum(acked) <= 1.05 * quota * (elapsed + 10) + BATCH
    assert 0 < byte_rate <= 1.3 * quota
    assert throttle_time > 0
    print(
        f"{sum(acked) / quota:.1f} s of quota acked in {elapsed:.1f} s, {len(throttles)}"
        f" throttles reported; scraped byte_rate {byte_rate / quota:.2f} Q"
    )


# -- quick start 3: a back-test from a Kafka request log ------------------------------------

INTER_BROKER = {4, 5, 6, 7, 27, 56}
"""API keys of the inter-broker requests the sample log has or could have (LeaderAndIsr,
StopReplica, UpdateMetadata, ControlledShutdown, WriteTxnMarkers, AlterPartition)."""


def client_requests(folder: Path) -> int:
    """The log's lines that are client requests, counted by the rules of the request log
    (``../shared/docs/kafka-request-log.md``), independently of kquota's reader: only
    ``Completed request:`` lines, and not forwarded ones, inter-broker APIs, follower
    fetches or Produce and Fetch lines without their request."""
    count = 0
    for path in sorted(folder.rglob("kafka-request.log*")):
        data = path.read_bytes()
        text = gzip.decompress(data) if path.suffix == ".gz" else data
        for line in text.decode("utf-8").splitlines():
            head, found, body = line.partition(" Completed request:")
            if not found or not re.search(r"\] (DEBUG|INFO)$", head):
                continue
            document = json.loads(body.removesuffix(" (kafka.request.logger)"))
            key = document["requestHeader"]["requestApiKey"]
            request = document["request"]
            if document["isForwarded"] or key in INTER_BROKER:
                continue
            if key in (0, 1) and not isinstance(request, dict):
                continue
            if key == 1 and (
                request.get("replicaId", -1) >= 0
                or (request.get("replicaState") or {}).get("replicaId", -1) >= 0
            ):
                continue
            count += 1
    return count


def request_path_throttles(requests: Any, quotas: Any) -> list[int]:
    """Each request's throttle when the requests (pandas, one row each) go through
    Kafka's request path, broker by broker in time order (ties in input order)."""
    import kquota
    import pandas as pd

    order = requests.sort_values(
        ["broker", "ts_ms", "_kq_seq_file", "_kq_seq_row"], kind="stable"
    ).index
    paths: dict[str, Any] = {}
    throttles = pd.Series(0, index=requests.index)
    for index in order:
        r = requests.loc[index]
        if r["broker"] not in paths:
            paths[r["broker"]] = kquota.RequestPath(
                *(quotas.manager(t) for t in ("produce", "fetch", "request"))
            )
        kind = r["api"] if r["api"] in ("produce", "fetch") else "other"
        thread = r["thread_time_ns"]
        outcome = paths[r["broker"]].record(
            r["user"],
            r["client_id"],
            kind,
            float(r["bytes"]),
            None if pd.isna(thread) else float(thread),
            acks=-1 if pd.isna(r["acks"]) else int(r["acks"]),
            now_ms=int(r["ts_ms"]),
        )
        throttles[index] = max(outcome.throttle_ms, 0)
    return throttles.tolist()


@pytest.mark.slow
def test_quick_start_3_backtests_the_sample_request_log(tmp_path: Path) -> None:
    pytest.importorskip("pyspark", reason='needs the spark extra: pip install "kquota[spark]"')
    if shutil.which("java") is None and "JAVA_HOME" not in os.environ:
        pytest.skip("Spark needs Java 17")
    import pyarrow.parquet as pq
    from kquota.backtest.outputs import read_requests
    from kquota.config.model import QuotaConfig

    (script,) = blocks("Quick start 3", "bash")
    steps = commands(script)
    assert [argv[:3] for argv in steps] == [
        ["kquota", "traffic", "import"],
        ["kquota", "backtest", "--traffic"],
    ]
    (tmp_path / "examples").symlink_to(EXAMPLES, target_is_directory=True)
    imported = run(kquota_argv(steps[0]), tmp_path, timeout=600)
    backtest = run(kquota_argv(steps[1]), tmp_path, timeout=600)

    # the import keeps every client request of the log, and nothing else
    log = tmp_path / steps[0][3]
    traffic = pq.read_table(tmp_path / option(steps[0], "--out")).to_pandas()
    expected = client_requests(log)
    assert expected > 200
    assert len(traffic) == expected, imported.stderr
    assert set(traffic["broker"]) == {p.name for p in log.iterdir() if p.is_dir()}

    # every scenario's throttles are Kafka's request path's, request by request
    out = tmp_path / option(steps[1], "--out")
    scales = [float(s) for s in option(steps[1], "--scale").split(",")]
    quotas = QuotaConfig.load(tmp_path / option(steps[1], "--quotas"))
    throttled = []
    for scale in scales:
        label = f"x{scale:g}"
        rows = read_requests(out / "requests", scenario=label).reset_index(drop=True)
        assert len(rows) == expected
        expect = request_path_throttles(rows, quotas.scaled(scale))
        assert rows["throttle_ms"].tolist() == expect, label
        throttled.append(sum(t > 0 for t in expect))
        summary = rf"^\s*{re.escape(label)}\s+{expected}\s+{throttled[-1]}\s"
        assert re.search(summary, backtest.stdout, re.MULTILINE), backtest.stdout
    # the sample shows what a what-if is for: fewer throttles as the quotas grow
    assert throttled == sorted(throttled, reverse=True) and throttled[0] > throttled[-1]
    assert throttled[scales.index(1.0)] > 0

    # what the README says of the replay beside the broker is what this run gives
    rows = read_requests(out / "requests", scenario="x1")
    broker, replay = rows["kafka_throttle_ms"], rows["throttle_ms"]
    text = " ".join(section("Quick start 3").split())
    apart = (broker - replay).abs()
    close = (apart <= 10) | (apart <= 0.02 * broker)
    claims = (
        f"the replay throttles {int(((broker > 0) & (replay > 0)).sum())} of the "
        f"{int((broker > 0).sum())} requests the broker throttled and gives "
        f"{close.mean():.2%} of all {len(rows)} requests the broker's throttle to within "
        f"10 ms or 2%, {replay.sum() / 1000:.1f} s of throttle in all against the broker's "
        f"{broker.sum() / 1000:.1f} s",
        f"Halved (x0.5), the quotas would have throttled {throttled[0]} requests; doubled, "
        + ("none" if throttled[-1] == 0 else str(throttled[-1])),
    )
    for claim in claims:
        assert claim in text, claim
    # what is left is the fetches the log cannot size, as the import says
    assert "that neither sizes kept at 0 bytes, as logged" in imported.stderr

    entities = pq.read_table(out / "entities").to_pandas()
    assert set(entities["scenario"]) == {f"x{s:g}" for s in scales}
    report = (out / "report.html").read_text(encoding="utf-8")
    assert all(f"x{s:g}" in report for s in scales)
    assert not math.isnan(entities["throttled_fraction"].max())


# -- the examples of the guide ---------------------------------------------------------------

GUIDE = ROOT / "docs" / "guide"
RUNS_HERE = ("configs",)
"""The commands of the guide's shell blocks this test runs: ``kquota configs``, on a store of
its own. The others need a broker or Spark and run in the quick starts above, or are
covered by the command's own tests."""


@pytest.mark.parametrize("page", sorted(p.name for p in GUIDE.glob("*.md")))
def test_guide_examples_run_as_shown(page: str, tmp_path: Path) -> None:
    """Each page's blocks, in order, in a folder of its own with a store of its own:
    ``kquota configs`` commands run and succeed; a ``text`` block after them shows lines
    they print; a ``properties`` block is the ``quota.properties`` the next example
    reads; a quota file (``json``) loads; a Python block runs in a fresh interpreter and,
    when a ``text`` block follows it, prints exactly that."""
    from kquota.config.model import QuotaConfig

    env = {**os.environ, "KQUOTA_STORE": str(tmp_path / "quotas.sqlite")}
    found = FENCE.findall((GUIDE / page).read_text(encoding="utf-8"))
    printed = ""
    ran = 0

    def run_ok(argv: list[str], timeout: int, *what: str) -> str:
        """What ``argv`` printed, run in the page's folder; it must succeed."""
        result = subprocess.run(
            argv, cwd=tmp_path, env=env, timeout=timeout, capture_output=True, text=True
        )
        assert result.returncode == 0, (*what, result.stderr)
        return result.stdout

    for index, (language, code) in enumerate(found):
        follows = found[index + 1] if index + 1 < len(found) else ("", "")
        if language == "bash":
            printed = ""
            for argv in commands(code):
                if argv[0] == "kquota" and argv[1] in RUNS_HERE:
                    printed += run_ok(kquota_argv(argv), 60, shlex.join(argv))
                    ran += 1
            if follows[0] == "text" and printed:
                assert set(follows[1].splitlines()) <= set(printed.splitlines()), printed
        elif language == "properties":
            (tmp_path / "quota.properties").write_text(code, encoding="utf-8")
        elif language == "json" and '"quotas"' in code:
            QuotaConfig.from_json(json.loads(code), page)
            ran += 1
        elif language == "python":
            stdout = run_ok([sys.executable, "-c", code], 120, page, code)
            if follows[0] == "text":
                assert stdout == follows[1], (page, code)
            ran += 1
    if page in ("configuring-quotas.md", "broker-plugin.md", "callbacks.md", "backtesting.md"):
        assert ran, f"no example of {page} ran"


# -- the benchmark table goes to benches/README.md ------------------------------------------


def _bench_report() -> Any:
    """``benches/report.py`` as a module (it imports ``quick`` from its own folder)."""
    import importlib.util

    sys.path.insert(0, str(ROOT / "benches"))
    try:
        spec = importlib.util.spec_from_file_location(
            "bench_report", ROOT / "benches" / "report.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "benches"))
    return module


def test_bench_report_writes_its_table_into_benches_readme_only(tmp_path: Path) -> None:
    report = _bench_report()
    assert report.BENCH_README == ROOT / "benches" / "README.md"
    assert report.START not in README.read_text(encoding="utf-8")
    bench_readme = report.BENCH_README.read_text(encoding="utf-8")
    assert bench_readme.count(report.START) == bench_readme.count(report.END) == 1

    page = tmp_path / "README.md"
    page.write_text(f"# head\n{report.START}\nold table\n{report.END}\ntail\n", encoding="utf-8")
    report.write_table("| new | table |", page)
    assert page.read_text(encoding="utf-8") == (
        f"# head\n{report.START}\n| new | table |\n{report.END}\ntail\n"
    )
    unmarked = tmp_path / "unmarked.md"
    unmarked.write_text("# no markers\n", encoding="utf-8")
    with pytest.raises(report.MarkersMissing):
        report.write_table("| new | table |", unmarked)
    assert unmarked.read_text(encoding="utf-8") == "# no markers\n"


def test_bench_table_is_the_latest_results(tmp_path: Path) -> None:
    """The table in benches/README.md is what report.py makes of results/latest.json."""
    report = _bench_report()
    latest = json.loads(report.LATEST.read_text(encoding="utf-8"))
    text = report.table(latest["rows"], latest["machine"], latest["mode"])
    bench_readme = report.BENCH_README.read_text(encoding="utf-8")
    assert f"{report.START}\n{text}\n{report.END}" in bench_readme


def test_bench_readme_lists_every_target_as_report_sets_it() -> None:
    """The targets table of benches/README.md is report.py's ``TARGETS``, each row once:
    the benchmark, the baseline whose row carries it, and the target's text."""
    report = _bench_report()
    bench_readme = report.BENCH_README.read_text(encoding="utf-8")
    section = bench_readme.split("\n## Targets\n", 1)[1].split("\n## ", 1)[0]
    rows = [
        tuple(cell.strip() for cell in line.strip("|").split("|"))
        for line in section.splitlines()
        if line.startswith("| `")
    ]
    expected = [
        (f"`{t.name}`", f"`{t.baseline.rsplit('/', 1)[1]}`", f"`{t.text}`") for t in report.TARGETS
    ]
    assert sorted(rows) == sorted(expected)
