"""Real workloads under quotas that a real Kafka broker enforces, recorded in its request
log, for the agreement test (tests/backtest/test_request_log_agreement.py; no tests here).

:func:`record` runs, one after the other, on a :class:`~kafka_support.KafkaBroker` whose
quotas are set with Kafka's own ``kafka-configs`` (:data:`QUOTAS`, one client id each):

* ``greedy`` (librdkafka producer, acks=1) over ``producer_byte_rate``;
* ``reader`` (librdkafka consumer) over ``consumer_byte_rate``, on a topic filled first by
  ``prefill`` (no quota);
* ``catchup`` (librdkafka consumer) over a lower ``consumer_byte_rate``, catching up on a
  topic of 1 MB batches with 1 MB fetches: each fetch is several seconds of its quota, so
  most of its throttle is on fetches Kafka answered empty;
* ``busy`` (librdkafka producer, no byte quota) over ``request_percentage``;
* ``admin`` (kafka-python's admin client) creating, growing and deleting topics over a
  strict ``controller_mutation_rate``: the broker refuses one and it is sent again.

The same quotas as a kquota configuration: :func:`quota_config`. Then the comparison of the
back-test's throttles with the broker's: :func:`agreement` per quota type and API, and the
variants of the traffic (:func:`origins`, :func:`own_times`) that :func:`classify` uses to
say what reproduces each difference. The workloads are fixed (durations, sizes, seeds);
what a real broker on a shared machine does with them varies a little from run to run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

from kafka_support import KafkaBroker, completed_request, kafka_configs
from side_by_side_runs import Run
from side_by_side_support import Side, greedy_librdkafka_producer, librdkafka_consumer, prefill

QUOTAS: Final[Mapping[str, Mapping[str, float]]] = {
    "greedy": {"producer_byte_rate": 256 * 1024},
    "reader": {"consumer_byte_rate": 256 * 1024},
    "catchup": {"consumer_byte_rate": 150_000},
    "busy": {"request_percentage": 5},
    "admin": {"controller_mutation_rate": 8},
}
"""The quota of each workload's client id (Kafka's names and units)."""

PRODUCE_S: Final = 4.0
CONSUME_S: Final = 3.0
BUSY_S: Final = 3.0
PREFILL_BYTES: Final = 3 * 1024 * 1024  # more than CONSUME_S seconds of the fetch quota
CATCHUP_S: Final = 14.0
CATCHUP_FETCH_BYTES: Final = 1024 * 1024
CATCHUP_BYTES: Final = 4 * CATCHUP_FETCH_BYTES  # more than CATCHUP_S seconds of its quota
WAIT_S: Final = 60.0  # bounds a wait for Kafka; never a measurement


def quota_config(scale: float = 1.0) -> dict[str, Any]:
    """:data:`QUOTAS` (times ``scale``) in kquota's quota file format, with Kafka's default
    windows (``quota.window.num`` 11 of ``quota.window.size.seconds`` 1)."""
    return {
        "window": {"num_samples": 11, "window_ms": 1000},
        "quotas": [
            {"entity": {"client-id": client}, "config": {k: v * scale for k, v in quota.items()}}
            for client, quota in QUOTAS.items()
        ],
    }


MUTATION_TOPICS: Final = 5
MUTATION_PARTITIONS: Final = 24


def _admin(bootstrap: str) -> list[int]:
    """kafka-python's admin client (CreateTopics v7, DeleteTopics v6: strict) creates a
    topic of 2 partitions, grows it to 4 and deletes it; then creates
    :data:`MUTATION_TOPICS` topics of :data:`MUTATION_PARTITIONS` partitions one request at a
    time, more than the quota's burst: the broker refuses the last one
    (THROTTLING_QUOTA_EXCEEDED), which is sent again until created. The error codes the
    broker gave."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import NodeNotReadyError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="admin")
    errors: list[int] = []

    def send(call: Any, results: str) -> None:
        """``call()`` until the broker accepts it. kafka-python refuses to send while the
        connection is paused for the broker's throttle (NodeNotReadyError), leaving the
        waiting to the application."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                response = call()
            except NodeNotReadyError:
                time.sleep(0.02)
                continue
            # a dict (create_topics, delete_topics) or the response itself
            items = response[results] if isinstance(response, dict) else getattr(response, results)
            codes = [int(r["error_code"] if isinstance(r, dict) else r.error_code) for r in items]
            errors.extend(c for c in codes if c)
            if not any(codes):
                return
        raise RuntimeError(f"the admin client was refused for {WAIT_S:g} s: {errors}")

    def create(name: str, partitions: int) -> None:
        spec = {name: {"num_partitions": partitions, "replication_factor": 1}}
        send(lambda: admin.create_topics(spec, raise_errors=False), "topics")

    try:
        create("mutated", 2)
        send(lambda: admin.create_partitions({"mutated": 4}, raise_errors=False), "results")
        send(lambda: admin.delete_topics(["mutated"], raise_errors=False), "topics")
        for i in range(MUTATION_TOPICS):
            create(f"mutated-{i}", MUTATION_PARTITIONS)
    finally:
        admin.close()
    return errors


def set_quotas(broker: KafkaBroker) -> None:
    """Set :data:`QUOTAS` with Kafka's ``kafka-configs`` (one tool per client id, side by
    side); return once the broker describes them all."""
    from concurrent.futures import ThreadPoolExecutor

    def alter(client: str) -> str:
        settings = ",".join(f"{k}={v:g}" for k, v in QUOTAS[client].items())
        entity = ("--entity-type", "clients", "--entity-name", client)
        return kafka_configs(broker.bootstrap, "--alter", "--add-config", settings, *entity)

    with ThreadPoolExecutor(len(QUOTAS)) as pool:
        list(pool.map(alter, QUOTAS))
    deadline = time.monotonic() + WAIT_S
    while True:
        described = kafka_configs(broker.bootstrap, "--describe", "--entity-type", "clients")
        if all(f"'{client}'" in described for client in QUOTAS):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"Kafka did not report every quota of {QUOTAS}:\n{described}")
        time.sleep(0.5)


def record(broker: KafkaBroker) -> dict[str, Run]:
    """Set :data:`QUOTAS` on ``broker``, then run every workload against it, one after the
    other; what each client saw, by client id (``admin``: its run's failures are the error
    codes the broker answered)."""
    set_quotas(broker)
    runs: dict[str, Run] = {}

    def run(client: str, workload: Any) -> None:
        runs[client] = Run("kafka", client, next(iter(QUOTAS[client].values())))
        workload(Side("kafka", broker.bootstrap, client), runs[client])

    run("greedy", greedy_librdkafka_producer("produced", PRODUCE_S))
    prefill(broker.bootstrap, "feed", PREFILL_BYTES)
    run("reader", librdkafka_consumer("feed", CONSUME_S))
    # batches of librdkafka's largest message (message.max.bytes' default)
    prefill(broker.bootstrap, "backlog", CATCHUP_BYTES, batch_bytes=1_000_000)
    run("catchup", librdkafka_consumer("backlog", CATCHUP_S, CATCHUP_FETCH_BYTES))
    run("busy", greedy_librdkafka_producer("busy", BUSY_S))
    runs["admin"] = Run("kafka", "admin", QUOTAS["admin"]["controller_mutation_rate"])
    runs["admin"].failures = [f"error {code}" for code in _admin(broker.bootstrap)]
    time.sleep(1.0)  # the last lines follow the last responses
    return runs


# -- the comparison -----------------------------------------------------------------------

QUOTA_TYPES: Final = {
    "producer_byte_rate": "produce",
    "consumer_byte_rate": "fetch",
    "request_percentage": "request",
    "controller_mutation_rate": "mutation",
}
MUTATION_APIS: Final = ("create_topics", "create_partitions", "delete_topics")
ROW: Final = "agreement_row"
"""A column of the variants' traffic: the row of the imported traffic it varies."""
BOUND: Final = "agreement_bound"
"""A column of the variants' traffic: the row's bound (:func:`record_bounds`)."""


