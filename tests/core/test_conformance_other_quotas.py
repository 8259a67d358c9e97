"""``kquota conformance`` over ``tests/vectors``: the token bucket, KIP-599 and KIP-612.

Each vector's expected values come from one of Kafka's own tests (named in the file); the
Rust core replays them in ``rust/kquota-core/tests/vectors.rs``, and here the same files go
through the binding and the command line. A runner that skipped an expectation would still
say "ok", so every expected value of every vector is also changed once and must be caught.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paths
import pytest
import reference_model
from kquota.cli import main
from kquota.conformance import AdminScenario, expand_paths, load, load_admin, replay
from kquota.exceptions import ScenarioError
from scenario_files import write_changed, write_json

VECTORS = paths.VECTORS
FILES = sorted(VECTORS.glob("*.json"))


def test_every_vector_matches_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert len(FILES) >= 19
    assert main(["conformance", str(VECTORS)]) == 0
    out = capsys.readouterr().out
    assert out.endswith(f"{len(FILES)}/{len(FILES)} scenarios match\n")
    assert out.count("ok   ") == len(FILES)


@pytest.mark.parametrize("path", FILES, ids=[path.stem for path in FILES])
def test_vector_replays_with_every_expectation_checked(path: Path) -> None:
    scenario = load(path)
    assert isinstance(scenario, AdminScenario)
    assert scenario.kafka_test, f"{path.name} names no Kafka test"
    result = replay(scenario)
    assert result.ok, f"{result.name}: {result.mismatch}"
    assert result.checked > 0


def _expectations(document: dict[str, Any]) -> Iterator[tuple[int, list[Any], str]]:
    """(step, path to the expect object, field) of every expected value in a vector."""
    for index, step in enumerate(document["steps"]):
        if "expect" in step:
            yield from _leaves(index, ["steps", index, "expect"], step["expect"], "")
        for n, loop in enumerate(step.get("loops", [])):
            for key in loop.get("expect", {}):
                yield index, ["steps", index, "loops", n, "expect"], key


def _leaves(
    index: int, where: list[Any], expect: dict[str, Any], prefix: str
) -> Iterator[tuple[int, list[Any], str]]:
    for key, value in expect.items():
        if isinstance(value, dict) and key != "rate":
            yield from _leaves(index, [*where, key], value, f"{prefix}{key}.")
        else:
            yield index, where, key


def _changed(key: str, value: Any) -> Any:
    """An expected value no correct output can equal."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1000
    if isinstance(value, float):
        return value + 1000.5
    if isinstance(value, list):
        return [*value, "extra" if key == "names" else 987654]
    if isinstance(value, dict):  # a rate within an epsilon
        return {"value": value["value"] + 3 * value["epsilon"] + 1, "epsilon": value["epsilon"]}
    if value is None:
        return 12345.0
    raise AssertionError(f"no change for {value!r}")


def test_every_expected_value_is_compared(tmp_path: Path) -> None:
    changes = 0
    for path in FILES:
        document = json.loads(path.read_text(encoding="utf-8"))
        for index, where, key in _expectations(document):
            broken = copy.deepcopy(document)
            target: Any = broken
            for part in where:
                target = target[part]
            target[key] = _changed(key, target[key])
            result = replay(load_admin(write_json(tmp_path / path.name, broken)))
            assert result.mismatch is not None, f"{path.name} step {index}: {key} unchecked"
            assert result.mismatch.step == index, f"{path.name}: {result.mismatch}"
            assert result.mismatch.field.endswith(key), f"{path.name}: {result.mismatch}"
            changes += 1
    assert changes >= 100


def test_a_mismatch_is_reported_on_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads((VECTORS / "token_bucket_kafka_test_record.json").read_text())
    document["steps"][2]["expect"]["tokens"] = 41.0
    write_json(tmp_path / "bucket.json", document)
    assert main(["conformance", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL token_bucket_kafka_test_record  step 2 (measure at 1700000000000): " in out
    assert "tokens expected 41.0 got 40.0" in out
    assert out.endswith("0/1 scenarios match\n")


def test_both_families_in_one_run(capsys: pytest.CaptureFixture[str]) -> None:
    shared = paths.SHARED_VECTORS
    total = len(expand_paths([VECTORS, shared]))
    assert main(["conformance", str(VECTORS), str(shared)]) == 0
    assert capsys.readouterr().out.endswith(f"{total}/{total} scenarios match\n")


def test_an_admin_scenario_replays_against_kquota_only() -> None:
    scenario = load(VECTORS / "controller_mutation_strict_quota.json")
    with pytest.raises(ScenarioError, match="replays against kquota only"):
        replay(scenario, backend=reference_model)


BASE: dict[str, Any] = {
    "format": 1,
    "name": "bad",
    "quota_type": "controller_mutation",
    "config": {"num_samples": 10, "window_ms": 1000},
    "quotas": [{"user": "u", "client_id": None, "value": 10.0}],
    "steps": [{"t_ms": 0, "op": "record", "user": "u", "client_id": "c", "value": 1.0}],
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["steps"][0].update(op="explode"), r"steps\[0\]\.op: expected one of record"),
        (lambda d: d["steps"][0].pop("user"), r"steps\[0\]: missing field 'user'"),
        (lambda d: d["steps"][0].update(value=-1.0), r"steps\[0\]\.value: usage must be >= 0"),
        (lambda d: d["steps"][0].update(value="1"), r"steps\[0\]\.value: expected a finite"),
        (
            lambda d: d["steps"][0].update(expect={"tokens": 1.0}),
            r"steps\[0\]\.expect: unknown field 'tokens'",
        ),
        (
            lambda d: d["steps"].append({"t_ms": 1, "op": "request_throttle_time", "request": "r"}),
            r"steps\[1\]\.request: no earlier request step named 'r'",
        ),
        (lambda d: d.update(broker={}), r"file: unknown field 'broker'"),
        (lambda d: d.pop("quotas"), r"file: missing field 'quotas'"),
        (lambda d: d["quotas"][0].update(value=True), r"quotas\[0\]\.value: expected a finite"),
        (lambda d: d.update(quota_type="token_bucket"), r"quotas\[0\]: unknown field 'client_id'"),
        (
            lambda d: (d.update(quota_type="connection_rate"), d.pop("quotas")),
            r"file: missing field 'broker' \(a connection_rate scenario has it\)",
        ),
    ],
)
def test_a_malformed_admin_scenario_is_named(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: Any,
    message: str,
) -> None:
    path = write_changed(tmp_path / "bad.json", BASE, change)
    with pytest.raises(ScenarioError, match=rf"^{path}: {message}"):
        load(path)
    assert main(["conformance", str(path)]) == 2
    assert str(path) in capsys.readouterr().err


def test_an_acceptor_loop_is_validated(tmp_path: Path) -> None:
    document = json.loads((VECTORS / "connection_rate_ip_above_limit.json").read_text())
    document["steps"][1]["loops"][0]["count"] = 0
    path = write_json(tmp_path / "loops.json", document)
    with pytest.raises(
        ScenarioError, match=r"steps\[1\]\.loops\[0\]\.count: expected an integer >= 1"
    ):
        load(path)
