"""Scenarios of Kafka's other quotas: the token bucket, controller mutations, connections.

The vectors of kquota's ``tests/vectors`` take their expected values from Apache Kafka's
own tests of ``TokenBucket`` (``token_bucket``), ``ControllerMutationQuotaManager``
(``controller_mutation``, KIP-599) and ``ConnectionQuotas`` (``connection_rate``,
KIP-612); each file names its Kafka test in ``kafka_test``. The format is that of section
12 of the semantics spec (``format``, ``name``, ``quota_type``, ``config``, timed
``steps`` with an optional ``expect``), with the ops and fields listed in :data:`OPS`.

Numbers are compared exactly, as doubles; an expected ``{"value": v, "epsilon": e}``
(Kafka's test asserts a rate within ``e``) matches any number within ``e`` of ``v``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import kquota
from kquota.conformance.clients import Mismatch, Result, _Loader
from kquota.exceptions import KquotaError

__all__ = ["ADMIN_TYPES", "OPS", "AdminScenario", "AdminStep", "load_admin", "replay_admin"]

ADMIN_TYPES: Final = ("token_bucket", "controller_mutation", "connection_rate")
"""The ``quota_type`` of the scenarios this module reads."""

# A field's kind: "int", "number", "usage" (a number >= 0), "str", "bool", a kind with "?"
# (null allowed), "ints"/"strs" (lists), "map:<kind>" (an object of any keys), "tolerance"
# (a number or {value, epsilon}), "loops" (accept_connections' acceptors).
_Fields = Mapping[str, str]


@dataclass(frozen=True)
class _Op:
    fields: _Fields
    """The step's inputs (all required) besides ``t_ms`` and ``op``."""
    expect: _Fields
    """The outputs it may expect (any subset)."""


_CLIENT: Final = {"user": "str", "client_id": "str"}

OPS: Final[Mapping[str, Mapping[str, _Op]]] = {
    "token_bucket": {
        "measure": _Op({}, {"tokens": "number"}),
        "record": _Op({"value": "number"}, {}),
        "throttle_time": _Op({"tokens": "number"}, {"throttle_ms": "int"}),
    },
    "controller_mutation": {
        "record": _Op({**_CLIENT, "value": "usage"}, {"throttle_ms": "int"}),
        "request": _Op({**_CLIENT, "request": "str", "strict": "bool"}, {"exceeded": "bool"}),
        "request_record": _Op(
            {"request": "str", "value": "usage"},
            {"accepted": "bool", "exceeded": "bool", "throttle_time_ms": "int"},
        ),
        "request_throttle_time": _Op({"request": "str"}, {"throttle_time_ms": "int"}),
        "throttle": _Op(
            {**_CLIENT, "throttle_ms": "int", "channel": "int?"}, {"queue_size": "int"}
        ),
        "drain": _Op({}, {"channels": "ints", "queue_size": "int"}),
        "sensors": _Op({}, {"names": "strs"}),
        "set_quota": _Op({"user": "str?", "client_id": "str?", "value": "number"}, {}),
        "remove_quota": _Op({"user": "str?", "client_id": "str?"}, {}),
    },
    "connection_rate": {
        "set_ip_quota": _Op({"ip": "str?", "value": "int?"}, {}),
        "set_broker_max_rate": _Op({"value": "int"}, {}),
        "set_listener_max_rate": _Op({"listener": "str", "value": "int?"}, {}),
        "connect": _Op(
            {"listener": "str", "ip": "str"}, {"accept_delay_ms": "int", "ip_throttle_ms": "int"}
        ),
        "accept_connections": _Op({"loops": "loops"}, {}),
        "count": _Op({"ip": "str"}, {"connections": "int"}),
        "rates": _Op({}, {"ip": "map:number?", "listener": "map:number", "broker": "number"}),
        "ip_quota": _Op({"ip": "str"}, {"quota": "int", "bound": "number?"}),
        "listener_throttle": _Op({"listener": "str"}, {"ip_throttled": "bool", "blocked": "bool"}),
    },
}
"""Every op of every ``quota_type``: its input fields and the outputs it can expect."""

