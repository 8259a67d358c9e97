"""The back-test on a real Spark standalone cluster gives what it gives on ``local[*]``.

A master and two workers (one core, 1 GB each) are started on 127.0.0.1 from the installed
PySpark (``pyspark/bin/spark-class``); the executors run this interpreter (the same
machine, the same venv, so they import kquota). The same generated traffic is back-tested
by three driver processes, each started as a user would start it:

* ``python -m kquota.backtest --master local[*]`` (the reference);
* ``kquota backtest --master spark://127.0.0.1:PORT``;
* ``spark-submit --master spark://127.0.0.1:PORT .../kquota/backtest/__main__.py``;

and the three must write equal per-request and per-entity tables and recommendations, and
print the same summary. The traffic's times are ISO-8601 text without a zone and every JVM
runs in UTC+05:30: all three must read them as UTC. The master's JSON says that the two
cluster runs ran on it, on both workers. Every process started here is stopped at the
end, and none is left working in the test's folders.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kquota.backtest as kquota_backtest
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kquota.backtest.outputs import read_requests
from kquota.cli import main as cli_main
from ports import free_port

pytestmark = pytest.mark.slow

STARTUP_SECONDS = 120
"""How long the master and workers may take to start and register (a bound against a
hang, not a timing assertion)."""
RUN_SECONDS = 300
"""How long the back-tests may take before the test gives up on them."""
REQUESTS = 10_000
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions=4"
"""Small data: a few shuffle partitions rather than 200 (for every driver alike)."""
ZONE = "Asia/Kolkata"
"""Every JVM's own time zone here (UTC+05:30): the traffic's times carry no zone, and every
session kquota starts must read them as UTC, on a cluster as on ``local[*]``."""
KQUOTA = Path(sys.executable).with_name("kquota")
"""The ``kquota`` script pip installed beside this interpreter."""


@dataclass
class Cluster:
    url: str
    """``spark://127.0.0.1:PORT``."""
    web_port: int
    """The master's web UI (``/json``: workers and applications)."""
    spark_home: Path
    env: dict[str, str]
    """What the drivers need: this Python for the executors, 127.0.0.1 for the driver."""


def spark_home() -> Path:
    pyspark = pytest.importorskip("pyspark", reason='needs the spark extra: "kquota[spark]"')
    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").is_file():
        pytest.skip(f"this PySpark has no bin/spark-class ({home})")
    return home


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def processes_in(folder: Path) -> list[int]:
    """Processes working in ``folder`` or below it (from ``/proc``): the daemons, drivers,
    executors and Python workers started for a folder of this test. PySpark's Python
    daemon leaves its parent's process group, so stopping a group is not proof enough."""
    folder = folder.resolve()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cwd = (entry / "cwd").readlink()
        except OSError:  # gone, or not ours
            continue
        if cwd == folder or folder in cwd.parents:
            found.append(int(entry.name))
    return found


