"""Six clients at once under Apache Kafka's own quotas, then under ``kquota``: the back-test
of Kafka's request log and the gateway in front of the same broker, against what Kafka did.

    .venv/bin/python benches/kafka_workload.py [--version 4.4.0] [--seconds 20] [--out DIR]

(``make kafka-workload``; about 4 minutes, not part of ``make test``.) One KRaft broker of
the given Kafka release, its request log at DEBUG. Six clients run together for
``--seconds``, each with a quota of its own on its client id:

* ``producer``: a greedy librdkafka producer over ``producer_byte_rate``;
* ``pair``: two greedy librdkafka producers sharing one client id and its
  ``producer_byte_rate``;
* ``light``: a librdkafka producer that stays under its ``producer_byte_rate``;
* ``catchup``: a librdkafka consumer catching up through 1 MB batches under
  ``consumer_byte_rate``;
* ``poller``: one connection sending Metadata requests back to back under
  ``request_percentage`` (after a few seconds of warm-up under a client id without a
  quota);
* ``creator``: an admin client creating 12-partition topics one after the other under
  ``controller_mutation_rate``.

Run A sends them straight to Kafka, with the quotas set by Kafka's ``kafka-configs``; its
request log is then back-tested (``kquota backtest --mode open``) with the same quotas,
and every request's throttle compared with the one Kafka logged. Run B sends the same
clients (other client ids, no quota in Kafka) through ``kquota proxy`` as a gateway
(``--bootstrap``, ``--broker-ports``) with the same quotas in its store, and what each
client got (bytes, requests, topics, throttles) is compared with run A's.

Prints two tables; ``--out`` keeps the broker's files, the logs and the back-test.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

SUPPORT = Path(__file__).resolve().parents[1] / "tests" / "support"
sys.path.insert(0, str(SUPPORT))

from kafka_support import KAFKA_NEWEST_VERSION, KafkaBroker  # noqa: E402
from ports import free_ports  # noqa: E402
from side_by_side_runs import Run  # noqa: E402
from side_by_side_support import (  # noqa: E402
    LOG_LAG_S,
    WAIT_S,
    Front,
    Side,
    greedy_librdkafka_producer,
    kquota_configs,
    librdkafka_consumer,
    metadata_storm,
    prefill,
    set_kafka_quota,
    throttle_callback,
)

QUOTAS: dict[str, tuple[str, float]] = {
    "producer": ("producer_byte_rate", 512 * 1024),
    "pair": ("producer_byte_rate", 256 * 1024),
    "light": ("producer_byte_rate", 1024 * 1024),
    "catchup": ("consumer_byte_rate", 150_000),
    "poller": ("request_percentage", 1),
    "creator": ("controller_mutation_rate", 4),
}
"""Each client's quota: (key, value)."""
CATCHUP_BYTES = 3_600_000
CATCHUP_FETCH_BYTES = 1_048_576
LIGHT_BYTES = 2 * 1024 * 1024
TOPIC_PARTITIONS = 12
TOPICS = 6


