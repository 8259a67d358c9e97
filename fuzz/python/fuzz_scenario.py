"""atheris target ``scenario``: the conformance scenario loaders (``kquota.conformance``).

The input is a scenario file's bytes, of either family (client quotas, or the token
bucket, controller mutations and connections). ``load`` must either return a scenario or
raise :class:`~kquota.exceptions.ScenarioError` with one line naming the file; nothing
else may escape. A scenario it accepts must replay (``kquota conformance`` replays
every file it loads): the replay may report a mismatch but must not raise, and it
stops at the first mismatch or checks every step that has an expectation.
"""

from __future__ import annotations

from fuzz_common import check_message, scratch
from kquota.conformance import AdminScenario, Scenario, load, replay
from kquota.conformance.clients import Step
from kquota.conformance.other_quotas import AdminStep
from kquota.exceptions import ScenarioError


def expects(step: Step | AdminStep) -> bool:
    """Whether a step has an expected output (an acceptor loop's counts too)."""
    loops = step.fields.get("loops", []) if isinstance(step, AdminStep) else []
    return step.expect is not None or any("expect" in loop for loop in loops)


def check_accepted(scenario: Scenario | AdminScenario) -> None:
    """Replay an accepted scenario: a result, never an exception."""
    result = replay(scenario)
    assert result.name == scenario.name
    assert result.steps == len(scenario.steps)
    expected = sum(1 for step in scenario.steps if expects(step))
    if result.mismatch is None:
        assert result.checked == expected
    else:
        assert result.checked <= expected
        step = scenario.steps[result.mismatch.step]
        # A value the core refuses (an unknown listener) is the step's "error" output.
        assert expects(step) or result.mismatch.field == "error", result.mismatch
        check_message(ValueError(str(result.mismatch)))


def test_one_input(data: bytes) -> None:
    path = scratch() / "scenario.json"
    path.write_bytes(data)
    try:
        scenario = load(path)
    except ScenarioError as exc:
        check_message(exc, names=str(path))
        return
    check_accepted(scenario)