def check_none_left(folder: Path) -> None:
    """Wait up to 20 s for every process in ``folder`` to end; kill and name any left."""
    deadline = time.monotonic() + 20
    while (left := processes_in(folder)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind in {folder}: {left}"


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """Stop ``process`` and everything it started in its process group (executors and
    their Python workers): SIGTERM, then SIGKILL for what is left after 20 s."""
    for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
        if not group_alive(process.pid):
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        deadline = time.monotonic() + grace
        while group_alive(process.pid) and time.monotonic() < deadline:
            process.poll()  # reap the leader, or it stays a zombie in the group
            time.sleep(0.2)
    process.wait(10)
    assert not group_alive(process.pid), f"processes of group {process.pid} left behind"


def master_state(web_port: int) -> dict[str, Any]:
    """The standalone master's state: its workers and applications (its web UI's JSON)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/json", timeout=5) as answer:
        state: dict[str, Any] = json.load(answer)
    return state


def alive_workers(web_port: int) -> int:
    workers = master_state(web_port).get("workers", [])
    return sum(1 for worker in workers if worker.get("state") == "ALIVE")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    home = spark_home()
    folder = tmp_path_factory.mktemp("cluster")
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(folder / "logs"),
        "PYSPARK_PYTHON": sys.executable,
        # the drivers kquota starts read this; spark-submit gets the same --conf
        "PYSPARK_SUBMIT_ARGS": f"--conf {SHUFFLE_PARTITIONS} pyspark-shell",
        # short-lived JVMs on 2 shared cores: the quick JIT only, no parallel GC threads
        "JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        "TZ": ZONE,
    }
    port, web_port = free_port(), free_port()
    spark_class = str(home / "bin" / "spark-class")
    commands = [
        [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(web_port),
        ],
        *(
            [
                spark_class,
                "org.apache.spark.deploy.worker.Worker",
                f"spark://127.0.0.1:{port}",
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                str(free_port()),
                "--work-dir",
                str(folder / f"worker-{i}"),
            ]
            for i in range(2)
        ),
    ]
    processes: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        for i, command in enumerate(commands):
            log = folder / f"daemon-{i}.log"
            with log.open("wb") as out:
                processes.append(
                    (
                        subprocess.Popen(
                            command,
                            stdout=out,
                            stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL,
                            env=env,
                            cwd=folder,
                            start_new_session=True,  # its own group: stopped with its children
                        ),
                        log,
                    )
                )
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            for process, log in processes:
                if process.poll() is not None:
                    pytest.fail(
                        f"{log.name} exited with {process.returncode}: {log.read_text()[-3000:]}"
                    )
            try:
                if alive_workers(web_port) == 2:
                    break
            except (OSError, ValueError):  # the master's web UI is not up yet
                pass
            if time.monotonic() > deadline:
                logs = "\n".join(f"{log.name}: {log.read_text()[-1500:]}" for _, log in processes)
                pytest.fail(f"2 workers did not register within {STARTUP_SECONDS} s:\n{logs}")
            time.sleep(0.5)
        yield Cluster(f"spark://127.0.0.1:{port}", web_port, home, env)
    finally:
        for process, _ in reversed(processes):
            stop_group(process)
        check_none_left(folder)


def run_drivers(
    runs: Mapping[str, Sequence[str]], env: dict[str, str], folder: Path
) -> dict[str, str]:
    """Run driver processes side by side to their end, each working in ``folder/NAME/``
    with its stdout in ``folder/NAME.out`` and its stderr in ``folder/NAME.err``; return
    their stdout by name."""
    folder.mkdir(exist_ok=True)
    started: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    try:
        for name, command in runs.items():
            cwd = folder / name
            cwd.mkdir()
            out_file, err_file = folder / f"{name}.out", folder / f"{name}.err"
            with out_file.open("wb") as out, err_file.open("wb") as err:
                process = subprocess.Popen(
                    command,
                    stdout=out,
                    stderr=err,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    cwd=cwd,
                    start_new_session=True,
                )
            started[name] = (process, cwd)
        deadline = time.monotonic() + RUN_SECONDS
        for process, _ in started.values():
            process.wait(max(deadline - time.monotonic(), 1.0))
    finally:
        for process, cwd in started.values():
            stop_group(process)  # its JVM too, whatever happened
            check_none_left(cwd)
    for name, (process, _) in started.items():
        err = (folder / f"{name}.err").read_text(errors="replace")
        assert process.returncode == 0, f"{name} exited with {process.returncode}: {err[-3000:]}"
    return {name: (folder / f"{name}.out").read_text() for name in runs}


def summary(stdout: str, out: Path) -> str:
    """The printed summary (from its first line, ``N requests read``: spark-submit prints
    the driver's stderr there too) without what differs from run to run: the times, the
    workers' peak memory and the output folder."""
    start = re.search(r"^[\d,]+ requests read", stdout, re.MULTILINE)
    assert start, stdout[-3000:]
    text = stdout[start.start() :].replace(str(out), "OUT")
    text = re.sub(r"peak RSS: [\d,]+ MiB", "peak RSS: N MiB", text)
    return re.sub(r"\d+(\.\d+)? s\b", "N s", text)


def table(path: Path, keys: Sequence[str]) -> pd.DataFrame:
    """An output folder as pandas; ``requests/`` as a row per request and scenario."""
    frame = read_requests(path) if path.name == "requests" else pd.read_parquet(path)
    return frame.sort_values(list(keys)).reset_index(drop=True)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Small traffic from ``kquota gen-traffic`` and the quota file it suggests, with its
    times rewritten as ISO-8601 text without a zone (read as UTC: see :data:`ZONE`)."""
    folder = tmp_path_factory.mktemp("traffic")
    traffic, quotas = folder / "traffic.parquet", folder / "quotas.json"
    args = ["--requests", str(REQUESTS), "--brokers", "3", "--hours", "1", "--seed", "3"]
    status = cli_main(["gen-traffic", "--out", str(traffic), *args, "--quotas-out", str(quotas)])
    assert status == 0
    table = pq.read_table(traffic)
    millis = table.column("ts_ms").to_numpy().astype("datetime64[ms]")
    iso = pa.array(np.datetime_as_string(millis, unit="ms"))  # 2024-06-03T00:00:00.123
    pq.write_table(table.set_column(table.schema.get_field_index("ts_ms"), "ts_ms", iso), traffic)
    return traffic, quotas


def completed_apps(cluster: Cluster) -> list[dict[str, Any]]:
    state = master_state(cluster.web_port)
    assert not state["activeapps"]
    apps: list[dict[str, Any]] = state["completedapps"]
    return apps


def test_a_standalone_cluster_back_tests_as_local_does(
    cluster: Cluster, generated: tuple[Path, Path], tmp_path: Path
) -> None:
    traffic, quotas = generated
    job = ["--traffic", str(traffic), "--quotas", str(quotas), "--scale", "0.5,1", "--recommend"]
    main_py = Path(kquota_backtest.__file__).with_name("__main__.py")
    runs = {
        "local": [sys.executable, "-m", "kquota.backtest", "--master", "local[*]"],
        "cluster": [str(KQUOTA), "backtest", "--master", cluster.url],
        "submit": [
            str(cluster.spark_home / "bin" / "spark-submit"),
            *("--master", cluster.url, "--conf", SHUFFLE_PARTITIONS),
            *("--conf", f"spark.pyspark.python={sys.executable}"),
            *("--conf", f"spark.pyspark.driver.python={sys.executable}"),
            str(main_py),
        ],
    }
    before = len(completed_apps(cluster))
    # side by side: much of each run is waiting (JVMs starting, tasks being scheduled); the
    # cluster runs the second application when the first is done
    stdout = run_drivers(
        {name: [*command, *job, "--out", str(tmp_path / name)] for name, command in runs.items()},
        cluster.env,
        tmp_path / "drivers",
    )
    ran = completed_apps(cluster)[before:]
    assert [(app["name"], app["cores"]) for app in ran] == [("kquota backtest", 2)] * 2

    request_keys = ("scenario", "_kq_seq_file", "_kq_seq_row")
    entity_keys = ("scenario", "quota_type", "broker", "sensor_user", "sensor_client_id")
    recommendation_keys = ("quota_type", "sensor_user", "sensor_client_id")
    local = tmp_path / "local"
    requests = table(local / "requests", request_keys)
    entities = table(local / "entities", entity_keys)
    recommendations = table(local / "recommendations" / "entities", recommendation_keys)
    printed = summary(stdout["local"], local)
    assert len(requests) == 2 * REQUESTS and (requests["throttle_ms"] > 0).any()
    assert len(recommendations) > 0 and "Recommended quotas" in printed
    for name in ("cluster", "submit"):
        out = tmp_path / name
        pd.testing.assert_frame_equal(table(out / "requests", request_keys), requests)
        pd.testing.assert_frame_equal(table(out / "entities", entity_keys), entities)
        pd.testing.assert_frame_equal(
            table(out / "recommendations" / "entities", recommendation_keys), recommendations
        )
        assert summary(stdout[name], out) == printed
        assert (out / "report.html").is_file()
