"""Scenarios of the client quotas (section 12 of the spec), replayed against a backend.

A scenario (section 12 of ``kafka-quota-semantics.md``) is a JSON file with a quota
configuration and a list of timed steps whose expected outputs came from Apache Kafka's
own classes. :func:`load_scenario` validates one file, :func:`replay` drives a backend
through it and reports the first step whose outputs differ from the expectations.

A backend is anything with ``Entity``, ``QuotaManager``, ``SampledRate`` and
``RequestPath`` attributes that behave like :mod:`kquota`'s (the default), e.g. the
pure-Python reference model of the test suite. A ``record`` step is the broker's handling
of a request, through the backend's ``RequestPath``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, NoReturn, Protocol

import kquota
from kquota._core import check_window_seconds, double_to_int
from kquota.exceptions import ScenarioError

__all__ = [
    "Backend",
    "Mismatch",
    "QuotaOverride",
    "Result",
    "Scenario",
    "Step",
    "expand_paths",
    "load_scenario",
    "replay",
]

FORMAT: Final = 1
"""The scenario format version this module reads."""

SENSOR: Final = "sensor"
"""The ``quota_type`` of scenarios that drive one plain ``SampledRate``."""

MANAGER_TYPES: Final = ("produce", "fetch", "request")
"""The ``quota_type`` of scenarios that drive one ``QuotaManager``."""

# -- the scenario format -------------------------------------------------------------------


@dataclass(frozen=True)
class QuotaOverride:
    """One entry of a scenario's ``quotas``: ``None`` leaves a dimension out."""

    user: str | None
    client_id: str | None
    value: float


@dataclass(frozen=True)
class Step:
    """One step of a scenario; ``index`` is its position in the file's ``steps`` list."""

    index: int
    t_ms: int
    op: str
    user: str | None
    client_id: str | None
    value: float | None
    expect: Mapping[str, Any] | None


@dataclass(frozen=True)
class Scenario:
    """A validated scenario file."""

    path: Path
    name: str
    description: str
    source: str
    quota_type: str
    num_samples: int
    window_ms: int
    quotas: tuple[QuotaOverride, ...]
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class _OpSpec:
    """What a step of one op carries."""

    target: Literal["none", "client", "entity"]
    """``client``: ``user`` and ``client_id`` strings; ``entity``: either may be null."""
    value: Literal["none", "usage", "sample", "quota"]
    """``usage``: >= 0 (request: whole nanoseconds); ``sample``: any; ``quota``: > 0."""
    expect: frozenset[str]


_CLIENT_FIELDS: Final = frozenset({"rate", "quota", "tags"})

_MANAGER_OPS: Final[dict[str, _OpSpec]] = {
    "record": _OpSpec("client", "usage", _CLIENT_FIELDS | {"throttle_ms"}),
    "record_raw": _OpSpec("client", "usage", _CLIENT_FIELDS | {"throttle_ms"}),
    "unrecord": _OpSpec("client", "usage", frozenset()),
    "record_no_throttle": _OpSpec("client", "usage", frozenset()),
    "set_quota": _OpSpec("entity", "quota", frozenset()),
    "remove_quota": _OpSpec("entity", "none", frozenset()),
    "measure": _OpSpec("client", "none", _CLIENT_FIELDS),
    "max_value_in_quota_window": _OpSpec("client", "none", frozenset({"value", "as_int"})),
    "expire_sensors": _OpSpec("none", "none", frozenset({"removed"})),
    "metrics": _OpSpec("client", "none", _CLIENT_FIELDS | {"throttle_time_avg", "queue_size"}),
}

_SENSOR_OPS: Final[dict[str, _OpSpec]] = {
    "record": _OpSpec("none", "sample", frozenset({"throttle_ms", "violated", "rate"})),
    "record_no_check": _OpSpec("none", "sample", frozenset()),
    "measure": _OpSpec("none", "none", frozenset({"rate"})),
    "set_quota": _OpSpec("none", "quota", frozenset()),
    "remove_quota": _OpSpec("none", "none", frozenset()),
}