_LOOP: Final = _Op(
    {"listener": "str", "ip": "str", "count": "int", "interval_ms": "int"},
    {
        "accepted": "int",
        "blocked": "bool",
        "ip_throttled": "bool",
        "end_t_ms": "int",
        "rate": "tolerance",
    },
)
"""One acceptor of ``accept_connections`` (plus an optional ``expect_ip_throttle``)."""


@dataclass(frozen=True)
class AdminStep:
    """One validated step: ``fields`` holds its inputs, ``expect`` its expected outputs."""

    index: int
    t_ms: int
    op: str
    fields: Mapping[str, Any]
    expect: Mapping[str, Any] | None


@dataclass(frozen=True)
class AdminScenario:
    """A validated scenario of one of :data:`ADMIN_TYPES`."""

    path: Path
    name: str
    description: str
    source: str
    kafka_test: str
    quota_type: str
    num_samples: int
    window_ms: int
    quotas: tuple[Mapping[str, Any], ...]
    """``token_bucket``: one ``{"value"}``; ``controller_mutation``: entity overrides."""
    broker: Mapping[str, Any]
    """``connection_rate``: ``max_connection_creation_rate`` and ``inter_broker_listener``."""
    listeners: tuple[Mapping[str, Any], ...]
    steps: tuple[AdminStep, ...]


def load_admin(path: str | Path) -> AdminScenario:
    """Read and validate one scenario file of a type in :data:`ADMIN_TYPES`.

    Raises :class:`~kquota.exceptions.ScenarioError` naming the file and the bad field.
    """
    return _AdminLoader(Path(path)).admin()


