"""Replay conformance scenarios against kquota and report the first difference.

A scenario is a JSON file with a quota configuration and timed steps whose expected
outputs came from Apache Kafka's own classes (section 12 of ``kafka-quota-semantics.md``).
Two families, one module each:

* :mod:`~kquota.conformance.clients`: the client quotas (``produce``, ``fetch``,
  ``request``, one ``sensor``), the vectors of ``shared/conformance``; replayed against
  :mod:`kquota` or a stand-in backend (the test suite's reference model).
* :mod:`~kquota.conformance.other_quotas`: the token bucket, controller mutations (KIP-599) and
  connection creation (KIP-612), the vectors of kquota's ``tests/vectors``.

:func:`load` reads a file of either family, :func:`replay` drives it through kquota.
"""

from __future__ import annotations

from pathlib import Path

from kquota.conformance import clients, other_quotas
from kquota.conformance.clients import (
    Backend,
    Mismatch,
    QuotaOverride,
    Result,
    Scenario,
    Step,
    expand_paths,
    load_scenario,
)
from kquota.conformance.other_quotas import ADMIN_TYPES, AdminScenario, load_admin, replay_admin
from kquota.exceptions import ScenarioError

__all__ = [
    "ADMIN_TYPES",
    "AdminScenario",
    "Backend",
    "Mismatch",
    "QuotaOverride",
    "Result",
    "Scenario",
    "Step",
    "clients",
    "expand_paths",
    "load",
    "load_admin",
    "load_scenario",
    "other_quotas",
    "replay",
]


def load(path: str | Path) -> Scenario | AdminScenario:
    """Read and validate a scenario of either family (by its ``quota_type``).

    Raises :class:`~kquota.exceptions.ScenarioError` naming the file and the bad field.
    """
    document = clients._Loader(Path(path)).document()
    quota_type = document.get("quota_type") if isinstance(document, dict) else None
    if quota_type in ADMIN_TYPES:
        return load_admin(path)
    return load_scenario(path)


def replay(scenario: Scenario | AdminScenario, backend: Backend | None = None) -> Result:
    """Drive ``backend`` (default :mod:`kquota`) through ``scenario``; see the families.

    Scenarios of :data:`ADMIN_TYPES` replay against :mod:`kquota` only.
    """
    if isinstance(scenario, AdminScenario):
        if backend is not None:
            raise ScenarioError(
                f"{scenario.path}: a {scenario.quota_type} scenario replays against kquota only"
            )
        return replay_admin(scenario)
    return clients.replay(scenario, backend)