def quota_type_of(client: str) -> str | None:
    """The quota type of the client id's quota, or None (no quota)."""
    quota = QUOTAS.get(client)
    return QUOTA_TYPES[next(iter(quota))] if quota else None


def in_group(frame: Any) -> Any:
    """The rows whose throttle the client's quota decides: its produce, fetch or mutation
    requests, or (request quota) every request of the client."""
    import numpy as np

    kind = frame["client_id"].map(quota_type_of)
    api = frame["api"]
    return (
        ((kind == "produce") & (api == "produce"))
        | ((kind == "fetch") & (api == "fetch"))
        | ((kind == "mutation") & api.isin(MUTATION_APIS))
        | (kind == "request")
    ).to_numpy(dtype=np.bool_)


def record_bounds(lines: list[str]) -> dict[tuple[str, str, int, int], int]:
    """For every request line, keyed by (client id, API, correlation id, the record time
    the import rebuilds), how much earlier than that time Kafka may have read its clock
    for the quota, in whole ms: ``localTimeMs + remoteTimeMs``, rounded up. Kafka reads it
    on the handler thread (produce: in the callback after the append; a mutation: on the
    controller), after the request was dequeued and before the response was handed over;
    the import takes the hand-over (``end - responseQueueTimeMs - sendTimeMs``). A mutation
    the broker forwarded is keyed by its controller's line too, at the time the import
    takes from it (that line's hand-over to the controller's event loop, before its remote
    time, the metadata commit), with that line's local time as the bound."""
    import json
    import math
    from datetime import UTC, datetime

    out = {}
    for text in lines:
        head, found, body = text.partition(" Completed request:")
        if not found:
            continue
        document = json.loads(body.removesuffix(" (kafka.request.logger)"))
        forwarded = bool(document.get("isForwarded"))
        api = document["requestHeader"]["requestApiKeyName"].lower()
        if forwarded and api not in MUTATION_APIS:
            continue
        end = datetime.strptime(head[1:24], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC)
        end_us = int(end.timestamp()) * 1_000_000 + end.microsecond
        handed = end_us - round(document["responseQueueTimeMs"] * 1000)
        handed -= round(document["sendTimeMs"] * 1000)
        if forwarded:
            handed -= round(document["remoteTimeMs"] * 1000)
        header = document["requestHeader"]
        key = (
            header.get("clientId") or "",
            header["requestApiKeyName"].lower(),
            int(header["correlationId"]),
            handed // 1000,
        )
        remote = 0.0 if forwarded else document["remoteTimeMs"]
        out[key] = math.ceil(document["localTimeMs"] + remote)
    return out


