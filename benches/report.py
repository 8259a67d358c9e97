"""Collects the latest benchmark run (criterion, the memory bench and pytest-benchmark) into
``benches/results/latest.json`` and the table in ``benches/README.md`` between the bench
markers, and prints the table. The project's README.md is never written.

Every row compares kquota with one baseline measured in the same run. Where the project
sets a target for a number, the row says what it is and whether this run met it
(``target``, ``target_value`` in the row's unit, ``met``).
Run by ``make bench`` and ``make bench-quick`` after the benchmarks; safe to run again on
its own. ``--from-latest`` writes the table again from ``benches/results/latest.json``
without reading any benchmark output (after a change to the table's format).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from quick import MODE

ROOT = Path(__file__).resolve().parents[1]
CRITERION = ROOT / "target" / "criterion"
PYTHON_RESULTS = ROOT / "benches" / "results" / "python.json"
LATEST = ROOT / "benches" / "results" / "latest.json"
BENCH_README = ROOT / "benches" / "README.md"
"""Where the table goes: between :data:`START` and :data:`END`."""
START, END = "<!-- bench:start -->", "<!-- bench:end -->"
MEMORY = ROOT / "target" / "kquota-bench" / "memory.json"
SUBJECT = "kquota"
"""Each group holds ``kquota`` and one or more baselines measured in the same run."""
SENSOR_BYTES = "bytes_per_sensor"

Row = dict[str, Any]


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


def row(name: str, value: float, unit: str, baseline: str, base: float, **extra: Any) -> Row:
    return {
        "name": name,
        "value": value,
        "unit": unit,
        "baseline": baseline,
        "baseline_value": base,
        "ratio": base / value if value else float("inf"),
        **extra,
    }


def criterion_rows() -> list[Row]:
    rows: list[Row] = []
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
        value = medians.pop(SUBJECT)
        for baseline, base in sorted(medians.items()):
            rows.append(
                row(
                    f"core/{group.name}/{SUBJECT}",
                    value,
                    "ns/op",
                    f"core/{group.name}/{baseline}",
                    base,
                )
            )
    return rows


def memory_rows() -> list[Row]:
    """Bytes per live sensor against the locked map, any variant the memory bench adds
    (``bytes_per_sensor_<variant>``, against ``baseline_bytes_per_sensor_<variant>`` if it
    is there), and the bytes left once every sensor expired against the bytes while live."""
    if not MEMORY.is_file():
        return []
    m = json.loads(MEMORY.read_text())
    group = f"core/memory_{m['entities']}_entities"
    rows = []
    for key in sorted(k for k in m if k.startswith(SENSOR_BYTES)):
        variant = key[len(SENSOR_BYTES) :]
        base = m.get(f"baseline_{key}", m[f"baseline_{SENSOR_BYTES}"])
        rows.append(
            row(
                f"{group}{variant}/{SUBJECT}",
                m[key],
                "bytes/sensor",
                f"{group}{variant}/locked_map",
                base,
                **({"bytes_after_expiry": m["bytes_after_expiry"]} if not variant else {}),
            )
        )
    if "bytes_after_expiry" in m:
        live = m[SENSOR_BYTES] * m["entities"]
        rows.append(
            row(
                f"{group}_expired/{SUBJECT}",
                m["bytes_after_expiry"],
                "bytes",
                f"{group}/live",
                live,
            )
        )
    return rows


def python_rows() -> tuple[list[Row], str | None]:
    if not PYTHON_RESULTS.is_file():
        return [], None
    results = json.loads(PYTHON_RESULTS.read_text())
    rows = [
        dict(r, name=f"python/{r['name']}", baseline=f"python/{r['baseline']}")
        for r in results["rows"]
    ]
    return rows, results.get("mode")


# -- targets -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A target on kquota's value in rows matching ``name`` and ``baseline`` (globs): the
    value must be at most ``limit(row)``, in the row's unit."""

    name: str
    baseline: str
    text: str
    limit: Callable[[Row], float]
    relative: bool = False
    """The bound comes from the baseline's value in the same run (shown with the target)."""


def at_most(bound: float) -> Callable[[Row], float]:
    return lambda r: bound


def times_faster(factor: float) -> Callable[[Row], float]:
    return lambda r: float(r["baseline_value"]) / factor


def added_at_most(bound: float) -> Callable[[Row], float]:
    """At most ``bound`` (in the row's unit) above the baseline's value."""
    return lambda r: float(r["baseline_value"]) + bound


