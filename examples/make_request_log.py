"""Write the sample Kafka request log under ``examples/request-log/`` (the README's third
quick start back-tests it).

Two brokers, one folder each, with the files Kafka rolls: ``kafka-request.log``, the
previous hour's ``kafka-request.log.2024-06-03-01`` and a compressed
``kafka-request.log.2024-06-03-00.gz``. The lines are what Kafka's
``kafka.request.logger`` writes at DEBUG, built from Kafka's message schemas by
the test suite's ``tests/support/requestlog_gen.py`` (which needs the ``proxy`` extra for them): 300
requests of Produce, Fetch and other APIs over about 3.4 s, with the lines a real log
mixes in (TRACE lines, follower fetches, inter-broker APIs, forwarded requests).
Deterministic: running it again writes the same files.

    python examples/make_request_log.py
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

# The generator is a test helper, not part of the installed package: it lives with the tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

import requestlog_gen

SPEC = requestlog_gen.LogSpec(requests=300, brokers=2, clients=4, seed=1)
FOLDER = Path(__file__).resolve().parent / "request-log"


def main() -> None:
    shutil.rmtree(FOLDER, ignore_errors=True)
    logged = requestlog_gen.write(SPEC, FOLDER)
    usable = requestlog_gen.rows(logged)
    print(f"wrote {FOLDER}: {len(logged)} requests logged, {len(usable)} of them client requests")


if __name__ == "__main__":
    main()