def _bound(bounds: dict[tuple[str, str, int, int], int], row: Any) -> int:
    key = (row["client_id"], row["api"], int(row["correlation_id"]), int(row["ts_ms"]))
    return bounds[key]


def origins(traffic: Any, bounds: dict[tuple[str, str, int, int], int]) -> tuple[Any, Any]:
    """The first variants: the rows of the quota'd clients (:func:`in_group`) of the
    imported ``traffic`` (:data:`ROW`: their row in it), once per variant, each under a
    broker of its own (``<client>/<shift>/<sizes>``) so that one back-test replays them all
    apart; and a frame of the variants (client, shift, sizes, the first row's bound).

    * shift ``s``: the client's first request moved ``s`` ms earlier (``-1``: 1 ms later),
      at most its bound (:func:`record_bounds`): a sensor's windows are aligned on its
      first record, so that time moves every later throttle, by about 1 ms per ms;
    * sizes ``1`` (fetch quota only): each fetch the broker throttled, which the log gives
      0 bytes (Kafka sends an empty response and un-records the size it checked), gets the
      size of the client's previous non-empty fetch response, which a consumer asks again.

    The request-quota client gets shift 0 only: what its replay misses is not time."""
    import numpy as np
    import pandas as pd

    rows = traffic.assign(**{ROW: np.arange(len(traffic))})[in_group(traffic)]
    rows[BOUND] = [_bound(bounds, row) for _, row in rows.iterrows()]
    parts, described = [], []
    for client, mine in rows.groupby("client_id", sort=True):
        mine = mine.sort_values(["ts_ms", ROW], kind="stable")
        bound = int(mine[BOUND].iloc[0])
        kind = quota_type_of(str(client))
        sized = mine["bytes"].copy()
        if kind == "fetch":
            given = mine["bytes"].where(mine["bytes"] > 0).ffill()
            refused = (mine["kafka_throttle_ms"] > 0) & (mine["bytes"] == 0)
            sized[refused] = given[refused].fillna(0).astype(sized.dtype)
        for shift in [0] if kind == "request" else [-1, *range(bound + 1)]:
            times = mine["ts_ms"].to_numpy().copy()
            times[0] -= shift
            for sizes in (0, 1) if kind == "fetch" else (0,):
                broker = f"{client}/{shift}/{sizes}"
                part = mine.assign(ts_ms=times, broker=broker)
                if sizes:
                    part["bytes"] = sized
                parts.append(part)
                described.append((client, shift, sizes, bound, 0, broker))
    return pd.concat(parts, ignore_index=True), pd.DataFrame(described, columns=DESCRIBED)