_INT_FIELDS: Final = frozenset({"throttle_ms", "as_int"})
_DOUBLE_FIELDS: Final = frozenset({"rate", "quota", "throttle_time_avg"})  # number, NaN or null


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """The scenario files named by ``paths``: files as given, folders as their ``*.json``.

    The files of a folder come in sorted order. A path that does not exist or cannot be
    examined (a name too long, a folder that may not be searched), or a folder without any
    ``*.json`` file, raises :class:`~kquota.exceptions.ScenarioError` naming it.
    """
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        try:  # a name too long, a folder that may not be searched: one error naming it
            if path.is_dir():
                found = sorted(entry for entry in path.glob("*.json") if entry.is_file())
                if not found:
                    raise ScenarioError(f"{path}: folder holds no *.json scenario files")
                files.extend(found)
            elif path.is_file():
                files.append(path)
            else:
                raise ScenarioError(f"{path}: no such file or folder")
        except OSError as exc:
            raise ScenarioError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return files


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate one scenario file.

    Raises :class:`~kquota.exceptions.ScenarioError`, naming the file and the bad field,
    when the file cannot be read, is not JSON or is not of the documented format.
    """
    return _Loader(Path(path)).scenario()


class _Loader:
    """Validates one scenario file; every error names the file and the field."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, problem: str) -> NoReturn:
        raise ScenarioError(f"{self.path}: {where}: {problem}")

    def document(self) -> object:
        """The file's JSON document."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ScenarioError(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise ScenarioError(f"{self.path}: cannot read: {exc}") from None
        try:
            return json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            raise ScenarioError(f"{self.path}: not valid JSON: {exc}") from None

    def scenario(self) -> Scenario:
        document = self.document()
        top = self.fields(
            document,
            "file",
            required={"format", "name", "quota_type", "config", "quotas", "steps"},
            optional={"description", "source"},
        )
        if _kind(top["format"]) != "int" or top["format"] != FORMAT:
            self.fail("format", f"expected {FORMAT}, got {top['format']!r}")
        quota_type = top["quota_type"]
        if quota_type not in (*MANAGER_TYPES, SENSOR):
            self.fail(
                "quota_type",
                f"expected one of {', '.join((*MANAGER_TYPES, SENSOR))}, got {quota_type!r}",
            )
        config = self.fields(top["config"], "config", required={"num_samples", "window_ms"})
        num_samples = self.integer(config["num_samples"], "config.num_samples", minimum=1)
        window_ms = self.integer(config["window_ms"], "config.window_ms", minimum=1)
        if quota_type != SENSOR:  # a manager's window: quota.window.size.seconds
            try:
                check_window_seconds(window_ms)
            except kquota.KquotaError as exc:
                self.fail("config.window_ms", str(exc))
        try:  # the core's limits (num_samples up to 65535, the horizon within an i64)
            kquota.SampledRate(num_samples, window_ms)
        except kquota.KquotaError as exc:
            self.fail("config", str(exc))
        except OverflowError:
            self.fail("config", f"{num_samples} samples of {window_ms} ms: too large")
        quotas = self.quotas(top["quotas"], sensor=quota_type == SENSOR)
        steps = top["steps"]
        if not isinstance(steps, list):
            self.fail("steps", f"expected a list, got {steps!r}")
        ops = _SENSOR_OPS if quota_type == SENSOR else _MANAGER_OPS
        return Scenario(
            path=self.path,
            name=self.string(top["name"], "name"),
            description=self.string(top.get("description", ""), "description"),
            source=self.string(top.get("source", ""), "source"),
            quota_type=quota_type,
            num_samples=num_samples,
            window_ms=window_ms,
            quotas=quotas,
            steps=tuple(
                self.step(index, raw, ops, request=quota_type == "request")
                for index, raw in enumerate(steps)
            ),
        )

    def quotas(self, raw: object, *, sensor: bool) -> tuple[QuotaOverride, ...]:
        if not isinstance(raw, list):
            self.fail("quotas", f"expected a list, got {raw!r}")
        if sensor and len(raw) > 1:
            self.fail("quotas", f"a sensor scenario has at most one bound, got {len(raw)}")
        overrides = []
        for index, entry in enumerate(raw):
            where = f"quotas[{index}]"
            fields = self.fields(entry, where, required={"user", "client_id", "value"})
            user = self.name(fields["user"], f"{where}.user")
            client_id = self.name(fields["client_id"], f"{where}.client_id")
            if sensor and (user is not None or client_id is not None):
                self.fail(where, "the bound of a sensor scenario has no user or client_id")
            if not sensor and user is None and client_id is None:
                self.fail(where, "needs a user, a client_id or both; both are null")
            value = self.number(fields["value"], f"{where}.value", "quota")
            overrides.append(QuotaOverride(user, client_id, value))
        return tuple(overrides)

    def step(self, index: int, raw: object, ops: Mapping[str, _OpSpec], *, request: bool) -> Step:
        where = f"steps[{index}]"
        if not isinstance(raw, dict):
            self.fail(where, f"expected an object, got {raw!r}")
        op = raw.get("op")
        if not isinstance(op, str) or op not in ops:
            self.fail(f"{where}.op", f"expected one of {', '.join(ops)}, got {op!r}")
        spec = ops[op]
        required = {"t_ms", "op"}
        if spec.target != "none":
            required |= {"user", "client_id"}
        if spec.value != "none":
            required.add("value")
        fields = self.fields(raw, where, required=required, optional={"expect"})
        t_ms = self.integer(fields["t_ms"], f"{where}.t_ms", minimum=-(2**63), maximum=2**63 - 1)
        user = client_id = None
        if spec.target == "client":
            user = self.string(fields["user"], f"{where}.user")
            client_id = self.string(fields["client_id"], f"{where}.client_id")
        elif spec.target == "entity":
            user = self.name(fields["user"], f"{where}.user")
            client_id = self.name(fields["client_id"], f"{where}.client_id")
            if user is None and client_id is None:
                self.fail(where, "needs a user, a client_id or both; both are null")
        value = None
        if spec.value != "none":
            value = self.number(fields["value"], f"{where}.value", spec.value)
            if request and spec.value == "usage" and not value.is_integer():
                self.fail(f"{where}.value", f"request usage is whole nanoseconds, got {value!r}")
        expect = None
        if "expect" in fields:
            expect = self.expect(fields["expect"], f"{where}.expect", spec.expect)
        return Step(index, t_ms, op, user, client_id, value, expect)

    def expect(self, raw: object, where: str, allowed: frozenset[str]) -> dict[str, Any]:
        if not allowed:
            self.fail(where, "this op has no outputs to expect")
        expect = self.fields(raw, where, required=set(), optional=allowed)
        for key, value in expect.items():
            here = f"{where}.{key}"
            kind = _kind(value)
            if key in _INT_FIELDS:
                ok = kind == "int"
            elif key in _DOUBLE_FIELDS:
                ok = kind in ("int", "float", "nan", "null")
            elif key == "value":
                ok = kind in ("int", "float", "nan")
            elif key == "queue_size":
                ok = kind in ("int", "float")
            elif key == "violated":
                ok = kind == "bool"
            elif key == "removed":
                ok = isinstance(value, list) and all(isinstance(name, str) for name in value)
            else:  # tags
                ok = (
                    isinstance(value, dict)
                    and value.keys() == {"user", "client-id"}
                    and all(isinstance(tag, str) for tag in value.values())
                )
            if not ok:
                self.fail(here, f"malformed expected value {value!r}")
        return expect

    def fields(
        self,
        raw: object,
        where: str,
        *,
        required: set[str] | frozenset[str],
        optional: set[str] | frozenset[str] = frozenset(),
    ) -> dict[str, Any]:
        if not isinstance(raw, dict):
            self.fail(where, f"expected an object, got {raw!r}")
        missing = sorted(required - raw.keys())
        if missing:
            self.fail(where, f"missing field {missing[0]!r}")
        unknown = sorted(raw.keys() - required - optional)
        if unknown:
            self.fail(where, f"unknown field {unknown[0]!r}")
        return raw

    def integer(
        self, raw: object, where: str, *, minimum: int | None = None, maximum: int | None = None
    ) -> int:
        if not isinstance(raw, int) or isinstance(raw, bool):
            self.fail(where, f"expected an integer, got {raw!r}")
        if minimum is not None and raw < minimum:
            self.fail(where, f"expected an integer >= {minimum}, got {raw}")
        if maximum is not None and raw > maximum:
            self.fail(where, f"expected an integer <= {maximum}, got {raw}")
        return raw

    def number(self, raw: object, where: str, kind: str) -> float:
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            self.fail(where, f"expected a finite number, got {raw!r}")
        try:
            value = float(raw)
        except OverflowError:  # an int beyond the largest double
            value = math.inf
        if not math.isfinite(value):
            self.fail(where, f"expected a finite number, got {raw!r}")
        if kind == "quota" and not value > 0.0:
            self.fail(where, f"a quota must be > 0, got {raw!r}")
        if kind == "usage" and not value >= 0.0:
            self.fail(where, f"usage must be >= 0, got {raw!r}")
        return value

    def string(self, raw: object, where: str) -> str:
        if not isinstance(raw, str):
            self.fail(where, f"expected a string, got {raw!r}")
        try:
            raw.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate ("\ud800" in the JSON)
            self.fail(where, f"not valid Unicode text ({exc.reason} at {exc.start}): {raw!r}")
        return raw

    def name(self, raw: object, where: str) -> str | None:
        return None if raw is None else self.string(raw, where)


def _reject_constant(constant: str) -> NoReturn:
    raise ValueError(f'bare {constant} is not JSON (write NaN as the string "NaN")')


def _kind(value: object) -> str:
    """The JSON kind of a value, with the format's ``"NaN"`` string as a number kind."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float" if math.isfinite(value) else "nonfinite"
    if value == "NaN":
        return "nan"
    return type(value).__name__


