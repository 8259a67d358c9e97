"""The conformance vectors through Apache Kafka's own quota classes: every expected value
of the frozen vectors (``../shared/conformance`` and the controller-mutation vectors of
``tests/vectors``) is asked of Kafka again, on each pinned release: each scenario becomes a
trace of the oracle, and Kafka's answers must be the file's. kquota must answer every
operation of each vector's scenario as Kafka does (the ``oracle`` fixture is in
``tests/core/conftest.py``)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import paths
import pytest
from kafka_oracle import KafkaOracle, from_bits, release
from oracle_runs import (
    kafka_bare_view,
    kafka_client_view,
    kafka_mutation_view,
    run_client_trace,
    run_mutation_trace,
    run_sensor_trace,
)
from oracle_traces import DEFAULT, Tally, Trace, compare_batch

ROOT: Final = paths.ROOT
SHARED_VECTORS: Final = ROOT.parent / "shared" / "conformance"
KQUOTA_VECTORS: Final = ROOT / "tests" / "vectors"

Reader = Callable[[list[dict[str, Any]]], Any]
"""Reads one expected field from Kafka's answers to the operations of one step."""


def java_int(value: float) -> int:
    """Java's ``(int)`` cast of a double: NaN to 0, truncation, saturation."""
    if math.isnan(value):
        return 0
    if value >= 2**31 - 1:
        return 2**31 - 1
    if value <= -(2**31):
        return -(2**31)
    return math.trunc(value)


def _scenario_entity(user: str | None, client_id: str | None) -> dict[str, str | None]:
    def spec(name: str | None) -> str | None:
        return None if name is None else ("D" if name == DEFAULT else f"N:{name}")

    return {"eu": spec(user), "ec": spec(client_id)}


def _double(answer_key: str, op_index: int) -> Reader:
    def read(answers: list[dict[str, Any]]) -> Any:
        value = answers[op_index][answer_key]
        return (
            None if value is None else ("NaN" if math.isnan(from_bits(value)) else from_bits(value))
        )

    return read


def _plain(answer_key: str, op_index: int, convert: Callable[[Any], Any] = lambda v: v) -> Reader:
    return lambda answers: convert(answers[op_index][answer_key])


class ScenarioTrace:
    """A vector's steps as oracle operations, and where each expected field is answered."""

    def __init__(self, family: str, config: dict[str, Any], start: int) -> None:
        self.trace = Trace(family, config, start, [])
        self.readers: list[tuple[int, dict[str, Reader]]] = []  # (step, field -> reader)

    def add(self, op: dict[str, Any]) -> int:
        self.trace.ops.append(op)
        return len(self.trace.ops) - 1


