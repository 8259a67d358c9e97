"""atheris target ``scenario``: the conformance scenario loader (``kquota.conformance``).

The input is a scenario file's bytes. ``load_scenario`` must either return a scenario or
raise :class:`~kquota.exceptions.ScenarioError` with one line naming the file; nothing
else may escape. A scenario it accepts must replay (``kquota conformance`` replays
every file it loads): the replay may report a mismatch but must not raise, and it
stops at the first mismatch or checks every step that has an expectation.
"""

from __future__ import annotations

from fuzz_common import check_message, scratch
from kquota.conformance import Scenario, load_scenario, replay
from kquota.exceptions import ScenarioError


def check_accepted(scenario: Scenario) -> None:
    """Replay an accepted scenario: a result, never an exception."""
    result = replay(scenario)
    assert result.name == scenario.name
    assert result.steps == len(scenario.steps)
    expected = sum(1 for step in scenario.steps if step.expect is not None)
    if result.mismatch is None:
        assert result.checked == expected
    else:
        assert 1 <= result.checked <= expected
        assert scenario.steps[result.mismatch.step].expect is not None
        check_message(ValueError(str(result.mismatch)))


def test_one_input(data: bytes) -> None:
    path = scratch() / "scenario.json"
    path.write_bytes(data)
    try:
        scenario = load_scenario(path)
    except ScenarioError as exc:
        check_message(exc, names=str(path))
        return
    check_accepted(scenario)