# -- replaying -------------------------------------------------------------------------------


class Backend(Protocol):
    """What :func:`replay` needs: the :mod:`kquota` package or a stand-in with its API."""

    @property
    def Entity(self) -> Callable[..., Any]: ...
    @property
    def QuotaManager(self) -> Callable[..., Any]: ...
    @property
    def SampledRate(self) -> Callable[..., Any]: ...
    @property
    def RequestPath(self) -> Callable[..., Any]: ...


@dataclass(frozen=True)
class Mismatch:
    """The first output of a scenario that differs from its expectation."""

    step: int
    op: str
    t_ms: int
    field: str
    expected: Any
    actual: Any

    def __str__(self) -> str:
        return (
            f"step {self.step} ({self.op} at {self.t_ms}): {self.field} expected "
            f"{_show(self.expected)} got {_show(self.actual)}"
        )


@dataclass(frozen=True)
class Result:
    """The outcome of replaying one scenario.

    ``checked`` counts the steps whose expectations were compared; replaying stops at the
    first mismatch.
    """

    name: str
    steps: int
    checked: int
    mismatch: Mismatch | None

    @property
    def ok(self) -> bool:
        return self.mismatch is None


_Outputs = dict[str, Callable[[], Any]]
"""What a step can report, as readers called only for the fields its ``expect`` lists.

Reads that are the op itself (``measure``, ``metrics``) happen whether or not they are checked.
"""


