"""The conformance vectors through kquota and the reference model, and ``kquota conformance``."""

from __future__ import annotations

import copy
import json
import math
import shutil
from pathlib import Path
from typing import Any

import paths
import pytest
import reference_model
from kquota.cli import main
from kquota.conformance import Backend, expand_paths, load_scenario, replay
from kquota.exceptions import ScenarioError
from scenario_files import write_changed, write_json

VECTORS = paths.SHARED_VECTORS
VECTOR_FILES = sorted(VECTORS.glob("*.json")) if VECTORS.is_dir() else []
BACKENDS: dict[str, Backend | None] = {"kquota": None, "model": reference_model}

# The spec's own example (section 12): one 600 B record on a fresh 11 x 1 s sensor.
SMALL_SCENARIO: dict[str, Any] = {
    "format": 1,
    "name": "small",
    "description": "600 B on a fresh sensor under a 1024 B/s user quota",
    "quota_type": "produce",
    "config": {"num_samples": 11, "window_ms": 1000},
    "quotas": [{"user": "alice", "client_id": None, "value": 1024.0}],
    "steps": [
        {
            "t_ms": 0,
            "op": "record",
            "user": "alice",
            "client_id": "app1",
            "value": 600.0,
            "expect": {
                "throttle_ms": 0,
                "rate": 60.0,
                "quota": 1024.0,
                "tags": {"user": "alice", "client-id": ""},
            },
        }
    ],
}


def test_vector_folder_holds_vectors() -> None:
    assert VECTORS.is_dir(), f"conformance vectors missing: {VECTORS}"
    assert VECTOR_FILES, f"no *.json conformance vectors in {VECTORS}"


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize(
    "path",
    [pytest.param(path, id=path.stem) for path in VECTOR_FILES]
    or [pytest.param(None, id="no-vectors")],
)
def test_vector_matches(path: Path | None, backend: str) -> None:
    assert path is not None, f"no *.json conformance vectors in {VECTORS}"
    result = replay(load_scenario(path), backend=BACKENDS[backend])
    assert result.ok, f"{result.name}: {result.mismatch}"
    assert result.checked > 0


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_replay_reports_the_first_mismatch(tmp_path: Path, backend: str) -> None:
    document = copy.deepcopy(SMALL_SCENARIO)
    document["steps"][0]["expect"]["rate"] = 61.0
    document["steps"][0]["expect"]["quota"] = 1.0
    result = replay(load_scenario(write_json(tmp_path / "small.json", document)), BACKENDS[backend])
    assert not result.ok
    assert result.checked == 1
    assert result.mismatch is not None
    assert (result.mismatch.step, result.mismatch.op, result.mismatch.t_ms) == (0, "record", 0)
    assert (result.mismatch.field, result.mismatch.expected) == ("rate", 61.0)
    assert result.mismatch.actual == 60.0


def test_rates_are_compared_to_the_last_bit(tmp_path: Path) -> None:
    """Every vector matches Kafka exactly, so the runner allows no tolerance: a rate one
    unit in the last place away is a mismatch."""
    exact = copy.deepcopy(SMALL_SCENARIO)
    assert replay(load_scenario(write_json(tmp_path / "exact.json", exact))).ok
    next_up = copy.deepcopy(SMALL_SCENARIO)
    next_up["steps"][0]["expect"]["rate"] = math.nextafter(60.0, math.inf)
    result = replay(load_scenario(write_json(tmp_path / "ulp.json", next_up)))
    assert result.mismatch is not None and result.mismatch.field == "rate"
    assert result.mismatch.actual == 60.0


def test_expand_paths_sorts_folders_and_keeps_files(tmp_path: Path) -> None:
    for name in ("b.json", "a.json", "notes.txt"):
        (tmp_path / name).write_text("{}", encoding="utf-8")
    single = tmp_path / "b.json"
    assert expand_paths([tmp_path, single]) == [tmp_path / "a.json", single, single]


@pytest.mark.parametrize("make", ["missing", "empty folder"])
def test_expand_paths_rejects_missing_and_empty(tmp_path: Path, make: str) -> None:
    path = tmp_path / "nothing-here"
    if make == "empty folder":
        path.mkdir()
    with pytest.raises(ScenarioError, match="nothing-here"):
        expand_paths([path])


# -- the command line ------------------------------------------------------------------


