"""Write the seed corpora and dictionaries of the atheris targets.

    python fuzz/python/make_seeds.py [SHARED_CONFORMANCE_FOLDER]

Writes ``fuzz/seeds/{quota_file,scenario,cli_args}/`` and ``fuzz/dict/*.dict`` (the
folders are replaced). Scenario seeds are the conformance vectors of ``../shared`` cut to
their first steps (so each stays under the fuzzers' input size) plus hand-written edge
cases; quota file seeds are the documented example and edge cases; ``cli_args`` seeds are
the documented commands in the target's argv encoding. Run it again when the formats or
the command line change, and commit the result.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FUZZ = HERE.parent
sys.path.insert(0, str(HERE))

from fuzz_cli_args import VOCABULARY  # noqa: E402
from kquota.config.model import ENTITY_KEYS, PROPERTIES  # noqa: E402
from kquota.conformance.clients import _MANAGER_OPS, _SENSOR_OPS  # noqa: E402
from kquota.conformance.other_quotas import ADMIN_TYPES, OPS  # noqa: E402

MAX_SEED_BYTES = 6000
"""Seeds stay below the targets' ``-max_len`` (8192) with room for mutations."""


def quota_files() -> dict[str, Any]:
    """Quota file seeds: name -> JSON text or a document."""
    readme = {
        "window": {"num_samples": 11, "window_ms": 1000},
        "quotas": [
            {"entity": {"user": "alice"}, "config": {"producer_byte_rate": 1048576}},
            {"entity": {"user": "<default>"}, "config": {"consumer_byte_rate": 2097152}},
            {
                "entity": {"user": "bob", "client-id": "app-1"},
                "config": {"request_percentage": 50},
            },
        ],
    }
    every_shape = {
        "window": {"num_samples": 2, "window_ms": 30000},
        "quotas": [
            {"entity": entity, "config": {"producer_byte_rate": 1000.5 + i}}
            for i, entity in enumerate(
                [
                    {"user": "u", "client-id": "c"},
                    {"user": "u", "client-id": "<default>"},
                    {"user": "u"},
                    {"user": "<default>", "client-id": "c"},
                    {"user": "<default>", "client-id": "<default>"},
                    {"user": "<default>"},
                    {"client-id": "c"},
                    {"client-id": "<default>"},
                ]
            )
        ],
    }
    return {
        "readme.json": readme,
        "every_shape.json": every_shape,
        "empty_object.json": {},
        "window_only.json": {"window": {"num_samples": 1, "window_ms": 1000}},
        "all_properties.json": {
            "quotas": [
                {
                    "entity": {"user": "User:CN=a b", "client-id": "é 🦀"},
                    "config": {p: 1e-300 for p in PROPERTIES},
                }
            ]
        },
        "tiny_and_huge.json": {
            "quotas": [
                {"entity": {"user": "a"}, "config": {"producer_byte_rate": 5e-324}},
                {"entity": {"user": "b"}, "config": {"consumer_byte_rate": 1.7976931348623157e308}},
            ]
        },
        "escapes.json": '{"quotas": [{"entity": {"user": "\\u0000\\n\\"\\\\"}, '
        '"config": {"producer_byte_rate": 1}}]}',
        "duplicate_entity.json": {
            "quotas": [
                {"entity": {"user": "a"}, "config": {"producer_byte_rate": 1}},
                {"entity": {"user": "a"}, "config": {"consumer_byte_rate": 1}},
            ]
        },
        "bad_value.json": '{"quotas": [{"entity": {"user": "a"}, '
        '"config": {"producer_byte_rate": NaN}}]}',
        "bad_window.json": {"window": {"num_samples": 11, "window_ms": 1500}},
        "not_json.json": '{"window": ',
    }


def _cut(document: dict[str, Any], steps: int) -> dict[str, Any]:
    cut = dict(document)
    cut["steps"] = document["steps"][:steps]
    cut.pop("description", None)
    return cut


def scenarios(shared: Path | None) -> dict[str, Any]:
    """Scenario seeds: the shared vectors and ``tests/vectors``, cut to size, and
    hand-written ones."""
    seeds: dict[str, Any] = {
        "sensor_minimal.json": {
            "format": 1,
            "name": "sensor minimal",
            "quota_type": "sensor",
            "config": {"num_samples": 2, "window_ms": 7},
            "quotas": [],
            "steps": [
                {"t_ms": -5, "op": "record_no_check", "value": -1.5},
                {"t_ms": 3, "op": "set_quota", "value": 0.25},
                {"t_ms": 9, "op": "measure", "expect": {"rate": 0.0}},
                {"t_ms": 9, "op": "remove_quota"},
            ],
        },
        "request_every_op.json": {
            "format": 1,
            "name": "request every op",
            "quota_type": "request",
            "config": {"num_samples": 3, "window_ms": 2000},
            "quotas": [{"user": None, "client_id": "<default>", "value": 12.5}],
            "steps": [
                {"t_ms": 0, "op": op, "user": "u", "client_id": "c", "value": 1000}
                if spec.value != "none" and spec.target != "none"
                else {"t_ms": 0, "op": op, "user": "u", "client_id": "c"}
                if spec.target != "none"
                else {"t_ms": 0, "op": op}
                for op, spec in _MANAGER_OPS.items()
            ],
        },
    }
    own = FUZZ.parent / "tests" / "vectors"  # the token bucket, mutations, connections
    vectors = [*(shared.glob("*.json") if shared is not None else []), *own.glob("*.json")]
    for path in sorted(vectors):
        document = json.loads(path.read_text(encoding="utf-8"))
        steps = len(document["steps"])
        while steps > 1 and len(json.dumps(_cut(document, steps))) > MAX_SEED_BYTES:
            steps //= 2
        seeds[path.name] = _cut(document, steps)
    return seeds