TARGETS = [
    # absolute times go on the row against the floor, which puts them in context
    Target("python/record_one_entity/kquota", "*/floor", "<= 120 ns", at_most(120)),
    Target("python/record_10k_entities/kquota", "*/floor", "<= 250 ns", at_most(250)),
    Target("python/record_*/kquota", "*/limits_*", ">= 20x faster", times_faster(20), True),
    Target("core/one_thread_one_key/kquota", "*/mutex_baseline", "<= 40 ns", at_most(40)),
    Target(
        "core/one_thread_one_key/kquota",
        "*/governor_keyed",
        "<= 3x governor's time",
        times_faster(1 / 3),
        True,
    ),
    Target("core/memory_*_entities*/kquota", "*/locked_map", "<= 256 bytes", at_most(256)),
    # the core's structure across many keys, and what expiry leaves
    Target(
        "core/one_thread_10k_keys/kquota",
        "*/governor_keyed",
        "<= governor's time",
        times_faster(1),
        True,
    ),
    Target("core/memory_*_entities_expired/kquota", "*/live", "<= 10 MB", at_most(10_000_000)),
    # the replay kernel at >= 50 M requests/s on one core
    Target(
        "core/replay_open_10k_entities/kquota",
        "*/request_path",
        "<= 20 ns (>= 50 M requests/s)",
        at_most(20),
    ),
    # Spark end to end on local[2] (benches/test_backtest_floor.py), both timed as whole
    # processes on the same traffic, against the floor job (benches/floor_job.py)
    Target(
        "python/backtest_floor_1_scenario/kquota",
        "*/floor_job",
        "<= 2x the floor job's time",
        times_faster(1 / 2),
        True,
    ),
    Target(
        "python/backtest_floor_3_scenarios/kquota",
        "*/floor_job",
        "<= 3x the floor job's time",
        times_faster(1 / 3),
        True,
    ),
    # Kafka's request log on local[2] (benches/test_request_log.py), whole processes
    Target(
        "python/request_log_import/kquota",
        "*/text_copy_job",
        "<= 2x the text copy's time",
        times_faster(1 / 2),
        True,
    ),
    Target(
        "python/request_log_backtest/kquota",
        "*/import_then_backtest",
        "<= 1.1x import then back-test",
        times_faster(1 / 1.1),
        True,
    ),
    # `kquota proxy` (benches/test_proxy.py), against the producer direct to the broker and
    # the plain Rust relay, in the same run
    Target(
        "python/proxy_produce_1kib/kquota",
        "*/direct",
        ">= 0.95x direct's throughput",
        times_faster(0.95),
        True,
    ),
    Target(
        "python/proxy_produce_1kib/kquota",
        "*/rust_relay",
        ">= 0.95x rust_relay's throughput",
        times_faster(0.95),
        True,
    ),
    Target(
        "python/proxy_produce_1kib/gateway",
        "*/direct",
        ">= 0.95x direct's throughput",
        times_faster(0.95),
        True,
    ),
    Target(
        "python/proxy_produce_latency_p99/kquota",
        "*/direct",
        "p99 <= direct's + 0.1 ms",
        added_at_most(100_000),
        True,
    ),
    Target(
        "python/proxy_cpu_per_request/kquota",
        "*/rust_relay",
        "<= rust_relay's",
        times_faster(1),
        True,
    ),
]


def apply_targets(rows: list[Row]) -> None:
    for r in rows:
        for t in TARGETS:
            if fnmatchcase(r["name"], t.name) and fnmatchcase(r["baseline"], t.baseline):
                r["target"] = t.text
                r["target_relative"] = t.relative
                r["target_value"] = t.limit(r)
                r["met"] = r["value"] <= r["target_value"]
                break


# -- the table --------------------------------------------------------------------------------


def number(x: float) -> str:
    return f"{x:,.1f}" if abs(x) < 100 else f"{x:,.0f}"


def ratio(x: float) -> str:
    return f"{x:.2f}x" if x < 1 else f"{x:.1f}x" if x < 10 else f"{x:,.0f}x"


def target_cells(r: Row) -> tuple[str, str]:
    """The target (with the bound it sets in this run if it is relative) and the result."""
    if "target" not in r:
        return "", ""
    unit = r["unit"].split("/", 1)[0]
    target = r["target"]
    if r["target_relative"]:
        target += f" (<= {number(r['target_value'])} {unit})"
    if r["met"]:
        return target, "met"
    over = r["value"] - r["target_value"]
    return target, f"missed by {number(over)} {unit} ({over / r['target_value']:.0%})"