class _AdminLoader(_Loader):
    def admin(self) -> AdminScenario:
        document = self.document()
        top = self.fields(
            document,
            "file",
            required={"format", "name", "quota_type", "config", "steps"},
            optional={"description", "source", "kafka_test", "quotas", "broker", "listeners"},
        )
        if top["format"] != 1 or isinstance(top["format"], bool):
            self.fail("format", f"expected 1, got {top['format']!r}")
        quota_type = top["quota_type"]
        if quota_type not in ADMIN_TYPES:
            self.fail("quota_type", f"expected one of {', '.join(ADMIN_TYPES)}, got {quota_type!r}")
        config = self.fields(top["config"], "config", required={"num_samples", "window_ms"})
        num_samples = self.integer(config["num_samples"], "config.num_samples", minimum=1)
        window_ms = self.integer(config["window_ms"], "config.window_ms", minimum=1)
        quotas: list[dict[str, Any]] = []
        broker: Mapping[str, Any] = {}
        listeners: list[dict[str, Any]] = []
        connections = quota_type == "connection_rate"
        for key in ("quotas", "broker", "listeners"):
            wanted = connections == (key != "quotas")
            if wanted and key not in top:
                self.fail("file", f"missing field {key!r} (a {quota_type} scenario has it)")
            if not wanted and key in top:
                self.fail("file", f"unknown field {key!r} (a {quota_type} scenario has none)")
        if quota_type == "token_bucket":
            quotas = self.listed(top["quotas"], "quotas", {"value": "number"})
            if len(quotas) != 1 or not quotas[0]["value"] > 0:
                self.fail("quotas", f"a token bucket has one quota > 0, got {top['quotas']!r}")
        elif quota_type == "controller_mutation":
            quotas = self.listed(
                top["quotas"], "quotas", {"user": "str?", "client_id": "str?", "value": "number"}
            )
        else:
            broker = self.typed(
                top["broker"],
                "broker",
                {"max_connection_creation_rate": "int?", "inter_broker_listener": "str?"},
            )
            listeners = self.listed(
                top["listeners"],
                "listeners",
                {"name": "str", "max_connection_creation_rate": "int?"},
            )
        scenario_so_far = AdminScenario(
            self.path,
            "",
            "",
            "",
            "",
            quota_type,
            num_samples,
            window_ms,
            tuple(quotas),
            broker,
            tuple(listeners),
            (),
        )
        try:  # the core's own limits (a mutation window of whole seconds, listener names...)
            _DRIVERS[quota_type](scenario_so_far)
        except KquotaError as exc:
            self.fail("config", str(exc))
        except OverflowError:
            self.fail("config", f"{num_samples} samples of {window_ms} ms: too large")
        steps = top["steps"]
        if not isinstance(steps, list):
            self.fail("steps", f"expected a list, got {steps!r}")
        ops = OPS[quota_type]
        checked_steps = tuple(self.admin_step(index, raw, ops) for index, raw in enumerate(steps))
        requests: set[str] = set()
        for step in checked_steps:  # a request is named by an earlier "request" step
            if step.op == "request":
                requests.add(step.fields["request"])
            elif "request" in step.fields and step.fields["request"] not in requests:
                self.fail(
                    f"steps[{step.index}].request",
                    f"no earlier request step named {step.fields['request']!r}",
                )
        return AdminScenario(
            path=self.path,
            name=self.string(top["name"], "name"),
            description=self.string(top.get("description", ""), "description"),
            source=self.string(top.get("source", ""), "source"),
            kafka_test=self.string(top.get("kafka_test", ""), "kafka_test"),
            quota_type=quota_type,
            num_samples=num_samples,
            window_ms=window_ms,
            quotas=tuple(quotas),
            broker=broker,
            listeners=tuple(listeners),
            steps=checked_steps,
        )

    def admin_step(self, index: int, raw: object, ops: Mapping[str, _Op]) -> AdminStep:
        where = f"steps[{index}]"
        if not isinstance(raw, dict):
            self.fail(where, f"expected an object, got {raw!r}")
        op = raw.get("op")
        if not isinstance(op, str) or op not in ops:
            self.fail(f"{where}.op", f"expected one of {', '.join(ops)}, got {op!r}")
        spec = ops[op]
        fields = self.fields(raw, where, required={"t_ms", "op", *spec.fields}, optional={"expect"})
        t_ms = self.integer(fields["t_ms"], f"{where}.t_ms", minimum=0, maximum=2**62)
        inputs = {
            key: self.value(fields[key], f"{where}.{key}", kind)
            for key, kind in spec.fields.items()
        }
        expect = None
        if "expect" in fields:
            if not spec.expect:
                self.fail(f"{where}.expect", "this op has no outputs to expect")
            expect = self.typed(fields["expect"], f"{where}.expect", spec.expect, partial=True)
        return AdminStep(index, t_ms, op, inputs, expect)

    def typed(
        self, raw: object, where: str, kinds: _Fields, *, partial: bool = False
    ) -> dict[str, Any]:
        """An object whose fields are those of ``kinds`` (any subset when ``partial``)."""
        fields = self.fields(
            raw, where, required=set() if partial else set(kinds), optional=set(kinds)
        )
        return {
            key: self.value(value, f"{where}.{key}", kinds[key]) for key, value in fields.items()
        }

    def listed(self, raw: object, where: str, kinds: _Fields) -> list[dict[str, Any]]:
        if not isinstance(raw, list):
            self.fail(where, f"expected a list, got {raw!r}")
        return [self.typed(item, f"{where}[{index}]", kinds) for index, item in enumerate(raw)]

    def value(self, raw: object, where: str, kind: str) -> Any:
        if kind.endswith("?"):
            return None if raw is None else self.value(raw, where, kind[:-1])
        if kind.startswith("map:"):
            if not isinstance(raw, dict):
                self.fail(where, f"expected an object, got {raw!r}")
            return {key: self.value(item, f"{where}.{key}", kind[4:]) for key, item in raw.items()}
        match kind:
            case "int":
                return self.integer(raw, where, minimum=-(2**63), maximum=2**63 - 1)
            case "number" | "usage":
                return self.number(raw, where, kind)
            case "str":
                return self.string(raw, where)
            case "bool":
                if not isinstance(raw, bool):
                    self.fail(where, f"expected true or false, got {raw!r}")
                return raw
            case "ints" | "strs":
                item = "int" if kind == "ints" else "str"
                if not isinstance(raw, list):
                    self.fail(where, f"expected a list, got {raw!r}")
                return [self.value(x, f"{where}[{n}]", item) for n, x in enumerate(raw)]
            case "tolerance":
                if isinstance(raw, dict):
                    band = self.typed(raw, where, {"value": "number", "epsilon": "usage"})
                    return band
                return self.number(raw, where, "number")
            case "loops":
                if not isinstance(raw, list) or not raw:
                    self.fail(where, f"expected a list of acceptors, got {raw!r}")
                return [self.acceptor(item, f"{where}[{n}]") for n, item in enumerate(raw)]
        raise AssertionError(f"unknown kind {kind}")  # pragma: no cover - a bug in OPS

    def acceptor(self, raw: object, where: str) -> dict[str, Any]:
        fields = self.fields(
            raw, where, required=set(_LOOP.fields), optional={"expect_ip_throttle", "expect"}
        )
        spec = {**_LOOP.fields, "expect_ip_throttle": "bool"}
        loop = {
            key: self.value(fields[key], f"{where}.{key}", spec[key])
            for key in spec
            if key in fields
        }
        self.integer(loop["count"], f"{where}.count", minimum=1, maximum=10**7)
        self.integer(loop["interval_ms"], f"{where}.interval_ms", minimum=0, maximum=10**7)
        if "expect" in fields:
            loop["expect"] = self.typed(
                fields["expect"], f"{where}.expect", _LOOP.expect, partial=True
            )
        return loop