def argv_seeds() -> dict[str, list[str]]:
    """``cli_args`` seeds: the documented commands and a few bad ones."""
    commands = {
        "alter_add": "configs --alter --add-config "
        "producer_byte_rate=1048576,consumer_byte_rate=2097152 "
        "--entity-type users --entity-name alice",
        "alter_delete_default": "configs --alter --delete-config producer_byte_rate "
        "--entity-type users --entity-default",
        "alter_user_client": "configs --alter --add-config request_percentage=50 "
        "--user bob --client app-1",
        "describe": "configs --describe",
        "describe_json": "configs --describe --entity-type users --entity-name alice --json",
        "describe_pair": "configs --describe --entity-type users --entity-name bob "
        "--entity-type clients --entity-name app-1",
        "import": "configs --import quotas.json",
        "import_broken": "configs --import broken.json --store other.sqlite",
        "export": "configs --export out.json --store sqlite://store.sqlite",
        "conformance": "conformance scenario.json",
        "conformance_folder": "conformance scenario.json .",
        "gen_traffic": "gen-traffic --out traffic.parquet --requests 50 --users 3 --clients 10 "
        "--hours 0.5 --quotas-out q.json",
        "gen_traffic_options": "gen-traffic --out t --requests 7 --brokers 1 --users 1 "
        "--clients 2 --bursts 0 --hours 1 --seed 7 --no-bootstrap",
        "backtest": "backtest --traffic traffic.csv --quotas quotas.json --out out "
        "--scale 0.5,1,2 --recommend --mode closed",
        "help": "configs --help",
        "bad_property": "configs --alter --add-config bytes=1 --user alice",
    }
    seeds = {name: shlex.split(command) for name, command in commands.items()}
    seeds["non_utf8_name"] = [
        *shlex.split("configs --alter --add-config producer_byte_rate=1"),
        "--entity-type",
        "users",
        "--entity-name",
        "\udcff",
    ]
    return seeds


def encode_argv(argv: list[str]) -> bytes:
    """The ``cli_args`` input for ``argv`` (vocabulary words as two-byte references)."""
    parts = []
    for arg in argv:
        if arg in VOCABULARY:
            parts.append(bytes([1, VOCABULARY.index(arg) + 1]))
        else:
            parts.append(arg.encode("utf-8", "surrogateescape"))
    return b"\0".join(parts)


def dictionaries() -> dict[str, list[str]]:
    """libFuzzer dictionaries of the JSON targets: the formats' keys and words."""
    json_words = [
        *["{", "}", "[", "]", ":", ",", '"', "null", "true", "false", "NaN", "1e308", "-0", "0.5"],
        '"<default>"',
        "9223372036854775808",
        "\\u0000",
        "\\ud800",
    ]
    quota_keys = [
        "window",
        "quotas",
        "num_samples",
        "window_ms",
        "entity",
        "config",
        *ENTITY_KEYS,
        *PROPERTIES,
    ]
    scenario_keys = [
        "format",
        "name",
        "description",
        "source",
        "quota_type",
        "config",
        "quotas",
        "steps",
        "user",
        "client_id",
        "value",
        "t_ms",
        "op",
        "expect",
        "sensor",
        "produce",
        "fetch",
        "request",
        "rate",
        "quota",
        "tags",
        "throttle_ms",
        "violated",
        "throttle_time_avg",
        "queue_size",
        "as_int",
        "removed",
        "client-id",
        "num_samples",
        "window_ms",
        *sorted({*_MANAGER_OPS, *_SENSOR_OPS}),
        *ADMIN_TYPES,
        *sorted(
            {"kafka_test", "broker", "listeners", "name", "epsilon", "expect_ip_throttle"}
            | {word for ops in OPS.values() for op in ops for word in [op]}
            | {key for ops in OPS.values() for spec in ops.values() for key in spec.fields}
            | {key for ops in OPS.values() for spec in ops.values() for key in spec.expect}
        ),
    ]
    return {
        "quota_file": json_words + [f'"{key}"' for key in quota_keys],
        "scenario": json_words + [f'"{key}"' for key in scenario_keys],
    }


def _write(folder: Path, files: dict[str, bytes]) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name, content in files.items():
        assert len(content) <= MAX_SEED_BYTES or name.startswith("readme"), name
        (folder / name).write_bytes(content)


def _text(document: Any) -> bytes:
    text = document if isinstance(document, str) else json.dumps(document, ensure_ascii=False)
    return text.encode("utf-8")


def main() -> None:
    shared = Path(sys.argv[1]) if len(sys.argv) > 1 else FUZZ.parent.parent / "shared/conformance"
    seeds = FUZZ / "seeds"
    _write(seeds / "quota_file", {k: _text(v) for k, v in quota_files().items()})
    _write(
        seeds / "scenario",
        {k: _text(v) for k, v in scenarios(shared if shared.is_dir() else None).items()},
    )
    _write(seeds / "cli_args", {k: encode_argv(v) for k, v in argv_seeds().items()})
    dicts = FUZZ / "dict"
    dicts.mkdir(exist_ok=True)
    for name, words in dictionaries().items():
        lines = [json.dumps(word) for word in words]
        (dicts / f"{name}.dict").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {seeds} and {dicts}")


if __name__ == "__main__":
    main()
