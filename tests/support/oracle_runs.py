"""kquota's side of the traces the tests against Apache Kafka's quota classes compare
(``test_kafka_oracle*.py`` in ``tests/core``), one family at a time (client quotas,
controller mutations, connection creation rates, a bare ``Rate`` or ``TokenBucket``):
each trace runs through fresh kquota objects, following the Kafka release it is compared
with, and each ``kafka_*_view`` puts Kafka's answer in the form kquota's is compared in.
"""

from __future__ import annotations

from typing import Any, Final

import kquota
from oracle_traces import TYPES, UNLIMITED, Trace, attempt, canon, entity_of, kcanon

# == produce, fetch and request ============================================================

READ_FIELDS: Final = ("tags", "quota", "bound", "rate", "tavg")
"""What a client ``read`` answers, in the order Kafka's oracle reads them."""


class ClientRun:
    """kquota's produce, fetch and request managers driven by one client trace."""

    def __init__(self, trace: Trace, kafka_version: str) -> None:
        config = trace.config
        self.managers = {
            m: kquota.QuotaManager(
                m,
                num_samples=config["samples"],
                window_ms=1000 * config["window_s"],
                kafka_version=kafka_version,
            )
            for m in TYPES
        }
        # rid -> user, client, whether Kafka installs a network-thread callback, exempt
        self.requests: dict[int, tuple[str, str, bool, bool]] = {}

    def apply(self, op: dict[str, Any]) -> dict[str, Any]:
        kind, t = op["op"], op["t"]
        mgr = self.managers[op.get("m", "produce")]
        u, c = op.get("u", ""), op.get("c", "")
        match kind:
            case "set":
                mgr.set_quota(entity_of(op), op["q"])
            case "remove":
                mgr.remove_quota(entity_of(op))
            case "record":
                value = float(op["ns"]) if mgr.quota_type == "request" else op["v"]
                if mgr.quota_type == "request":
                    # Kafka installs the network-thread callback only with quotas on.
                    self.requests[op["rid"]] = (u, c, mgr.enabled, False)
                throttle = mgr.record(u, c, value, t)
                if throttle > 0:
                    if op.get("unrec"):
                        mgr.unrecord(u, c, value, t)
                    if "ch" in op:
                        mgr.throttle(u, c, throttle, t, channel=op["ch"])
                return {"th": throttle}
            case "exempt":
                # Kafka records exempt time (and installs its callback) only with request
                # quotas on, into exempt-request-time: kquota keeps no such metric.
                self.requests[op["rid"]] = (u, c, mgr.enabled, True)
            case "network":
                user, client, installed, exempt = self.requests.pop(op["rid"])
                if installed and not exempt:
                    mgr.record_no_throttle(user, client, float(op["ns"]), t)
                return {"cb": installed}
            case "unrecord":
                mgr.unrecord(u, c, op["v"], t)
            case "nothrottle":
                # request: the network thread's nanoseconds, as Kafka's callback records
                value = float(op["ns"]) if mgr.quota_type == "request" else op["v"]
                mgr.record_no_throttle(u, c, value, t)
            case "throttle":
                mgr.throttle(u, c, op["ms"], t, channel=op["ch"])
            case "drain":
                return {"ch": sorted(mgr.expired_channels(t))}
            case "read":
                # Only the fields asked, in Kafka's order (a rate or an average read
                # purges, as a JMX read does).
                quota = mgr.quota_for(u, c)
                readers = {
                    "tags": lambda: list(mgr.tags(u, c)),
                    "quota": lambda: canon(UNLIMITED if quota is None else quota),
                    "bound": lambda: canon(mgr.bound(u, c)),
                    "rate": lambda: canon(mgr.measure(u, c, t)),
                    "tavg": lambda: canon(mgr.throttle_time_avg(u, c, t)),
                }
                fields = op.get("fields", READ_FIELDS)
                return {k: readers[k]() for k in READ_FIELDS if k in fields}
            case "qsize":
                return {"n": mgr.queue_size()}
            case "maxval":
                return {"v": canon(mgr.max_value_in_quota_window(u, c, t))}
            case "expire":
                return {
                    "removed": sorted(
                        n for m in self.managers.values() for n in m.expire_sensors(t)
                    )
                }
            case "sensors":
                return {
                    "names": sorted(n for m in self.managers.values() for n in m.sensor_names())
                }
            case "snapshot":
                rows = [
                    [r.user, r.client_id, canon(r.rate), canon(r.bound), canon(r.throttle_time_avg)]
                    for r in mgr.snapshot(t)
                ]
                return {"rows": sorted(rows, key=lambda row: (row[0], row[1]))}
            case "enabled":
                return {"on": mgr.enabled}
        return {}