def replay(scenario: Scenario, backend: Backend | None = None) -> Result:
    """Drive ``backend`` (default: :mod:`kquota`) through ``scenario`` and compare outputs.

    Only the fields a step's ``expect`` lists are computed and compared, every one
    exactly (rates to the last bit), a NaN equal to ``"NaN"``.
    """
    chosen: Backend = kquota if backend is None else backend
    driver: _SensorDriver | _ManagerDriver = (
        _SensorDriver(scenario, chosen)
        if scenario.quota_type == SENSOR
        else _ManagerDriver(scenario, chosen)
    )
    checked = 0
    for step in scenario.steps:
        outputs = driver.apply(step)
        if step.expect is None:
            continue
        checked += 1
        for field, expected in step.expect.items():
            actual = _plain(outputs[field]())
            if not _matches(field, expected, actual):
                mismatch = Mismatch(step.index, step.op, step.t_ms, field, expected, actual)
                return Result(scenario.name, len(scenario.steps), checked, mismatch)
    return Result(scenario.name, len(scenario.steps), checked, None)


class _SensorDriver:
    """Section 12, ``sensor`` ops: one ``SampledRate`` bounded by the scenario's quota."""

    def __init__(self, scenario: Scenario, backend: Backend) -> None:
        bound = scenario.quotas[0].value if scenario.quotas else None
        self._rate = backend.SampledRate(scenario.num_samples, scenario.window_ms, bound)

    def apply(self, step: Step) -> _Outputs:
        rate, t_ms = self._rate, step.t_ms
        match step.op:
            case "record":
                check = rate.record(step.value, t_ms)
                return {
                    "throttle_ms": lambda: check.throttle_ms,
                    "violated": lambda: check.violated,
                    "rate": lambda: rate.measure(t_ms),
                }
            case "record_no_check":
                rate.record_no_check(step.value, t_ms)
            case "measure":
                measured = rate.measure(t_ms)
                return {"rate": lambda: measured}
            case "set_quota":
                rate.set_quota(step.value)
            case "remove_quota":
                rate.set_quota(None)
        return {}


