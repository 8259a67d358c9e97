"""pytest-benchmark set-up: every benchmark group measures kquota and its baselines in the
same run; at the end the ratios are printed and written to ``benches/results/python.json``.

In a group, the benchmark whose ``extra_info["role"]`` is ``kquota`` is the subject and
every other role is a baseline: one row per baseline, ``ratio = baseline / kquota``
(above 1: kquota is faster). A benchmark with ``extra_info["subject"]`` true is a subject
too (another way of running kquota): it has a row against each
baseline and one against ``kquota``. ``extra_info["calls"]`` is the number of calls a round makes,
so values are per call. A group whose benchmarks give ``extra_info["unit"]`` recorded
values in that unit rather than seconds (e.g. a rate, or milliseconds of throttle): they
are shown as they are.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The pure-Python reference model lives with the tests (it is their second oracle).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from quick import MODE  # benches/quick.py, next to this file
from report import machine  # benches/report.py, next to this file

RESULTS = Path(__file__).resolve().parent / "results" / "python.json"
SUBJECT = "kquota"
DETAILS = ("worker_peak_rss_mib",)
"""``extra_info`` keys of the subject that its rows carry (shown under the table)."""


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """A local[2] SparkSession for one bench module (the Spark benches)."""
    from kquota.backtest.session import spark_session

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session, created = spark_session("local[2]", "kquota bench")
    yield session
    if created:
        session.stop()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    bs = getattr(session.config, "_benchmarksession", None)
    if bs is None or not bs.benchmarks:
        return
    by_group: dict[str, dict[str, float]] = {}
    units: dict[str, tuple[str, float]] = {}  # group: (unit, scale from a round's value)
    subjects: dict[str, list[str]] = {}  # group: its subjects, kquota first
    details: dict[tuple[str, str], dict[str, Any]] = {}  # a subject's DETAILS, into its rows
    for bench in bs.benchmarks:
        role = bench.extra_info.get("role")
        if role and not bench.stats.data:
            continue  # the benchmark failed before it measured: pytest reports that failure
        if role:
            calls = bench.extra_info.get("calls", 1)
            by_group.setdefault(bench.group, {})[role] = bench.stats.median / calls
            unit = bench.extra_info.get("unit")
            units[bench.group] = ("ns/call", 1e9) if unit is None else (unit, 1.0)
            if role == SUBJECT or bench.extra_info.get("subject"):
                group_subjects = subjects.setdefault(bench.group, [])
                group_subjects.insert(0 if role == SUBJECT else len(group_subjects), role)
                details[bench.group, role] = {
                    k: v for k, v in bench.extra_info.items() if k in DETAILS
                }
    rows: list[dict[str, Any]] = []
    for group, roles in sorted(by_group.items()):
        unit, scale = units[group]
        for subject in subjects.get(group, []):
            value = roles[subject]
            for role, base in roles.items():
                # a subject's baselines: every role but the subjects, and kquota for the others
                if role in subjects[group] and (role != SUBJECT or subject == SUBJECT):
                    continue
                rows.append(
                    {
                        "name": f"{group}/{subject}",
                        "value": value * scale,
                        "unit": unit,
                        "baseline": f"{group}/{role}",
                        "baseline_value": base * scale,
                        "ratio": base / value if value else float("inf"),
                        **details.get((group, subject), {}),
                    }
                )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps({"machine": machine(), "mode": MODE, "rows": rows}, indent=2) + "\n"
    )
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write_line("")
        tr.write_line(f"{'benchmark':<50} {'kquota':>10} {'baseline':<30} {'value':>9}  ratio")
        for r in rows:
            tr.write_line(
                f"{r['name']:<50} {r['value']:>10.4g} {r['baseline'].rsplit('/', 1)[1]:<30}"
                f" {r['baseline_value']:>9.4g} {r['ratio']:>6.2f}x  {r['unit']}"
            )