# -- replaying -------------------------------------------------------------------------------


def replay_admin(scenario: AdminScenario) -> Result:
    """Drive kquota's core through ``scenario``; stops at the first mismatch.

    A value the core refuses (e.g. an unknown listener) is reported as a mismatch of the
    step's ``error`` field rather than raised, so one bad file does not stop a run.
    """
    driver = _DRIVERS[scenario.quota_type](scenario).apply
    checked = 0
    for step in scenario.steps:
        try:
            outputs = driver(step)
        except KquotaError as exc:
            mismatch = Mismatch(step.index, step.op, step.t_ms, "error", None, str(exc))
            return Result(scenario.name, len(scenario.steps), checked, mismatch)
        loops = outputs.pop("_loops", [])
        found = _differences(step.expect or {}, outputs, "")
        for loop_index, expect, actual in loops:
            found += _differences(expect, actual, f"loops[{loop_index}].")
        if step.expect is not None or any(
            "expect" in loop for loop in step.fields.get("loops", [])
        ):
            checked += 1
        if found:
            field, expected, actual = found[0]
            mismatch = Mismatch(step.index, step.op, step.t_ms, field, expected, actual)
            return Result(scenario.name, len(scenario.steps), checked, mismatch)
    return Result(scenario.name, len(scenario.steps), checked, None)


class _Driver(Protocol):
    def apply(self, step: AdminStep) -> dict[str, Any]: ...


def _differences(
    expect: Mapping[str, Any], actual: Mapping[str, Any], prefix: str
) -> list[tuple[str, Any, Any]]:
    """(field, expected, actual) for every expected output that differs."""
    found: list[tuple[str, Any, Any]] = []
    for key, want in expect.items():
        have = actual.get(key)
        where = f"{prefix}{key}"
        if isinstance(want, dict) and want.keys() == {"value", "epsilon"} and key == "rate":
            if not (_is_number(have) and abs(have - want["value"]) <= want["epsilon"]):
                found.append((where, want, have))
        elif isinstance(want, dict):
            found += _differences(want, have if isinstance(have, dict) else {}, f"{where}.")
        elif not _same(want, have):
            found.append((where, want, have))
    return found


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same(want: Any, have: Any) -> bool:
    if isinstance(want, bool) or isinstance(have, bool):
        return want is have
    if _is_number(want) and _is_number(have):
        return float(have) == float(want) or (math.isnan(have) and math.isnan(want))
    return bool(want == have)


