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
MEMORY = ROOT / "target" / "kquota-bench" / "memory.json"
SUBJECT = "kquota"
"""Each criterion group holds ``kquota`` and one or more baselines measured in the same run."""


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
    rows: list[dict[str, Any]] = []
    if not CRITERION.is_dir():
        return rows
    for group in sorted(p for p in CRITERION.iterdir() if p.is_dir() and p.name != "report"):
        medians = {}
        for fn in group.iterdir():
            estimates = fn / "new" / "estimates.json"
            if estimates.is_file():
                medians[fn.name] = json.loads(estimates.read_text())["median"]["point_estimate"]
        if SUBJECT not in medians:
            continue
        value = medians[SUBJECT]
        for baseline, base in sorted(medians.items()):
            if baseline == SUBJECT:
                continue
            rows.append(
                {
                    "name": f"core/{group.name}/{SUBJECT}",
                    "value": value,
                    "unit": "ns/op",
                    "baseline": f"core/{group.name}/{baseline}",
                    "baseline_value": base,
                    "ratio": base / value,
                }
            )
    return rows


def memory_rows() -> list[dict[str, Any]]:
    if not MEMORY.is_file():
        return []
    m = json.loads(MEMORY.read_text())
    return [
        {
            "name": f"core/memory_{m['entities']}_entities/{SUBJECT}",
            "value": m["bytes_per_sensor"],
            "unit": "bytes/sensor",
            "baseline": f"core/memory_{m['entities']}_entities/locked_map",
            "baseline_value": m["baseline_bytes_per_sensor"],
            "ratio": m["baseline_bytes_per_sensor"] / m["bytes_per_sensor"],
            "bytes_after_expiry": m["bytes_after_expiry"],
        }
    ]


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
        f"{info['platform']}. Ratio = baseline / kquota, both from the same run (above 1: kquota "
        "is faster or smaller).",
        "",
        "| benchmark | kquota | baseline (same run) | ratio |",
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
    rows = criterion_rows() + memory_rows() + python_rows()
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
