"""Collects the latest benchmark run (criterion and pytest-benchmark) into
``benches/results/latest.json`` and the table in README.md between the bench markers.

Every row compares kquota with the baseline measured in the same run.
Run by ``make bench`` after the benchmarks; safe to run again on its own.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CRITERION = ROOT / "target" / "criterion"
PYTHON_RESULTS = ROOT / "benches" / "results" / "python.json"
LATEST = ROOT / "benches" / "results" / "latest.json"
README = ROOT / "README.md"
START, END = "<!-- bench:start -->", "<!-- bench:end -->"
CRITERION_BASELINE = "mutex_baseline"


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def criterion_rows() -> list[dict[str, Any]]:
    rows = []
    if not CRITERION.is_dir():
        return rows
    for group in sorted(p for p in CRITERION.iterdir() if p.is_dir() and p.name != "report"):
        medians = {}
        for fn in group.iterdir():
            estimates = fn / "new" / "estimates.json"
            if estimates.is_file():
                medians[fn.name] = json.loads(estimates.read_text())["median"]["point_estimate"]
        base = medians.get(CRITERION_BASELINE)
        for name, value in sorted(medians.items()):
            if name == CRITERION_BASELINE or base is None:
                continue
            rows.append(
                {
                    "name": f"core/{group.name}/{name}",
                    "value": value,
                    "unit": "ns/op",
                    "baseline": f"core/{group.name}/{CRITERION_BASELINE}",
                    "baseline_value": base,
                    "ratio": base / value,
                }
            )
    return rows


def python_rows() -> list[dict[str, Any]]:
    if not PYTHON_RESULTS.is_file():
        return []
    return [
        dict(row, name=f"python/{row['name']}", baseline=f"python/{row['baseline']}")
        for row in json.loads(PYTHON_RESULTS.read_text())["rows"]
    ]


def table(rows: list[dict[str, Any]], info: dict[str, Any]) -> str:
    lines = [
        f"Measured on {info['cpu']} ({info['cores']} cores), Python {info['python']}, "
        f"{info['platform']}. Speed-up = baseline time / kquota time, both from the same run.",
        "",
        "| benchmark | kquota | baseline (same run) | speed-up |",
        "|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['name']}` | {r['value']:.0f} {r['unit']} "
            f"| {r['baseline_value']:.0f} {r['unit']} (`{r['baseline'].rsplit('/', 1)[1]}`) "
            f"| {r['ratio']:.1f}x |"
        )
    return "\n".join(lines)


def main() -> int:
    rows = criterion_rows() + python_rows()
    if not rows:
        print("no benchmark results found: run `make bench` first", file=sys.stderr)
        return 1
    info = machine()
    LATEST.parent.mkdir(parents=True, exist_ok=True)
    LATEST.write_text(json.dumps({"machine": info, "rows": rows}, indent=2) + "\n")
    text = README.read_text()
    if START in text and END in text:
        head, rest = text.split(START, 1)
        _, tail = rest.split(END, 1)
        README.write_text(f"{head}{START}\n{table(rows, info)}\n{END}{tail}")
    print(table(rows, info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