def run_client_trace(trace: Trace, kafka_version: str) -> list[dict[str, Any]]:
    run = ClientRun(trace, kafka_version)
    return [attempt(lambda op=op: run.apply(op)) for op in trace.ops]


def kafka_client_view(op: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """Kafka's answer in the terms kquota's is written in."""
    match op["op"]:
        case "read":
            return {
                k: answer[k] if k == "tags" else kcanon(answer[k])
                for k in READ_FIELDS
                if k in answer
            }
        case "qsize":
            return {"n": int(answer["n"])}
        case "maxval":
            return {"v": kcanon(answer["v"])}
        case "snapshot":
            return {
                "rows": [
                    [u, c, kcanon(r), kcanon(b), kcanon(a)] for u, c, r, b, a in answer["rows"]
                ]
            }
    return answer


# == controller mutations ==================================================================


def run_mutation_trace(trace: Trace, kafka_version: str) -> list[dict[str, Any]]:
    mgr = kquota.ControllerMutationQuotaManager(
        num_samples=trace.config["samples"],
        window_ms=1000 * trace.config["window_s"],
        kafka_version=kafka_version,
    )
    requests: dict[int, kquota.MutationRequestQuota] = {}

    def apply(op: dict[str, Any]) -> dict[str, Any]:
        kind, t = op["op"], op["t"]
        u, c = op.get("u", ""), op.get("c", "")
        match kind:
            case "set":
                mgr.set_quota(entity_of(op), op["q"])
            case "remove":
                mgr.remove_quota(entity_of(op))
            case "record":
                return {"th": mgr.record(u, c, op["v"], t)}
            case "strict" | "permissive":
                record = mgr.record_strict if kind == "strict" else mgr.record_permissive
                check = record(u, c, op["v"], t)
                return {"ok": check.accepted, "last": check.throttle_ms}
            case "rq_open":
                request = mgr.request_quota(u, c, op["strict"], t)
                requests[op["rid"]] = request
                return {"exc": request.is_exceeded}
            case "rq_record":
                request = requests[op["rid"]]
                check = request.record(op["v"], t)
                return {
                    "ok": check.accepted,
                    "last": request.last_throttle_ms,
                    "exc": request.is_exceeded,
                    "th": request.throttle_time(t),
                }
            case "rq_throttle":
                return {"th": requests[op["rid"]].throttle_time(t)}
            case "throttle":
                mgr.throttle(u, c, op["ms"], t, channel=op["ch"])
            case "drain":
                return {"ch": sorted(mgr.expired_channels(t))}
            case "read":
                quota = mgr.quota_for(u, c)
                return {
                    "tags": list(mgr.tags(u, c)),
                    "quota": canon(UNLIMITED if quota is None else quota),
                    "tokens": canon(mgr.tokens(u, c, t)),
                    "mrate": canon(mgr.mutation_rate(u, c, t)),
                    "tavg": canon(mgr.throttle_time_avg(u, c, t)),
                }
            case "qsize":
                return {"n": mgr.queue_size}
            case "expire":
                return {"removed": sorted(mgr.expire_sensors(t))}
            case "sensors":
                return {"names": sorted(mgr.sensor_names())}
            case "enabled":
                return {"on": mgr.enabled}
        return {}

    return [attempt(lambda op=op: apply(op)) for op in trace.ops]


def kafka_mutation_view(op: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    match op["op"]:
        case "read":
            return {
                "tags": answer["tags"],
                **{k: kcanon(answer[k]) for k in ("quota", "tokens", "mrate", "tavg")},
            }
        case "qsize":
            return {"n": int(answer["n"])}
        case "strict" | "permissive":
            # A fresh quota object per record: accepted, and the throttle it computed
            # (an unbounded quota, while quotas are off, computes none).
            return {"ok": answer["ok"], "last": answer.get("last", 0)}
        case "rq_record":
            return {
                "ok": answer["ok"],
                "last": answer.get("last", 0),
                "exc": answer["exc"],
                "th": answer["th"],
            }
    return answer


# == connection creation rates =============================================================


def run_connection_trace(trace: Trace, kafka_version: str) -> list[dict[str, Any]]:
    del kafka_version  # the same in every release kquota follows
    config = trace.config
    broker_rate = config["broker_rate"]
    q = kquota.ConnectionQuotas(
        num_samples=config["samples"],
        window_ms=1000 * config["window_s"],
        max_connection_creation_rate=kquota.UNLIMITED_CONNECTION_RATE
        if broker_rate is None
        else broker_rate,
        inter_broker_listener=config["ibl"],
    )
    for name, rate in config["listeners"]:
        q.add_listener(name, rate)

    def apply(op: dict[str, Any]) -> dict[str, Any]:
        kind, t = op["op"], op["t"]
        match kind:
            case "set_ip":
                q.set_ip_quota(op["ip"], op["rate"])
            case "set_broker":
                q.set_broker_max_rate(op["rate"])
            case "add_listener":
                q.add_listener(op["l"], op["rate"])
            case "set_listener":
                q.set_listener_max_rate(op["l"], op["rate"])
            case "remove_listener":
                q.remove_listener(op["l"])
            case "accept":
                return {"d": q.accept_delay(op["l"], t)}
            case "admit":
                return {"th": q.admit_ip(op["l"], op["ip"], t)}
            case "connect":
                decision = q.on_new_connection(op["l"], op["ip"], t)
                return {"d": decision.accept_delay_ms, "th": decision.ip_throttle_ms}
            case "read":
                return {
                    "broker": canon(q.broker_rate(t)),
                    "listeners": {
                        name: [
                            canon(q.listener_rate(name, t)),
                            *map(canon, q.listener_throttle_avgs(name, t)),
                        ]
                        for name in op["ls"]
                    },
                    "ips": {
                        ip: [canon(q.ip_rate(ip, t)), canon(q.ip_bound(ip)), q.ip_quota(ip)]
                        for ip in op["ips"]
                    },
                }
            case "expire":
                return {"removed": sorted(q.expire_sensors(t))}
            case "sensors":
                return {"names": sorted(q.ip_sensor_names())}
        return {}

    return [attempt(lambda op=op: apply(op)) for op in trace.ops]


def kafka_connection_view(op: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    if op["op"] != "read":
        return answer
    return {
        "broker": kcanon(answer["broker"]),
        "listeners": {name: [kcanon(b) for b in row] for name, row in answer["listeners"].items()},
        "ips": {ip: [kcanon(r), kcanon(b), quota] for ip, (r, b, quota) in answer["ips"].items()},
    }


# == one bare Rate, one bare TokenBucket ===================================================


def run_sensor_trace(trace: Trace, kafka_version: str) -> list[dict[str, Any]]:
    del kafka_version  # the same in every release kquota follows
    config = trace.config
    rate = kquota.SampledRate(config["samples"], config["window_ms"], config["q"])

    def apply(op: dict[str, Any]) -> dict[str, Any]:
        match op["op"]:
            case "rec":
                check = rate.record(op["v"], op["t"])
                return {"viol": check.violated, "th": check.throttle_ms, "rate": canon(check.rate)}
            case "rec_nc":
                rate.record_no_check(op["v"], op["t"])
            case "measure":
                return {"rate": canon(rate.measure(op["t"]))}
            case "setq":
                rate.set_quota(op["q"])
        return {}

    return [attempt(lambda op=op: apply(op)) for op in trace.ops]


def run_bucket_trace(trace: Trace, kafka_version: str) -> list[dict[str, Any]]:
    del kafka_version  # the same in every release kquota follows
    config = trace.config
    bucket = kquota.TokenBucket(
        config["q"], num_samples=config["samples"], window_ms=config["window_ms"]
    )

    def apply(op: dict[str, Any]) -> dict[str, Any]:
        match op["op"]:
            case "rec":
                bucket.record(op["v"], op["t"])
            case "measure":
                return {"tokens": canon(bucket.measure(op["t"]))}
            case "strict" | "permissive":
                record = bucket.record_strict if op["op"] == "strict" else bucket.record_permissive
                check = record(op["v"], op["t"])
                return {"ok": check.accepted, "th": check.throttle_ms}
            case "setq":
                bucket.set_quota(op["q"])
        return {}

    return [attempt(lambda op=op: apply(op)) for op in trace.ops]


def kafka_bare_view(op: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    if "rate" in answer:
        return {**answer, "rate": kcanon(answer["rate"])}
    if "tokens" in answer:
        return {"tokens": kcanon(answer["tokens"])}
    return answer