class _ManagerDriver:
    """Section 12, ``produce``/``fetch``/``request`` ops: one ``QuotaManager``."""

    def __init__(self, scenario: Scenario, backend: Backend) -> None:
        self._entity = backend.Entity
        self._fetch = scenario.quota_type == "fetch"
        self._request = scenario.quota_type == "request"
        self._manager = backend.QuotaManager(
            scenario.quota_type, num_samples=scenario.num_samples, window_ms=scenario.window_ms
        )
        for quota in scenario.quotas:
            self._manager.set_quota(self._entity(quota.user, quota.client_id), quota.value)
        # "record" is the broker's handling of a request: the request path, with quotas of
        # the scenario's type only (the other two managers never get one, so they measure
        # nothing) and the request quota's usage as the handler time of an "other" request.
        managers = {
            quota_type: self._manager
            if quota_type == scenario.quota_type
            else backend.QuotaManager(
                quota_type, num_samples=scenario.num_samples, window_ms=scenario.window_ms
            )
            for quota_type in MANAGER_TYPES
        }
        self._path = backend.RequestPath(
            managers["produce"], managers["fetch"], managers["request"]
        )
        self._throttle_of = f"{scenario.quota_type}_throttle_ms"

    def apply(self, step: Step) -> _Outputs:
        manager, t_ms = self._manager, step.t_ms
        user, client_id, value = step.user, step.client_id, step.value
        manager.expired_channels(t_ms)  # the reaper thread, before every step
        match step.op:
            case "record":
                # The response went out on the client's connection: channel 1 is queued.
                if self._request:
                    handled = self._path.handle(
                        user, client_id, "other", 0.0, value, now_ms=t_ms, channel=1
                    )
                else:
                    kind = "fetch" if self._fetch else "produce"
                    handled = self._path.handle(
                        user, client_id, kind, value, None, now_ms=t_ms, channel=1
                    )
                throttle = getattr(handled, self._throttle_of)
                return {"throttle_ms": lambda: throttle, **self._client(step)}
            case "record_raw":
                throttle = manager.record(user, client_id, value, t_ms)
                return {"throttle_ms": lambda: throttle, **self._client(step)}
            case "unrecord":
                manager.unrecord(user, client_id, value, t_ms)
            case "record_no_throttle":
                if manager.enabled:  # Kafka installs the callback only with quotas enabled
                    manager.record_no_throttle(user, client_id, value, t_ms)
            case "set_quota":
                manager.set_quota(self._entity(user, client_id), value)
            case "remove_quota":
                manager.remove_quota(self._entity(user, client_id))
            case "measure":
                rate = manager.measure(user, client_id, t_ms)
                return {**self._client(step), "rate": lambda: rate}
            case "metrics":
                average = manager.throttle_time_avg(user, client_id, t_ms)
                queue_size = manager.queue_size()
                rate = manager.measure(user, client_id, t_ms)
                return {
                    **self._client(step),
                    "rate": lambda: rate,
                    "throttle_time_avg": lambda: average,
                    "queue_size": lambda: queue_size,
                }
            case "max_value_in_quota_window":
                cap = manager.max_value_in_quota_window(user, client_id, t_ms)
                return {"value": lambda: cap, "as_int": lambda: double_to_int(cap)}
            case "expire_sensors":
                removed = manager.expire_sensors(t_ms)
                return {"removed": lambda: removed}
        return {}

    def _client(self, step: Step) -> _Outputs:
        """The client's rate (measured at the step's time), bound and tags."""
        manager, user, client_id = self._manager, step.user, step.client_id

        def tags() -> dict[str, str]:
            user_tag, client_tag = manager.tags(user, client_id)
            return {"user": user_tag, "client-id": client_tag}

        return {
            "rate": lambda: manager.measure(user, client_id, step.t_ms),
            "quota": lambda: manager.bound(user, client_id),
            "tags": tags,
        }


def _plain(actual: Any) -> Any:
    """An output in the scenario's JSON terms: NaN as ``"NaN"``."""
    if isinstance(actual, float) and math.isnan(actual):
        return "NaN"
    return actual


def _matches(field: str, expected: Any, actual: Any) -> bool:
    if field in _INT_FIELDS:
        return _kind(actual) == "int" and actual == expected
    if field == "violated":
        return isinstance(actual, bool) and actual is expected
    if field in _DOUBLE_FIELDS or field == "value":
        if expected is None or expected == "NaN" or actual is None or actual == "NaN":
            return bool(actual == expected)
        if _kind(actual) not in ("int", "float", "nonfinite"):
            return False
        return bool(actual == expected)  # to the last bit: Kafka's arithmetic, exactly
    return bool(actual == expected)  # tags, removed, queue_size


def _show(value: Any) -> str:
    """A value as it would appear in a scenario file."""
    return json.dumps(_plain(value))
