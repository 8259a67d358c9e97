"""Write the real request logs of ``tests/backtest/data/``: for each pinned Kafka version, a
broker of ``kafka_support.KafkaBroker`` (its ``kafka.request.logger`` at DEBUG) under a
short workload, its ``kafka-request.log`` trimmed to a few hundred lines.

The workload, the same for every version:

* quotas set with Kafka's own ``kafka-configs``: ``producer_byte_rate`` on the client id
  ``greedy`` and ``controller_mutation_rate`` on the client id ``admin``;
* the admin client ``admin`` (librdkafka) creates topic ``orders`` (3 partitions), then
  ``clicks`` (12 partitions), then grows ``orders`` to 6 partitions (CreatePartitions) and
  deletes ``clicks`` (DeleteTopics): over the mutation quota, the later ones are throttled;
* the producer ``greedy`` (librdkafka, acks=1) writes 2 KiB values to ``orders`` flat out
  for :data:`PRODUCE_S` seconds: its later Produce responses are throttled;
* the consumer ``reader`` (group ``readers``) reads ``orders`` for :data:`CONSUME_S` seconds.

The trimmed log keeps every line that is not a Produce or Fetch line and every throttled
one, and the first :data:`KEEP_DATA_LINES` other Produce and Fetch lines, in file order.
Run from the checkout (``make tools`` fetches the Kafka jars first)::

    .venv/bin/python tests/support/make_real_request_logs.py
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from kafka_support import (
    KAFKA3_VERSION,
    KAFKA_VERSION,
    KafkaBroker,
    completed_request,
    kafka_configs,
)
from requestlog_gen import renamed

DATA: Final = Path(__file__).resolve().parents[1] / "backtest" / "data"
PRODUCER_BYTE_RATE: Final = 64 * 1024
CONTROLLER_MUTATION_RATE: Final = 2
PRODUCE_S: Final = 8.0
CONSUME_S: Final = 4.0
VALUE: Final = b"v" * 2048
KEEP_DATA_LINES: Final = 300
WAIT_S: Final = 60.0  # bounds a wait for Kafka; never a measurement


def _admin(bootstrap: str) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "admin"})

    def wait(futures: dict[str, Any]) -> None:
        for future in futures.values():
            try:
                future.result(timeout=WAIT_S)
            except KafkaException as exc:  # a strict throttle refuses: the log shows it
                print(f"admin: {exc}", file=sys.stderr)

    wait(admin.create_topics([NewTopic("orders", 3, 1)], request_timeout=30))
    wait(admin.create_topics([NewTopic("clicks", 12, 1)], request_timeout=30))
    time.sleep(1.0)
    wait(admin.create_partitions([NewPartitions("orders", 6)], request_timeout=30))
    wait(admin.delete_topics(["clicks"], request_timeout=30))


def _produce(bootstrap: str) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "greedy",
            "acks": 1,
            "linger.ms": 5,
            "batch.size": 16 * 1024,
            "queue.buffering.max.kbytes": 512,
        }
    )
    began = time.monotonic()
    while time.monotonic() - began < PRODUCE_S:
        try:
            producer.produce("orders", VALUE)
        except BufferError:
            producer.poll(0.05)
            continue
        producer.poll(0)
    producer.purge(in_queue=True, in_flight=False)
    producer.flush(WAIT_S)


def _consume(bootstrap: str) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "reader",
            "group.id": "readers",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["orders"])
    began = time.monotonic()
    while time.monotonic() - began < CONSUME_S:
        consumer.poll(0.2)
    consumer.close()


def _kept(lines: list[str]) -> list[str]:
    """The lines of the trimmed log (see the module's docstring)."""
    out = []
    data = 0
    for text in lines:
        document = completed_request(text)
        if document is None:
            continue
        key = document["requestHeader"]["requestApiKey"]
        if key in (0, 1) and document["throttleTimeMs"] == 0:
            if data >= KEEP_DATA_LINES:
                continue
            data += 1
        out.append(text)
    return out


def _body(text: str) -> dict[str, Any]:
    document = completed_request(text)
    assert document is not None, text
    return document


def _line(text: str, document: dict[str, Any]) -> str:
    head = text.partition(" Completed request:")[0]
    body = json.dumps(document, separators=(",", ":"))
    return f"{head} Completed request:{body} (kafka.request.logger)"


FETCH_2_8: Final = {
    "topicId": "topic",
    "partitions": "partitionResponses",
    "partitionIndex": "partition",
    "recordsSizeInBytes": "recordSetSizeInBytes",
}
"""Kafka 2.8's names of the Fetch response's fields that 3.0 renamed (v12 has topic names)."""
UNKNOWN_TOPIC_ID: Final = 100


def derived(lines: list[str], version: str) -> list[str]:
    """Lines made from the first consumer Fetch line of ``lines`` that read records, for
    what the workload cannot make its broker write (``tests/backtest/data/README.md``):

    * Kafka 4: the same fetch with its first partition an error partition
      (UNKNOWN_TOPIC_ID) whose records are null, as Kafka 4 logs one (``"records":null``,
      no size; offsets -1, no aborted transactions);
    * Kafka 3: the same fetch as Kafka 2.8 logs it: version 12 (2.8's last), topic names
      (from the log's Metadata responses) for ids, and 2.8's response keys
      (``partitionResponses``, ``partition``, ``recordSetSizeInBytes``)."""
    names: dict[str, str] = {}
    source = None
    for text in lines:
        if " Completed request:" not in text:
            continue
        document = _body(text)
        response = document["response"] if isinstance(document["response"], dict) else {}
        for topic in response.get("topics") or []:
            if isinstance(topic, dict) and topic.get("topicId") and topic.get("name"):
                names[topic["topicId"]] = topic["name"]
        if (
            source is None
            and document["requestHeader"]["requestApiKey"] == 1
            and document["throttleTimeMs"] == 0
            and response.get("responses")
            and response["responses"][0]["partitions"][0].get("recordsSizeInBytes", 0) > 0
        ):
            source = text
    if source is None:
        raise RuntimeError("the log has no consumer Fetch line that read records")
    document = _body(source)
    if int(version.split(".")[0]) >= 4:
        partition = document["response"]["responses"][0]["partitions"][0]
        partition.update(
            errorCode=UNKNOWN_TOPIC_ID,
            highWatermark=-1,
            lastStableOffset=-1,
            logStartOffset=-1,
            abortedTransactions=None,
        )
        del partition["recordsSizeInBytes"]
        partition["records"] = None
        return [_line(source, document)]
    document["requestHeader"]["requestApiVersion"] = 12
    request = document["request"]
    document["request"] = {"replicaId": -1, **request}
    for topics in (document["request"]["topics"], document["response"]["responses"]):
        for topic in topics:
            topic["topicId"] = names[topic["topicId"]]
    document["response"] = renamed(document["response"], FETCH_2_8)
    document["request"]["topics"] = renamed(document["request"]["topics"], {"topicId": "topic"})
    return [_line(source, document)]


def record(version: str, target: Path) -> Path:
    """Run the workload on a broker of ``version``; write its trimmed request log to
    ``target/kafka-<version>/kafka-request.log`` and return that path."""
    with tempfile.TemporaryDirectory(prefix=f"kafka-{version}-") as folder:
        with KafkaBroker(Path(folder), version=version) as broker:
            for entity, quota in (
                ("greedy", f"producer_byte_rate={PRODUCER_BYTE_RATE}"),
                ("admin", f"controller_mutation_rate={CONTROLLER_MUTATION_RATE}"),
            ):
                kafka_configs(
                    broker.bootstrap,
                    "--alter",
                    "--add-config",
                    quota,
                    "--entity-type",
                    "clients",
                    "--entity-name",
                    entity,
                    version=version,
                )
            _admin(broker.bootstrap)
            _produce(broker.bootstrap)
            _consume(broker.bootstrap)
        # read after the stop: every completed request has its line
        lines = list(broker.request_log_lines())
    out = target / f"kafka-{version}" / "kafka-request.log"
    out.parent.mkdir(parents=True, exist_ok=True)
    kept = _kept(lines)
    out.write_text("".join(f"{t}\n" for t in kept + derived(kept, version)), encoding="utf-8")
    return out


def main() -> int:
    for version in dict.fromkeys((KAFKA_VERSION, KAFKA3_VERSION)):
        path = record(version, DATA)
        print(f"{path}: {len(path.read_text().splitlines())} lines")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