def _value(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def creator(seconds: float, topics: int = TOPICS) -> Callable[[Side, Run], None]:
    """An admin client creating ``topics`` topics of :data:`TOPIC_PARTITIONS` partitions,
    one request at a time, each as soon as the last is answered, for at most ``seconds``:
    each created topic is one unit of the run's data, and the throttles come from
    librdkafka's ``throttle_cb``."""

    def workload(where: Side, run: Run) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        throttles: list[int] = []
        client = AdminClient(
            {
                "bootstrap.servers": where.bootstrap,
                "client.id": where.client_id,
                "throttle_cb": throttle_callback(throttles),
            }
        )
        began = run.begin()
        for i in range(topics):
            if time.monotonic() - began >= seconds:
                break
            name = f"{where.client_id}-{i}"
            future = client.create_topics([NewTopic(name, TOPIC_PARTITIONS, 1)])[name]
            try:
                future.result(timeout=WAIT_S + seconds)
                run.data.append((time.monotonic() - began, 1))
            except KafkaException as error:
                run.failures.append(f"{name}: {error}")
            client.poll(0)
        client.poll(0.5)  # throttle_cb runs from poll
        run.seconds = seconds
        run.client_throttles_ms = throttles
        del client

    return workload


def workloads(seconds: float, side: str) -> dict[str, Callable[[Side, Run], None]]:
    """The six clients' workloads, writing to topics of ``side``'s own."""
    return {
        "producer": greedy_librdkafka_producer(f"{side}-produced", seconds),
        "pair": greedy_librdkafka_producer(f"{side}-paired", seconds, producers=2),
        "light": greedy_librdkafka_producer(f"{side}-light", seconds, cap_bytes=LIGHT_BYTES),
        "catchup": librdkafka_consumer(f"{side}-backlog", seconds, CATCHUP_FETCH_BYTES),
        "poller": metadata_storm(seconds, warm_up_s=3.0),
        "creator": creator(seconds),
    }


def run_side(side: str, bootstrap: str, seconds: float) -> dict[str, Run]:
    """The six clients at once through ``bootstrap``, client ids ``NAME-SIDE``."""
    prefill(bootstrap, f"{side}-backlog", CATCHUP_BYTES, batch_bytes=1_000_000)
    runs = {name: Run(side, f"{name}-{side}", QUOTAS[name][1]) for name in QUOTAS}
    errors: list[BaseException] = []

    def one(name: str, workload: Callable[[Side, Run], None]) -> None:
        try:
            workload(Side(side, bootstrap, runs[name].client_id), runs[name])
        except BaseException as error:  # reported after the others finish
            errors.append(error)

    threads = [
        threading.Thread(target=one, args=item, name=item[0])
        for item in workloads(seconds, side).items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return runs


def _gateway(broker: KafkaBroker, folder: Path) -> tuple[Front, str]:
    """``kquota proxy`` as a gateway in front of ``broker``, with :data:`QUOTAS` on the
    gateway side's client ids in its store; the front and its bootstrap address."""
    store = folder / "quotas.sqlite"
    for name, (key, value) in QUOTAS.items():
        kquota_configs(store, f"{name}-gateway", f"{key}={_value(value)}")
    first, last = free_ports(broker.node_id + 2)
    listen = f"127.0.0.1:{first}"
    where = [
        *("--listen", listen, "--bootstrap", broker.bootstrap),
        *("--broker-ports", f"{first + 1}-{last}"),
    ]
    return Front("kquota", None, store, folder, where=where), listen


def backtest_table(lines: list[str], folder: Path) -> str:
    """Kafka's request log back-tested with :data:`QUOTAS`: per quota type, the requests
    its quota decides, the share within 10 ms or 2 % of Kafka's throttle, and the totals."""
    import pandas as pd
    from kquota.backtest.job import run
    from kquota.backtest.options import BacktestOptions
    from kquota.backtest.outputs import read_requests
    from kquota.backtest.requestlog import LogOptions
    from kquota.backtest.session import spark_session
    from kquota.config import QuotaConfig

    logs = folder / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "kafka-request.log").write_text("".join(f"{t}\n" for t in lines), encoding="utf-8")
    quotas = [
        {"entity": {"client-id": f"{name}-kafka"}, "config": {key: value}}
        for name, (key, value) in QUOTAS.items()
    ]
    window = {"num_samples": 11, "window_ms": 1000}  # Kafka's defaults
    config = QuotaConfig.from_json({"window": window, "quotas": quotas})
    spark, _ = spark_session("local[2]")
    out = folder / "backtest"
    options = BacktestOptions(
        traffic=str(logs),
        quotas=config,
        out=str(out),
        mode="open",
        scales=(1.0,),
        log=LogOptions(broker_id=1),
    )
    run(spark, options)
    rows = read_requests(out / "requests")
    rows = rows[rows["scenario"] == "x1"]
    apis = {
        "producer_byte_rate": ["produce"],
        "consumer_byte_rate": ["fetch"],
        "request_percentage": None,  # every request of the client
        "controller_mutation_rate": ["create_topics"],
    }
    table = []
    for key, wanted in apis.items():
        ids = [f"{n}-kafka" for n, (k, _) in QUOTAS.items() if k == key]
        g = rows[rows["client_id"].isin(ids)]
        if wanted is not None:
            g = g[g["api"].isin(wanted)]
        apart = (g["throttle_ms"] - g["kafka_throttle_ms"]).abs()
        close = (apart <= 10) | (apart <= 0.02 * g["kafka_throttle_ms"])
        kafka, mine = int(g["kafka_throttle_ms"].sum()), int(g["throttle_ms"].sum())
        table.append(
            {
                "quota": key,
                "requests": len(g),
                "within 10 ms or 2 %": f"{close.mean():.1%}" if len(g) else "-",
                "throttled (Kafka / kquota)": f"{(g['kafka_throttle_ms'] > 0).sum()} / "
                f"{(g['throttle_ms'] > 0).sum()}",
                "Kafka's total ms": kafka,
                "kquota's total ms": mine,
                "ratio": f"{mine / kafka:.3f}" if kafka else "-",
            }
        )
    return pd.DataFrame(table).to_string(index=False)


def gateway_table(kafka: dict[str, Run], gateway: dict[str, Run]) -> str:
    """What each client got under Kafka's quotas and through the gateway."""
    import pandas as pd

    units = {
        "producer_byte_rate": "bytes acknowledged",
        "consumer_byte_rate": "bytes consumed",
        "request_percentage": "requests answered",
        "controller_mutation_rate": "topics created",
    }
    table = []
    for name, (key, _) in QUOTAS.items():
        a, b = kafka[name], gateway[name]
        table.append(
            {
                "client": name,
                "what": units[key],
                "Kafka": a.total,
                "gateway": b.total,
                "ratio": f"{b.total / a.total:.3f}" if a.total else "-",
                "throttle ms (Kafka / gateway)": f"{sum(a.client_throttles_ms)} / "
                f"{sum(b.client_throttles_ms)}",
                "failures": len(a.failures) + len(b.failures),
            }
        )
    return pd.DataFrame(table).to_string(index=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default=KAFKA_NEWEST_VERSION, help="Kafka release")
    parser.add_argument("--seconds", type=float, default=20.0, help="each run's length")
    parser.add_argument("--out", type=Path, help="keep the files here (default: a temp dir)")
    args = parser.parse_args(argv)
    folder = args.out or Path(tempfile.mkdtemp(prefix="kquota-workload-"))
    folder.mkdir(parents=True, exist_ok=True)
    with KafkaBroker(folder / "broker", version=args.version) as broker:
        for name, (key, value) in QUOTAS.items():
            set_kafka_quota(broker, f"{name}-kafka", f"{key}={_value(value)}")
        kafka = run_side("kafka", broker.bootstrap, args.seconds)
        time.sleep(LOG_LAG_S)
        lines = [line for line in broker.request_log_lines() if "-gateway" not in line]
        front, listen = _gateway(broker, folder / "gateway")
        try:
            gateway = run_side("gateway", listen, args.seconds)
        finally:
            front.stop()
    print(f"Kafka {args.version}, six clients at once for {args.seconds:g} s; files in {folder}")
    print("\nThe back-test of Kafka's request log, against Kafka's logged throttles:")
    print(backtest_table(lines, folder))
    print("\nThe same clients through kquota proxy as a gateway, against Kafka's quotas:")
    print(gateway_table(kafka, gateway))
    for side, runs in (("kafka", kafka), ("gateway", gateway)):
        for run in runs.values():
            for failure in run.failures[:3]:
                print(f"{side} {run.client_id}: {failure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
