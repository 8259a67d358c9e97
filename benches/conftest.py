"""pytest-benchmark set-up: every benchmark group measures kquota and its baseline in the
same run; at the end the ratios are printed and written to ``benches/results/python.json``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

# The pure-Python reference model lives with the tests (it is their second oracle).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from report import machine  # benches/report.py, next to this file

RESULTS = Path(__file__).resolve().parent / "results" / "python.json"


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    bs = getattr(session.config, "_benchmarksession", None)
    if bs is None or not bs.benchmarks:
        return
    by_group: dict[str, dict[str, float]] = {}
    for bench in bs.benchmarks:
        role = bench.extra_info.get("role")
        if role:
            calls = bench.extra_info.get("calls", 1)
            by_group.setdefault(bench.group, {})[role] = bench.stats.median / calls
    rows = []
    for group, roles in sorted(by_group.items()):
        for role, value in roles.items():
            if role == "baseline" or "baseline" not in roles:
                continue
            base = roles["baseline"]
            rows.append(
                {
                    "name": f"{group}/{role}",
                    "value": value * 1e9,
                    "unit": "ns/call",
                    "baseline": f"{group}/baseline",
                    "baseline_value": base * 1e9,
                    "ratio": base / value,
                }
            )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2) + "\n")
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write_line("")
        tr.write_line("benchmark                               kquota ns  baseline ns  speed-up")
        for r in rows:
            tr.write_line(
                f"{r['name']:<38} {r['value']:>10.0f} {r['baseline_value']:>12.0f}"
                f" {r['ratio']:>8.1f}x"
            )
