"""Write the sample Kafka request log under ``examples/request-log/`` (the README's third
quick start back-tests it) and the quotas its broker enforced, ``examples/quotas.json``.

A real Apache Kafka broker (the version ``apache-kafka/pom.xml`` pins, started by the
test suite's ``tests/support/kafka_support.py``, its ``kafka.request.logger`` at DEBUG)
enforces its own quotas, set with Kafka's ``kafka-configs``, on real librdkafka clients:

* ``greedy``, a producer (acks=1) as fast as it is let, over ``producer_byte_rate``;
* ``reader``, a consumer catching up on a topic filled first (by ``prefill``, no quota),
  over ``consumer_byte_rate``.

The broker's log, as it wrote it, goes to ``examples/request-log/broker-1/`` (gzipped, as
Kafka's rolled files are); each line holds the throttle the broker gave. Run from a
checkout after ``make tools`` (Kafka's jars); it takes about a minute, and each run is a
new recording (a real broker's timing varies a little):

    .venv/bin/python examples/make_request_log.py
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
import time
from pathlib import Path

# The broker and clients are test helpers, not part of the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from kafka_support import KafkaBroker, kafka_configs
from side_by_side_runs import Run
from side_by_side_support import Side, greedy_librdkafka_producer, librdkafka_consumer, prefill

HERE = Path(__file__).resolve().parent
QUOTAS = {"greedy": {"producer_byte_rate": 262144}, "reader": {"consumer_byte_rate": 262144}}
PRODUCE_S = 4.0
CONSUME_S = 3.0
PREFILL_BYTES = 3 * 1024 * 1024  # more than CONSUME_S seconds of the fetch quota


def main() -> None:
    folder = HERE / "request-log" / "broker-1"
    with KafkaBroker() as broker:
        for client, quota in QUOTAS.items():
            settings = ",".join(f"{k}={v}" for k, v in quota.items())
            entity = ("--entity-type", "clients", "--entity-name", client)
            kafka_configs(broker.bootstrap, "--alter", "--add-config", settings, *entity)
        time.sleep(2.0)  # the broker applies them from its metadata log
        greedy_librdkafka_producer("orders", PRODUCE_S)(
            Side("kafka", broker.bootstrap, "greedy"), Run("kafka", "greedy", 262144)
        )
        prefill(broker.bootstrap, "history", PREFILL_BYTES)
        librdkafka_consumer("history", CONSUME_S)(
            Side("kafka", broker.bootstrap, "reader"), Run("kafka", "reader", 262144)
        )
        time.sleep(1.0)  # the last lines follow the last responses
    lines = list(broker.request_log_lines())
    shutil.rmtree(HERE / "request-log", ignore_errors=True)
    folder.mkdir(parents=True)
    with gzip.open(folder / "kafka-request.log.gz", "wt", encoding="utf-8") as out:
        out.writelines(f"{line}\n" for line in lines)
    config = {
        "window": {"num_samples": 11, "window_ms": 1000},
        "quotas": [{"entity": {"client-id": c}, "config": q} for c, q in QUOTAS.items()],
    }
    (HERE / "quotas.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {folder}: {len(lines):,} lines")


if __name__ == "__main__":
    main()