GROUP_WORDS = {
    "record_one_entity": "for one entity",
    "record_10k_entities": "across 10 000 entities",
}


def floor_note(rows: list[Row]) -> str:
    """How far kquota's ``record`` is above the floor, in words under the table."""
    parts = []
    for r in rows:
        if r["name"].startswith("python/") and r["baseline"].endswith("/floor"):
            group = r["name"].split("/")[1]
            parts.append(
                f"{number(r['value'] - r['baseline_value'])} ns "
                f"{GROUP_WORDS.get(group, f'in `{group}`')} "
                f"({number(r['value'])} ns against {number(r['baseline_value'])} ns)"
            )
    if not parts:
        return ""
    return (
        "\n\nThe floor is `_bench_noop_record`: a call into the same extension with the "
        "same arguments, parsed as `record` parses them, nothing done. kquota's `record` "
        "takes " + " and ".join(parts) + " more than the floor."
    )


def memory_note(rows: list[Row]) -> str:
    """The Python workers' peak memory of the back-test rows that measured it."""
    parts = [
        f"{number(r['worker_peak_rss_mib'])} MiB in `{r['name'].split('/')[1]}`"
        for r in rows
        if "worker_peak_rss_mib" in r
    ]
    if not parts:
        return ""
    return (
        "\n\nPeak resident memory of the back-test's Python workers (largest `VmHWM` of "
        "the workers that replayed; Spark's default memory settings): " + ", ".join(parts) + "."
    )


def table(rows: list[Row], info: dict[str, Any], mode: str) -> str:
    run = (
        "Full run (`make bench`)"
        if mode == "full"
        else "Quick run (`make bench-quick`: shorter criterion times, fewer rounds, smaller "
        "Spark inputs)"
    )
    lines = [
        f"{run} on {info['cpu']} ({info['cores']} cores), Python {info['python']}, "
        f"{info['platform']}. Ratio = baseline / kquota, both from the same run (above 1: "
        "kquota is faster or smaller). A relative target shows the bound it sets in this run.",
        "",
        "| benchmark | kquota | baseline (same run) | ratio | target | result |",
        "|---|---:|---:|---:|---|---|",
    ]
    for r in rows:
        target, result = target_cells(r)
        lines.append(
            f"| `{r['name']}` | {number(r['value'])} {r['unit']} "
            f"| {number(r['baseline_value'])} {r['unit']} (`{r['baseline'].rsplit('/', 1)[1]}`) "
            f"| {ratio(r['ratio'])} | {target} | {result} |"
        )
    return "\n".join(lines) + floor_note(rows) + memory_note(rows)


class MarkersMissing(Exception):
    """The README to write has no bench markers."""


def write_table(text: str, readme: Path) -> None:
    """Put ``text`` between the bench markers of ``readme``; everything else stays."""
    content = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    if (
        content.count(START) != 1
        or content.count(END) != 1
        or content.index(START) > content.index(END)
    ):
        raise MarkersMissing(f"{readme} has no {START} ... {END} section for the table")
    head, rest = content.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{START}\n{text}\n{END}{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument(
        "--from-latest",
        action="store_true",
        help=f"write the table from {LATEST.relative_to(ROOT)} only",
    )
    args = parser.parse_args(argv)
    if args.from_latest:
        latest = json.loads(LATEST.read_text(encoding="utf-8"))
        rows, info, mode = latest["rows"], latest["machine"], latest["mode"]
    else:
        py_rows, py_mode = python_rows()
        rows = criterion_rows() + memory_rows() + py_rows
        if not rows:
            print("no benchmark results found: run `make bench` first", file=sys.stderr)
            return 1
        mode = py_mode or MODE  # how the Python benchmarks were run, else how this is run
        apply_targets(rows)
        info = machine()
        LATEST.parent.mkdir(parents=True, exist_ok=True)
        document = {"machine": info, "mode": mode, "rows": rows}
        LATEST.write_text(json.dumps(document, indent=2) + "\n")
    text = table(rows, info, mode)
    print(text)
    missed = [r for r in rows if r.get("met") is False]
    print(f"\ntargets: {sum(r.get('met') is True for r in rows)} met, {len(missed)} missed")
    try:
        write_table(text, BENCH_README)
    except MarkersMissing as exc:
        print(f"report.py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