class _TokenBucket:
    def __init__(self, scenario: AdminScenario) -> None:
        self._quota = float(scenario.quotas[0]["value"])
        self._bucket = kquota.TokenBucket(
            self._quota, num_samples=scenario.num_samples, window_ms=scenario.window_ms
        )

    def apply(self, step: AdminStep) -> dict[str, Any]:
        match step.op:
            case "measure":
                return {"tokens": self._bucket.measure(step.t_ms)}
            case "record":
                self._bucket.record(step.fields["value"], step.t_ms)
                return {}
            case _:  # throttle_time
                return {
                    "throttle_ms": kquota.token_bucket_throttle_time(
                        step.fields["tokens"], self._quota
                    )
                }


class _Mutations:
    def __init__(self, scenario: AdminScenario) -> None:
        self._manager = kquota.ControllerMutationQuotaManager(
            num_samples=scenario.num_samples, window_ms=scenario.window_ms
        )
        for quota in scenario.quotas:
            self._manager.set_quota(
                kquota.Entity(quota["user"], quota["client_id"]), quota["value"]
            )
        self._requests: dict[str, kquota.MutationRequestQuota] = {}

    def apply(self, step: AdminStep) -> dict[str, Any]:
        m, t, f = self._manager, step.t_ms, step.fields
        match step.op:
            case "record":
                return {"throttle_ms": m.record(f["user"], f["client_id"], f["value"], t)}
            case "request":
                request = m.request_quota(f["user"], f["client_id"], f["strict"], t)
                self._requests[f["request"]] = request
                return {"exceeded": request.is_exceeded}
            case "request_record" | "request_throttle_time":
                request = self._requests[f["request"]]
                if step.op == "request_throttle_time":
                    return {"throttle_time_ms": request.throttle_time(t)}
                check = request.record(f["value"], t)
                return {
                    "accepted": check.accepted,
                    "exceeded": request.is_exceeded,
                    "throttle_time_ms": request.throttle_time(t),
                }
            case "throttle":
                m.throttle(f["user"], f["client_id"], f["throttle_ms"], t, f["channel"])
                return {"queue_size": m.queue_size}
            case "drain":
                return {"channels": m.expired_channels(t), "queue_size": m.queue_size}
            case "set_quota":
                m.set_quota(kquota.Entity(f["user"], f["client_id"]), f["value"])
                return {}
            case "remove_quota":
                m.remove_quota(kquota.Entity(f["user"], f["client_id"]))
                return {}
            case _:  # sensors
                return {"names": m.sensor_names()}


@dataclass
class _Acceptor:
    """One acceptor thread of Kafka's ``ConnectionQuotasTest.acceptConnections``: a
    connection every ``interval_ms`` (or as fast as the quotas let it), on its own clock."""

    spec: Mapping[str, Any]
    clock: int
    start: int
    next_send: int
    done: int = 0
    accepted: int = 0
    blocked: bool = False
    ip_throttled: bool = False
    stopped: bool = False


