"""The atheris targets of ``fuzz/python`` run as ordinary tests (without atheris).

Each target's ``test_one_input`` runs over its committed seeds and corpus and over the
inputs that once made it fail (``fuzz/regressions``); hand-written hostile inputs check
the error each one must give. The second half holds the regression tests of the bugs the fuzz
targets found in ``python/kquota`` (each named after its input in ``fuzz/regressions``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import paths
import pytest

FUZZ = paths.ROOT / "fuzz"
sys.path.insert(0, str(FUZZ / "python"))

import fuzz_cli_args  # noqa: E402
import fuzz_quota_file  # noqa: E402
import fuzz_scenario  # noqa: E402
from kquota.config.model import QuotaConfig  # noqa: E402
from kquota.conformance import Result, Scenario, load, replay  # noqa: E402
from kquota.exceptions import QuotaFileError, ScenarioError  # noqa: E402

TARGETS: dict[str, Callable[[bytes], None]] = {
    "cli_args": fuzz_cli_args.test_one_input,
    "quota_file": fuzz_quota_file.test_one_input,
    "scenario": fuzz_scenario.test_one_input,
}


def _inputs(folder: str) -> list[pytest.ParameterSet]:
    return [
        pytest.param(target, path, id=f"{target}/{path.name}")
        for target in TARGETS
        for path in sorted((FUZZ / folder / target).glob("*"))
    ]


def test_every_target_has_seeds_and_a_dictionary_or_vocabulary() -> None:
    for target in TARGETS:
        assert len(list((FUZZ / "seeds" / target).iterdir())) >= 10, target
    assert (FUZZ / "dict" / "quota_file.dict").is_file()
    assert (FUZZ / "dict" / "scenario.dict").is_file()
    assert len(fuzz_cli_args.VOCABULARY) < 255  # one byte names a word


@pytest.mark.parametrize(("target", "path"), _inputs("seeds") + _inputs("corpus"))
def test_seed_and_corpus_input(target: str, path: Path) -> None:
    TARGETS[target](path.read_bytes())


@pytest.mark.parametrize(("target", "path"), _inputs("regressions"))
def test_regression_input(target: str, path: Path) -> None:
    TARGETS[target](path.read_bytes())


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    "data",
    [b"", b"\0", b"\xff\xfe", b"\x01", b"\x01\xff", b"{}", b"[]", b"null", b"\x00" * 64],
    ids=["empty", "nul", "not-utf8", "lone-prefix", "last-word", "object", "list", "null", "nuls"],
)
def test_hostile_bytes(target: str, data: bytes) -> None:
    TARGETS[target](data)


# -- the targets check what they claim ----------------------------------------------------


@pytest.mark.parametrize(
    ("raised", "expected", "match"),
    [
        (KeyError("window"), KeyError, None),  # no other exception gets through
        (QuotaFileError("something is wrong"), AssertionError, "does not name"),
    ],
    ids=["other-exception", "message-not-naming-the-file"],
)
def test_quota_file_target_refuses_what_load_must_not_raise(
    monkeypatch: pytest.MonkeyPatch,
    raised: Exception,
    expected: type[Exception],
    match: str | None,
) -> None:
    def load(path: object) -> QuotaConfig:
        raise raised

    monkeypatch.setattr(QuotaConfig, "load", load)
    with pytest.raises(expected, match=match):
        fuzz_quota_file.test_one_input(b"{}")


def test_scenario_target_replays_what_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    replayed: list[Scenario] = []
    real = replay

    def spy(scenario: Scenario) -> Result:
        replayed.append(scenario)
        return real(scenario)

    monkeypatch.setattr(fuzz_scenario, "replay", spy)
    fuzz_scenario.test_one_input((FUZZ / "seeds/scenario/sensor_minimal.json").read_bytes())
    assert [s.name for s in replayed] == ["sensor minimal"]


def test_cli_target_rejects_an_unexpected_status(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fuzz_cli_args, "main", lambda argv: 3)
    with pytest.raises(AssertionError, match="status 3"):
        fuzz_cli_args.check_run(["configs", "--describe"])


def test_cli_target_rejects_an_error_that_changed_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def clobber(argv: list[str]) -> int:
        Path("store.sqlite").write_bytes(b"oops")
        print("kquota configs: bad", file=sys.stderr)
        return 2

    monkeypatch.setattr(fuzz_cli_args, "main", clobber)
    with pytest.raises(AssertionError, match="changed the sandbox"):
        fuzz_cli_args.check_run(["configs", "--alter"])
    fuzz_cli_args.sandbox().reset()


def test_argv_decoding() -> None:
    vocabulary = fuzz_cli_args.VOCABULARY
    data = b"\x01\x01\0--store=/etc/passwd\0sqlite:///etc/x\0\xff\0\x01" + bytes(
        [vocabulary.index("--json") + 1]
    )
    assert fuzz_cli_args.decode_argv(data) == [
        "configs",
        "--store=_etc_passwd",
        "sqlite://_etc_x",
        "\udcff",
        "--json",
    ]
    assert fuzz_cli_args.decode_argv(b"") == []


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        (["configs", "--describe"], 0),
        (["configs", "--describe", "--json", "--user", "bob"], 0),
        (["configs", "--help"], 0),
        (["configs", "--alter", "--add-config", "producer_byte_rate=1", "--user", "a"], 0),
        (["configs", "--alter", "--add-config", "producer_byte_rate=0", "--user", "a"], 2),
        (["configs", "--alter", "--delete-config", "request_percentage", "--user", "a"], 2),
        (["configs", "--import", "broken.json"], 2),
        (["configs", "--import", "huge.json"], 0),
        (["configs", "--describe", "--store", "other.sqlite"], 2),
        (["configs", "--describe", "--store", "nope://x"], 2),
        (["configs", "--export", "..", "--lock-timeout", "nan"], 2),
        (["conformance", "scenario.json"], 0),
        (["conformance", "quotas.json"], 2),
        (["backtest", "--traffic", "traffic.csv", "--quotas", "quotas.json", "--out", "o"], None),
        (
            ["backtest", "--traffic", "t", "--quotas", "quotas.json", "--out", "o", "--scale", "0"],
            2,
        ),
        (["gen-traffic", "--out", "t.parquet", "--requests", "20", "--clients", "5"], 0),
        (["gen-traffic", "--out", "t.parquet", "--requests", "0"], 2),
        (["gen-traffic", "--out", "t.parquet"], None),  # a million requests: not generated
        (["nonsense"], 2),
        ([], 2),
    ],
)
def test_cli_statuses(argv: list[str], status: int | None) -> None:
    assert fuzz_cli_args.check_run(argv) == status


# -- regression tests of the bugs the fuzz targets found in python/kquota -----------------


def _run(argv: list[str]) -> tuple[int | None, str, str]:
    box = fuzz_cli_args.sandbox()
    box.reset()
    return fuzz_cli_args.run(argv)


def test_non_utf8_entity_name_is_bad_input() -> None:
    """cli_args: `--entity-name $'\\xff'` raised UnicodeEncodeError from kquota.Entity."""
    argv = ["configs", "--alter", "--add-config", "producer_byte_rate=1", "--user", "\udcff"]
    status, _, err = _run(argv)
    assert status == 2
    assert err == (
        "kquota configs: invalid --entity-name for users '\\udcff': not valid "
        "Unicode text (surrogates not allowed at 0)\n"
    )
    assert fuzz_cli_args.check_run(argv) == 2


def test_non_utf8_out_path_is_bad_input() -> None:
    """cli_args: pyarrow raised UnicodeEncodeError for `gen-traffic --out $'\\xae'`, after
    creating the folder."""
    status, _, err = _run(["gen-traffic", "--out", "\udcae", "--requests", "3"])
    assert status == 2
    assert err.startswith("kquota gen-traffic: invalid --out '\\udcae': not valid Unicode")
    assert sorted(p.name for p in fuzz_cli_args.sandbox().root.iterdir()) == sorted(
        [*fuzz_cli_args.sandbox().files, "store.sqlite"]
    )


def test_non_utf8_path_is_printed_escaped() -> None:
    """cli_args: printing a written non-UTF-8 file name raised UnicodeEncodeError."""
    status, out, _ = _run(
        ["gen-traffic", "--out", "t.parquet", "--requests", "9", "--quotas-out", "q\udcff"]
    )
    assert status == 0
    assert "wrote a quota file for them to q\\udcff" in out


def test_line_break_in_a_file_name_stays_one_line() -> None:
    """cli_args: a missing file named with a line break gave a two-line error."""
    status, _, err = _run(["conformance", "a\nb.json"])
    assert status == 2
    assert err == "kquota conformance: a\\nb.json: no such file or folder\n"


def test_export_onto_the_store_is_refused() -> None:
    """cli_args: `configs --export STORE_FILE` replaced the store with its JSON export."""
    status, _, err = _run(["configs", "--export", "store.sqlite"])
    assert status == 2
    assert err == "kquota configs: --export 'store.sqlite' is the store itself: give another file\n"
    assert fuzz_cli_args.sandbox().store.read_bytes() == fuzz_cli_args.sandbox().template


def test_store_name_without_room_for_the_journal_creates_nothing() -> None:
    """cli_args: a first write to a store named with 248-255 bytes failed (SQLite could not
    create NAME-journal) and left an empty file behind."""
    status, _, err = _run(["configs", "--import", "huge.json", "--store", "x" * 250])
    assert status == 2
    assert err.endswith(
        "the file name is too long (SQLite adds '-journal' to it; at most 247 bytes)\n"
    )
    assert not (fuzz_cli_args.sandbox().root / ("x" * 250)).exists()
    assert _run(["configs", "--import", "huge.json", "--store", "x" * 247])[0] == 0


def test_store_name_too_long_for_the_system_is_bad_input() -> None:
    """Found reducing the one above: Path.exists raised OSError (ENAMETOOLONG)."""
    status, _, err = _run(["configs", "--describe", "--store", "x" * 300])
    assert status == 2
    assert err.endswith("xx': File name too long\n")


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--hours", "inf"], "invalid hours inf: expected from 0.000277778 (one second) to 1e+06"),
        (["--hours", "1e-9"], "invalid hours 1e-09: expected from 0.000277778"),
        (["--seed", "-1"], "invalid seed -1"),
    ],
)
def test_gen_traffic_options_the_generator_cannot_use(option: list[str], message: str) -> None:
    """cli_args found `--hours inf` (OverflowError in the generator); by hand: a span under
    2 ms (numpy's ValueError 'high <= 0') and a negative seed (numpy's ValueError)."""
    argv = ["gen-traffic", "--out", "t.parquet", "--requests", "20", "--clients", "5", *option]
    status, _, err = _run(argv)
    assert status == 2
    assert err.startswith(f"kquota gen-traffic: {message}")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("surrogate_name.json", r"quotas\[0\]: invalid user 'a\\ud800': not valid Unicode text"),
        ("too_many_digits.json", "not valid JSON: Exceeds the limit"),
        ("int_beyond_double.json", "is too large for a LONG"),
        ("deep_nesting.json", "not valid JSON: maximum recursion depth exceeded"),
        ("window_beyond_i64.json", "invalid .*99999999999999999999"),
        ("window_over_core_limit.json", "invalid num_samples 70000: it must be a whole number"),
    ],
)
def test_quota_file_regression(name: str, message: str) -> None:
    """quota_file: each of these escaped as UnicodeEncodeError, ValueError, OverflowError,
    RecursionError, or was accepted and then failed in the store or the manager."""
    path = FUZZ / "regressions" / "quota_file" / name
    with pytest.raises(QuotaFileError, match=message):
        QuotaConfig.load(path)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("t_ms_beyond_long.json", r"steps\[0\].t_ms: expected an integer <= 9223372036854775807"),
        ("num_samples_over_core_limit.json", "config: invalid num_samples 70000"),
        ("num_samples_beyond_i64.json", "config: .*1180591620717411303424"),
        ("sensor_window_over_core_limit.json", "config: invalid window_ms 4611686018427387904"),
        ("surrogate_user.json", r"quotas\[0\].user: not valid Unicode text"),
        ("surrogate_name.json", "name: not valid Unicode text"),
        ("int_beyond_double.json", r"quotas\[0\].value: expected a finite number"),
        ("deep_nesting.json", "not valid JSON: maximum recursion depth exceeded"),
        ("mutation_window_not_whole_seconds.json", "config: invalid window_ms 3672"),
    ],
)
def test_scenario_regression(name: str, message: str) -> None:
    """scenario: each of these was loaded and then failed in the replay (OverflowError,
    InvalidConfigError, UnicodeEncodeError: a traceback from `kquota conformance`), or
    escaped the loader as OverflowError or RecursionError."""
    path = FUZZ / "regressions" / "scenario" / name
    with pytest.raises(ScenarioError, match=message):
        load(path)