DESCRIBED: Final = ["client_id", "shift", "sizes", "bound", "own", "broker"]


def best_origins(replayed: Any) -> Any:
    """Per client, the variant of :func:`origins` (shift, sizes) that makes the most of its
    throttles equal to Kafka's (ties: the smallest shift, the logged sizes); ``replayed``:
    their back-test's requests joined to their frame."""
    frame = replayed.assign(equal=replayed["throttle_ms"] == replayed["kafka_throttle_ms"])
    counts = frame.groupby(["client_id", "shift", "sizes", "bound"])["equal"].sum().reset_index()
    counts["order"] = counts["shift"].abs()
    return (
        counts.sort_values(
            ["client_id", "equal", "order", "sizes"], ascending=[True, False, True, True]
        )
        .groupby("client_id")
        .head(1)
        .set_index("client_id")[["shift", "sizes", "bound", "equal"]]
    )


def own_times(varied: Any, replayed: Any, best: Any) -> tuple[Any, Any]:
    """The second variants: each client's rows under its best origin (:func:`best_origins`),
    with every request (but the first) whose throttle still differs from Kafka's moved by
    ``d`` ms, at most its own bound earlier and 1 ms later, for each ``d`` (brokers
    ``<client>/<shift>/<sizes>/<d>``); and their frame as :func:`origins` gives it."""
    import numpy as np
    import pandas as pd

    parts, described = [], []
    for client, choice in best.iterrows():
        if quota_type_of(str(client)) == "request":
            continue
        broker = f"{client}/{choice['shift']}/{choice['sizes']}"
        mine = varied[varied["broker"] == broker].sort_values(["ts_ms", ROW], kind="stable")
        result = replayed[replayed["broker"] == broker].set_index(ROW)
        differ = (result["throttle_ms"] != result["kafka_throttle_ms"]).reindex(mine[ROW])
        differ = differ.to_numpy(dtype=np.bool_)
        differ[0] = False  # the first one is the origin
        own = mine[BOUND].to_numpy()
        for moved in range(-int(own[differ].max(initial=0)), 2):
            if moved == 0 or not differ.any():
                continue
            times = mine["ts_ms"].to_numpy() - np.where(differ, np.minimum(-moved, own), 0)
            name = f"{broker}/{moved}"
            parts.append(mine.assign(ts_ms=times, broker=name))
            described.append((client, choice["shift"], choice["sizes"], 0, moved, name))
    if not parts:
        return varied.iloc[:0], pd.DataFrame([], columns=DESCRIBED)
    return pd.concat(parts, ignore_index=True), pd.DataFrame(described, columns=DESCRIBED)