class _Connections:
    def __init__(self, scenario: AdminScenario) -> None:
        broker_rate = scenario.broker["max_connection_creation_rate"]
        self._quotas = kquota.ConnectionQuotas(
            num_samples=scenario.num_samples,
            window_ms=scenario.window_ms,
            max_connection_creation_rate=(
                kquota.UNLIMITED_CONNECTION_RATE if broker_rate is None else broker_rate
            ),
            inter_broker_listener=scenario.broker["inter_broker_listener"],
        )
        for listener in scenario.listeners:
            self._quotas.add_listener(listener["name"], listener["max_connection_creation_rate"])
        self._counts: dict[str, int] = {}  # connections per IP, as ConnectionQuotas.get
        self._blocked: dict[str, bool] = {}  # listener -> an acceptor waited

    def apply(self, step: AdminStep) -> dict[str, Any]:
        q, t, f = self._quotas, step.t_ms, step.fields
        match step.op:
            case "set_ip_quota":
                q.set_ip_quota(f["ip"], f["value"])
            case "set_broker_max_rate":
                q.set_broker_max_rate(f["value"])
            case "set_listener_max_rate":
                q.set_listener_max_rate(f["listener"], f["value"])
            case "connect":
                decision = q.on_new_connection(f["listener"], f["ip"], t)
                if decision.ip_throttle_ms <= 0:
                    self._counts[f["ip"]] = self._counts.get(f["ip"], 0) + 1
                return {
                    "accept_delay_ms": decision.accept_delay_ms,
                    "ip_throttle_ms": decision.ip_throttle_ms,
                }
            case "accept_connections":
                return {"_loops": self._accept(f["loops"], t)}
            case "count":
                return {"connections": self._counts.get(f["ip"], 0)}
            case "rates":
                expect = step.expect or {}
                return {
                    "ip": {ip: q.ip_rate(ip, t) for ip in expect.get("ip", {})},
                    "listener": {
                        name: q.listener_rate(name, t) for name in expect.get("listener", {})
                    },
                    "broker": q.broker_rate(t),
                }
            case "ip_quota":
                return {"quota": q.ip_quota(f["ip"]), "bound": q.ip_bound(f["ip"])}
            case _:  # listener_throttle
                _, ip_average = q.listener_throttle_avgs(f["listener"], t)
                # Kafka reads the Avg as a long (NaN -> 0); "blocked" when an acceptor waited
                # (Kafka's BlockedPercent meter).
                return {
                    "ip_throttled": not math.isnan(ip_average) and int(ip_average) > 0,
                    "blocked": self._blocked.get(f["listener"], False),
                }
        return {}

    def _accept(self, loops: list[Mapping[str, Any]], t_ms: int) -> list[tuple[int, Any, Any]]:
        acceptors = [_Acceptor(spec, t_ms, t_ms, t_ms + spec["interval_ms"]) for spec in loops]
        while True:
            running = [a for a in acceptors if not a.stopped and a.done < a.spec["count"]]
            if not running:
                break
            a = min(running, key=lambda acceptor: acceptor.clock)  # ties: in the order listed
            listener, ip = a.spec["listener"], a.spec["ip"]
            decision = self._quotas.on_new_connection(listener, ip, a.clock)
            a.clock += decision.accept_delay_ms
            a.blocked |= decision.accept_delay_ms > 0
            a.done += 1
            if decision.ip_throttle_ms > 0:
                a.ip_throttled = True
                if not a.spec.get("expect_ip_throttle", False):
                    a.stopped = True  # Kafka's loop ends on the ConnectionThrottledException
                    continue
            else:
                a.accepted += 1
                self._counts[ip] = self._counts.get(ip, 0) + 1
            a.clock = max(a.clock, a.next_send)
            a.next_send += a.spec["interval_ms"]
        results = []
        for index, a in enumerate(acceptors):
            listener = a.spec["listener"]
            self._blocked[listener] = self._blocked.get(listener, False) or a.blocked
            elapsed = (a.clock - a.start) / 1000.0
            actual = {
                "accepted": a.accepted,
                "blocked": a.blocked,
                "ip_throttled": a.ip_throttled,
                "end_t_ms": a.clock,
                "rate": a.accepted / elapsed if elapsed else math.inf,
            }
            results.append((index, a.spec.get("expect", {}), actual))
        return results


_DRIVERS: Final[Mapping[str, Callable[[AdminScenario], _Driver]]] = {
    "token_bucket": _TokenBucket,
    "controller_mutation": _Mutations,
    "connection_rate": _Connections,
}
"""Each ``quota_type``'s driver: its constructor sets up the core objects."""