def test_cli_all_vectors_match(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["conformance", str(VECTORS)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"{len(VECTOR_FILES)}/{len(VECTOR_FILES)} scenarios match"
    assert all(line.startswith("ok   ") for line in lines[:-1])
    assert len(lines) == len(VECTOR_FILES) + 1
    assert status == 0


def test_cli_reports_a_mismatching_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = VECTORS / "produce_first_request_fresh_sensor.json"
    shutil.copy(good, tmp_path / good.name)
    document = json.loads((VECTORS / "produce_kafka_test_quota_violation.json").read_text())
    step = document["steps"][11]
    assert (step["t_ms"], step["expect"]["throttle_ms"]) == (10500, 2100)
    step["expect"]["throttle_ms"] = 2101
    write_json(tmp_path / "produce_kafka_test_quota_violation.json", document)

    status = main(["conformance", str(tmp_path)])

    assert capsys.readouterr().out.splitlines() == [
        "ok   produce_first_request_fresh_sensor  (4 steps)",
        "FAIL produce_kafka_test_quota_violation  step 11 (record at 10500): "
        "throttle_ms expected 2101 got 2100",
        "1/2 scenarios match",
    ]
    assert status == 1


def test_cli_shows_nan_as_in_the_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = json.loads((VECTORS / "produce_kafka_test_quota_violation.json").read_text())
    assert document["steps"][10]["expect"]["throttle_time_avg"] == "NaN"
    document["steps"][10]["expect"]["throttle_time_avg"] = 0.0
    path = write_json(tmp_path / "nan.json", document)
    assert main(["conformance", str(path)]) == 1
    assert 'step 10 (metrics at 9500): throttle_time_avg expected 0.0 got "NaN"' in (
        capsys.readouterr().out
    )


def _set(path: list[Any], value: Any) -> Any:
    """A mutation of :data:`SMALL_SCENARIO` that sets the field at ``path``."""

    def mutate(document: dict[str, Any]) -> None:
        target: Any = document
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def _drop(path: list[Any]) -> Any:
    """A mutation of :data:`SMALL_SCENARIO` that deletes the field at ``path``."""

    def mutate(document: dict[str, Any]) -> None:
        target: Any = document
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return mutate


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        pytest.param(_set(["format"], 2), "format: expected 1, got 2", id="format"),
        pytest.param(_set(["quota_type"], "bytes"), "quota_type", id="quota-type"),
        pytest.param(_drop(["steps"]), "missing field 'steps'", id="no-steps"),
        pytest.param(_set(["config", "num_samples"], 0), "config.num_samples", id="samples"),
        pytest.param(_set(["config", "window_ms"], 1500), "config.window_ms", id="window"),
        pytest.param(_set(["config", "window_ms"], "1s"), "config.window_ms", id="window-type"),
        pytest.param(_set(["quotas", 0, "value"], 0.0), "quotas[0].value", id="quota-zero"),
        pytest.param(_set(["quotas", 0, "user"], None), "quotas[0]", id="quota-no-entity"),
        pytest.param(_set(["steps", 0, "op"], "produce"), "steps[0].op", id="op"),
        pytest.param(_drop(["steps", 0, "t_ms"]), "missing field 't_ms'", id="no-t"),
        pytest.param(_set(["steps", 0, "t_ms"], 1.5), "steps[0].t_ms", id="t-float"),
        pytest.param(_set(["steps", 0, "user"], None), "steps[0].user", id="user-null"),
        pytest.param(_set(["steps", 0, "value"], -1.0), "steps[0].value", id="usage"),
        pytest.param(
            _set(["steps", 0, "expect", "throttle"], 0), "unknown field 'throttle'", id="expect"
        ),
        pytest.param(
            _set(["steps", 0, "expect", "throttle_ms"], 0.5),
            "steps[0].expect.throttle_ms",
            id="expect-type",
        ),
    ],
)
def test_cli_rejects_a_malformed_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mutate: Any, problem: str
) -> None:
    path = write_changed(tmp_path / "broken.json", SMALL_SCENARIO, mutate)
    with pytest.raises(ScenarioError, match=r"broken\.json"):
        load_scenario(path)

    status = main(["conformance", str(path)])

    captured = capsys.readouterr()
    assert status == 2
    assert captured.out == ""
    assert str(path) in captured.err
    assert problem in captured.err
    assert len(captured.err.splitlines()) == 1


@pytest.mark.parametrize(
    ("text", "problem"),
    [("{", "not valid JSON"), ('{"rate": NaN}', "NaN"), ("[]", "expected an object")],
)
def test_cli_rejects_a_file_that_is_not_a_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, problem: str
) -> None:
    path = tmp_path / "broken.json"
    path.write_text(text, encoding="utf-8")
    assert main(["conformance", str(path)]) == 2
    assert problem in capsys.readouterr().err


def test_cli_rejects_a_missing_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.json"
    assert main(["conformance", str(VECTORS), str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert str(missing) in captured.err


def test_cli_needs_a_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance"]) == 2
    assert "PATH" in capsys.readouterr().err