EQUAL: Final = "equal"
ORIGIN: Final = "first record's time"
OWN_TIME: Final = "own time"
FETCH_SIZE: Final = "fetch size not logged"
NETWORK_TIME: Final = "network-thread time not logged"
UNEXPLAINED: Final = "unexplained"
CLASSES: Final = (EQUAL, ORIGIN, OWN_TIME, FETCH_SIZE, NETWORK_TIME, UNEXPLAINED)


def classify(first: Any, second: Any, best: Any) -> Any:
    """Each varied row (by :data:`ROW`) with its plain replay's throttle (no shift, logged
    sizes), Kafka's, and its class (:data:`CLASSES`): the first of

    * :data:`EQUAL`: the plain replay gives Kafka's throttle;
    * :data:`ORIGIN`: the client's best origin (:func:`best_origins`) does;
    * :data:`OWN_TIME`: with that, one of the moves of its own time (:func:`own_times`);
    * :data:`FETCH_SIZE` instead of either when it is a refused fetch the variant sized;
    * :data:`NETWORK_TIME`: a request-quota throttle below Kafka's (the log has the
      handler-thread time only, so the replay's usage is a lower bound);
    * :data:`UNEXPLAINED`: none of these."""
    import numpy as np

    base = first[first["broker"] == first["client_id"] + "/0/0"].set_index(ROW)
    rows = base[["client_id", "api", "bytes", "kafka_throttle_ms", "throttle_ms"]].copy()
    rows["class"] = np.where(base["throttle_ms"] == base["kafka_throttle_ms"], EQUAL, UNEXPLAINED)
    chosen = {f"{c}/{b['shift']}/{b['sizes']}" for c, b in best.iterrows()}
    at_best = first[first["broker"].isin(chosen)]
    refused = (rows["api"] == "fetch") & (rows["bytes"] == 0) & (rows["kafka_throttle_ms"] > 0)
    sized = rows["client_id"].map(best["sizes"]) == 1
    left = rows["class"] == UNEXPLAINED
    for name, found in ((ORIGIN, at_best), (OWN_TIME, second)):
        same = found[found["throttle_ms"] == found["kafka_throttle_ms"]][ROW].unique()
        hit = left & rows.index.isin(same)
        rows.loc[hit, "class"] = name
        rows.loc[hit & refused & sized, "class"] = FETCH_SIZE
        left &= ~hit
    request = rows["client_id"].map(quota_type_of) == "request"
    below = rows["throttle_ms"] < rows["kafka_throttle_ms"]
    rows.loc[left & request & below, "class"] = NETWORK_TIME
    return rows


def agreement(frame: Any) -> Any:
    """Per quota type (of the client's quota; ``-`` for clients without one) and API: the
    requests, how many got the same throttle in the replay as from Kafka, how many each
    throttled, the total throttle each gave (ms) and the mean absolute difference (ms)."""
    import pandas as pd

    frame = frame.assign(
        quota=frame["client_id"].map(lambda c: quota_type_of(c) or "-"),
        same=frame["throttle_ms"] == frame["kafka_throttle_ms"],
        kafka=frame["kafka_throttle_ms"] > 0,
        replay=frame["throttle_ms"] > 0,
        diff=(frame["throttle_ms"] - frame["kafka_throttle_ms"]).abs(),
    )
    table = frame.groupby(["quota", "api"]).agg(
        requests=("same", "size"),
        equal=("same", "sum"),
        kafka_throttled=("kafka", "sum"),
        replay_throttled=("replay", "sum"),
        kafka_total_ms=("kafka_throttle_ms", "sum"),
        replay_total_ms=("throttle_ms", "sum"),
        mean_abs_diff_ms=("diff", "mean"),
    )
    table.insert(2, "equal_fraction", table["equal"] / table["requests"])
    return pd.DataFrame(table).reset_index()