def client_scenario(doc: dict[str, Any]) -> ScenarioTrace:
    """Section 12's produce, fetch and request ops as the broker does them."""
    qt, steps = doc["quota_type"], doc["steps"]
    start = steps[0]["t_ms"]
    run = ScenarioTrace(
        "client",
        {"samples": doc["config"]["num_samples"], "window_s": doc["config"]["window_ms"] // 1000},
        start,
    )
    for quota in doc["quotas"]:
        run.add(
            {
                "op": "set",
                "t": start,
                "m": qt,
                **_scenario_entity(quota["user"], quota["client_id"]),
                "q": quota["value"],
            }
        )
    enabled = bool(doc["quotas"])
    rids = 0
    for number, step in enumerate(steps):
        t, kind, expect = step["t_ms"], step["op"], step.get("expect", {})
        client = {"u": step.get("user"), "c": step.get("client_id")}
        run.add({"op": "drain", "t": t, "m": qt})  # the reaper, before every step
        readers: dict[str, Reader] = {}
        if kind in ("record", "record_raw"):
            op: dict[str, Any] = {"op": "record", "t": t, "m": qt, **client}
            if qt == "request":
                op.update(ns=int(step["value"]), rid=rids)
                rids += 1
            else:
                op["v"] = step["value"]
            if kind == "record":
                op["ch"] = 1
                if qt == "fetch":
                    op["unrec"] = True
            readers["throttle_ms"] = _plain("th", run.add(op))
        elif kind == "unrecord":
            run.add({"op": "unrecord", "t": t, "m": qt, **client, "v": step["value"]})
        elif kind == "record_no_throttle":
            if enabled:  # Kafka installs the network-thread callback only with quotas on
                value = {"ns": int(step["value"])} if qt == "request" else {"v": step["value"]}
                run.add({"op": "nothrottle", "t": t, "m": qt, **client, **value})
        elif kind in ("set_quota", "remove_quota"):
            op = {"op": "set" if kind == "set_quota" else "remove", "t": t, "m": qt}
            op.update(_scenario_entity(step["user"], step["client_id"]))
            if kind == "set_quota":
                op["q"] = step["value"]
            run.add(op)
            enabled = True
        elif kind == "max_value_in_quota_window":
            index = run.add({"op": "maxval", "t": t, "m": qt, **client})
            readers["value"] = _double("v", index)
            readers["as_int"] = lambda answers, index=index: java_int(
                from_bits(answers[index]["v"])
            )
        elif kind == "expire_sensors":
            readers["removed"] = _plain("removed", run.add({"op": "expire", "t": t}))
        elif kind == "metrics":
            index = run.add({"op": "read", "t": t, "m": qt, **client, "fields": ["tavg"]})
            readers["throttle_time_avg"] = _double("tavg", index)
            readers["queue_size"] = _plain("n", run.add({"op": "qsize", "t": t, "m": qt}))
        if kind in ("record", "record_raw", "measure", "metrics"):
            wanted = [
                f
                for f in ("tags", "bound", "rate")
                if {"tags": "tags", "bound": "quota", "rate": "rate"}[f] in expect
            ]
            if kind in ("measure", "metrics") and "rate" not in wanted:
                wanted.append("rate")  # the op itself measures
            index = run.add({"op": "read", "t": t, "m": qt, **client, "fields": wanted})
            if "tags" in wanted:
                readers["tags"] = lambda answers, index=index: dict(
                    zip(("user", "client-id"), answers[index]["tags"], strict=True)
                )
            if "bound" in wanted:
                readers["quota"] = _double("bound", index)
            if "rate" in wanted:
                readers["rate"] = _double("rate", index)
        if expect:
            run.readers.append((number, {k: readers[k] for k in expect}))
    return run


def sensor_scenario(doc: dict[str, Any]) -> ScenarioTrace:
    steps = doc["steps"]
    bound = doc["quotas"][0]["value"] if doc["quotas"] else None
    config = {
        "samples": doc["config"]["num_samples"],
        "window_ms": doc["config"]["window_ms"],
        "q": bound,
    }
    run = ScenarioTrace("sensor", config, steps[0]["t_ms"])
    for number, step in enumerate(steps):
        t, kind, expect = step["t_ms"], step["op"], step.get("expect", {})
        readers: dict[str, Reader] = {}
        if kind == "record":
            index = run.add({"op": "rec", "t": t, "v": step["value"]})
            readers["throttle_ms"] = _plain("th", index)
            readers["violated"] = _plain("viol", index)
            readers["rate"] = _double("rate", run.add({"op": "measure", "t": t}))
        elif kind == "record_no_check":
            run.add({"op": "rec_nc", "t": t, "v": step["value"]})
        elif kind == "measure":
            readers["rate"] = _double("rate", run.add({"op": "measure", "t": t}))
        else:
            run.add({"op": "setq", "t": t, "q": step.get("value") if kind == "set_quota" else None})
        if expect:
            run.readers.append((number, {k: readers[k] for k in expect}))
    return run


def mutation_scenario(doc: dict[str, Any]) -> ScenarioTrace:
    steps = doc["steps"]
    start = steps[0]["t_ms"]
    config = {
        "samples": doc["config"]["num_samples"],
        "window_s": doc["config"]["window_ms"] // 1000,
    }
    run = ScenarioTrace("mutation", config, start)
    for quota in doc["quotas"]:
        run.add(
            {
                "op": "set",
                "t": start,
                **_scenario_entity(quota["user"], quota["client_id"]),
                "q": quota["value"],
            }
        )
    requests: dict[str, int] = {}
    for number, step in enumerate(steps):
        t, kind, expect = step["t_ms"], step["op"], step.get("expect", {})
        client = {"u": step.get("user"), "c": step.get("client_id")}
        readers: dict[str, Reader] = {}
        if kind == "record":
            readers["throttle_ms"] = _plain(
                "th", run.add({"op": "record", "t": t, **client, "v": step["value"]})
            )
        elif kind == "request":
            requests[step["request"]] = len(requests)
            index = run.add(
                {
                    "op": "rq_open",
                    "t": t,
                    **client,
                    "strict": step["strict"],
                    "rid": requests[step["request"]],
                }
            )
            readers["exceeded"] = _plain("exc", index)
        elif kind == "request_record":
            index = run.add(
                {"op": "rq_record", "t": t, "rid": requests[step["request"]], "v": step["value"]}
            )
            readers.update(
                accepted=_plain("ok", index),
                exceeded=_plain("exc", index),
                throttle_time_ms=_plain("th", index),
            )
        elif kind == "request_throttle_time":
            readers["throttle_time_ms"] = _plain(
                "th", run.add({"op": "rq_throttle", "t": t, "rid": requests[step["request"]]})
            )
        elif kind == "throttle":
            run.add(
                {
                    "op": "throttle",
                    "t": t,
                    **client,
                    "ms": step["throttle_ms"],
                    "ch": step["channel"],
                }
            )
            readers["queue_size"] = _plain("n", run.add({"op": "qsize", "t": t}), int)
        elif kind == "drain":
            readers["channels"] = _plain("ch", run.add({"op": "drain", "t": t}))
            readers["queue_size"] = _plain("n", run.add({"op": "qsize", "t": t}), int)
        elif kind == "sensors":
            readers["names"] = _plain("names", run.add({"op": "sensors", "t": t}))
        elif kind in ("set_quota", "remove_quota"):
            op = {"op": "set" if kind == "set_quota" else "remove", "t": t}
            op.update(_scenario_entity(step["user"], step["client_id"]))
            if kind == "set_quota":
                op["q"] = step["value"]
            run.add(op)
        if expect:
            run.readers.append((number, {k: readers[k] for k in expect}))
    return run


def _vector_files() -> list[Path]:
    shared = sorted(SHARED_VECTORS.glob("*.json"))
    mutation = [
        path
        for path in sorted(KQUOTA_VECTORS.glob("*.json"))
        if json.loads(path.read_text(encoding="utf-8"))["quota_type"] == "controller_mutation"
    ]
    return shared + mutation


def _expected(value: Any) -> Any:
    if value == "NaN" or (isinstance(value, float) and math.isnan(value)):
        return "NaN"
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return sorted(value)
    return value


def _changed_in(doc: dict[str, Any]) -> tuple[int, int] | None:
    """The first Kafka release whose answers to a vector differ from its expectations, or
    None. The vectors record Kafka at one commit (4.1's behaviour); the spec marks those
    that KAFKA-19282 (4.2: a quota level turns off with its last quota) changes
    "Version-sensitive"; from 4.4 a produce or fetch throttle past 2**31 - 1 ms saturates
    instead of wrapping, which changes the int-overflow vector."""
    if "Version-sensitive" in doc["description"]:
        return (4, 2)
    if doc["name"] == "produce_tiny_quota_int_overflow":
        return (4, 4)
    return None


_RUNNERS: Final = {
    "client": lambda: (run_client_trace, kafka_client_view),
    "mutation": lambda: (run_mutation_trace, kafka_mutation_view),
    "sensor": lambda: (run_sensor_trace, kafka_bare_view),
}


@pytest.mark.parametrize("path", _vector_files(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_vector_expectations_are_kafkas_answers(oracle: KafkaOracle, path: Path) -> None:
    """The vector's every expected value is what Kafka's classes answer, on every release
    before the one that changed the behaviour it records; from that release on Kafka
    answers otherwise somewhere. Either way kquota, following the oracle's release,
    answers every operation of the vector's scenario as Kafka does."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    build = {"sensor": sensor_scenario, "controller_mutation": mutation_scenario}.get(
        doc["quota_type"], client_scenario
    )
    run = build(doc)
    (answers,) = oracle.run([run.trace.wire()])
    assert not [a for a in answers if "err" in a], answers
    changed = _changed_in(doc)
    still = changed is None or release(oracle.version) < changed
    compared, differing = 0, []
    for number, readers in run.readers:
        for key, read in readers.items():
            want, got = _expected(doc["steps"][number]["expect"][key]), _expected(read(answers))
            step = f"step {number} ({doc['steps'][number]['op']})"
            if still:
                assert got == want, f"{step}: {key}: Kafka says {got!r}, the vector {want!r}"
            elif got != want:
                differing.append(f"{step}: {key}: Kafka {oracle.version} {got!r}, vector {want!r}")
            compared += 1
    assert compared > 0
    assert still or differing, f"Kafka {oracle.version} answers every expectation as the vector"
    runner, view = _RUNNERS[run.trace.family]()
    tally = Tally()
    compare_batch(oracle, [run.trace], runner, view, tally)
    assert tally.operations == len(run.trace.ops)