def logged_throttles(lines: list[str]) -> list[int]:
    """The throttle of every client request in the log, by the spec's rules (not the
    import's code): each ``Completed request`` line but the controller's line of a
    forwarded request, the inter-broker APIs and follower fetches; its ``throttleTimeMs``,
    for CreateTopics, CreatePartitions and DeleteTopics the larger of it and its
    response's (the mutation throttle the controller gave)."""
    exempt = {4, 5, 6, 7, 27, 56}
    out = []
    for text in lines:
        document = completed_request(text)
        if document is None:
            continue
        key = document["requestHeader"]["requestApiKey"]
        request = document["request"] if isinstance(document["request"], dict) else {}
        replica = request.get("replicaState", {}).get("replicaId", request.get("replicaId", -1))
        if document.get("isForwarded") or key in exempt or (key == 1 and replica >= 0):
            continue
        throttle = int(document["throttleTimeMs"])
        response = document["response"]
        if key in (19, 20, 37) and isinstance(response, dict):
            throttle = max(throttle, int(response.get("throttleTimeMs", 0)))
        out.append(throttle)
    return out


def served_after(lines: list[str]) -> dict[tuple[str, int], int | None]:
    """Per throttled consumer fetch in the log (client id, correlation id), the correlation
    id of its connection's next unthrottled fetch from the same partitions and offsets,
    or ``None``: read from the lines by the spec's fields, not by kquota's reader, for full
    fetches (librdkafka's: no fetch session) only."""
    by_connection: dict[str, list[tuple[int, bool, Any, str]]] = {}
    for text in lines:
        document = completed_request(text)
        if document is None or document["requestHeader"]["requestApiKey"] != 1:
            continue
        request = document["request"]
        if not isinstance(request, dict) or request.get("replicaId", -1) >= 0:
            continue
        if request.get("sessionEpoch", -1) > 0:
            raise AssertionError(f"an incremental fetch, not a full one: {text[:200]}")
        position = [
            (t.get("topic", t.get("topicId")), p["partition"], p["fetchOffset"])
            for t in request["topics"]
            for p in t["partitions"]
        ]
        header = document["requestHeader"]
        by_connection.setdefault(document["connection"], []).append(
            (header["correlationId"], document["throttleTimeMs"] > 0, position, header["clientId"])
        )
    found: dict[tuple[str, int], int | None] = {}
    for fetches in by_connection.values():
        for i, (correlation, throttled, position, client) in enumerate(fetches):
            if not throttled:
                continue
            match = None
            for later, later_throttled, later_position, _ in fetches[i + 1 :]:
                if later_position != position:
                    break
                if not later_throttled:
                    match = later
                    break
            found[(client, correlation)] = match
    return found


def _record_ms(head: str, document: dict[str, Any]) -> int:
    """When the import says Kafka recorded the line's quota usage: its end less the
    response-queue and send times, in whole ms (the broker's zone is UTC here)."""
    from datetime import UTC, datetime

    end = datetime.strptime(head[1:24], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC)
    end_us = int(end.timestamp()) * 1_000_000 + end.microsecond
    handed = end_us - round(document["responseQueueTimeMs"] * 1000)
    return (handed - round(document["sendTimeMs"] * 1000)) // 1000


def produced_reads(lines: list[str]) -> dict[tuple[str, int], list[int] | None]:
    """Per throttled full consumer fetch in the log (client id, correlation id), the record
    bytes each of its partitions would have read by what the produce lines show, in request
    order, or ``None`` when a partition's fetch offset is neither where a logged batch
    starts nor past every logged batch: read from the lines by the spec's fields, not by
    kquota's reader. Reads follow Kafka's replica manager: each partition up to the
    smaller of its ``partitionMaxBytes`` and what the response has left of ``maxBytes``,
    the first batch whole until a partition returns records."""
    import json

    names: dict[str, str] = {}
    batches: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    fetches = []
    for text in lines:
        head, found, body = text.partition(" Completed request:")
        if not found:
            continue
        document = json.loads(body.removesuffix(" (kafka.request.logger)"))
        if document.get("isForwarded"):
            continue
        key = document["requestHeader"]["requestApiKey"]
        response = document.get("response")
        if key == 3 and isinstance(response, dict):
            for topic in response.get("topics") or []:
                if topic.get("topicId") and topic.get("name"):
                    names[topic["topicId"]] = topic["name"]
        elif key == 0 and isinstance(response, dict):
            sizes = {
                (t["name"], p["index"]): p["recordsSizeInBytes"]
                for t in document["request"]["topicData"]
                for p in t["partitionData"]
            }
            for t in response["responses"]:
                for p in t["partitionResponses"]:
                    if p["errorCode"] == 0 and p["baseOffset"] >= 0:
                        where = (t["name"], p["index"])
                        batch = (p["baseOffset"], sizes[where], _record_ms(head, document))
                        batches.setdefault(where, []).append(batch)
        elif key == 1 and document["throttleTimeMs"] > 0:
            request = document["request"]
            if request.get("sessionEpoch", -1) <= 0 and request.get("replicaId", -1) < 0:
                fetches.append((head, document))
    out: dict[tuple[str, int], list[int] | None] = {}
    for head, document in fetches:
        request = document["request"]
        at = _record_ms(head, document)
        left = request.get("maxBytes", 2**31 - 1)
        first_whole = True
        reads: list[int] | None = []
        for topic in request["topics"]:
            name = topic.get("topic") or names.get(topic.get("topicId"), topic.get("topicId"))
            for p in topic["partitions"]:
                logged = batches.get((name, p["partition"]), [])
                start = p["fetchOffset"]
                if not logged or not (
                    any(b == start for b, _, _ in logged) or all(b < start for b, _, _ in logged)
                ):
                    reads = None
                    break
                there = [(b, s) for b, s, w in logged if b >= start and w <= at]
                available = sum(s for _, s in there)
                first = sum(s for b, s in there if b == start)
                limit = min(p["partitionMaxBytes"], left)
                if first_whole:
                    limit = max(limit, first)
                read = min(available, limit)
                first_whole = first_whole and read == 0
                left = max(0, left - read)
                reads.append(read)
            if reads is None:
                break
        header = document["requestHeader"]
        out[(header["clientId"], header["correlationId"])] = reads
    return out


def uvarint_size(n: int) -> int:
    """The bytes of ``n`` as an unsigned varint."""
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


def fetch_frames(lines: list[str]) -> dict[str, int]:
    """Per client whose served consumer fetches all ask for one partition in a flexible
    version (v12+), the size Kafka records for one of them less its records' bytes and
    their length: the response's frame, the same for each of its fetches, by the spec's
    formula (``4 +`` the body)."""
    import json

    out: dict[str, int] = {}
    for text in lines:
        _, found, body = text.partition(" Completed request:")
        if not found:
            continue
        document = json.loads(body.removesuffix(" (kafka.request.logger)"))
        header = document["requestHeader"]
        response = document.get("response")
        if header["requestApiKey"] != 1 or document["throttleTimeMs"] > 0:
            continue
        if not isinstance(response, dict) or header["requestApiVersion"] < 13:
            continue
        parts = [p for t in response["responses"] for p in t["partitions"]]
        if len(response["responses"]) != 1 or len(parts) != 1:
            continue
        if parts[0].get("abortedTransactions"):
            continue
        # throttle, error, session, topic count; one topic (id, partition count, tags);
        # one partition (index, error, three offsets, aborted, preferred replica, tags);
        # the body's tags
        out[header["clientId"]] = (
            4 + 4 + 2 + 4 + 1 + (16 + 1 + 1) + (4 + 2 + 8 + 8 + 8 + 1 + 4 + 1) + 1
        )
    return out
