"""No traceback reaches a user: every path a ``kquota`` subcommand takes, when it cannot be
used, gives exit status 2 and one line on stderr naming it, and writes nothing.

Each path option is driven with a 300-byte file name, a path through a regular file
(``somefile.txt/x.json``) and a path in a folder that refuses new files. Then the rules
that go with them: ``gen-traffic`` writes the format its ``--out`` name says (and refuses
other names), and reading a store that does not exist is an error naming it.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from kquota import Entity
from kquota.backtest import inputs, synthetic
from kquota.backtest.outputs import read_requests
from kquota.cli import main
from kquota.config import QuotaConfig, QuotaEntry, SQLiteStore, Window

LONG = "x" * 300
"""A path component longer than any Linux file system allows (NAME_MAX is 255 bytes)."""

QUOTAS = QuotaConfig(
    Window(11, 1000), (QuotaEntry(Entity(user="alice"), {"producer_byte_rate": 1000.0}),)
)
TRAFFIC_CSV = "ts_ms,broker,user,client_id,api,bytes,thread_time_ns\n0,b1,alice,app,produce,100,5\n"
SCENARIO = (
    '{"format": 1, "name": "s", "quota_type": "produce", '
    '"config": {"num_samples": 11, "window_ms": 1000}, "quotas": [], "steps": []}'
)


def _refuses_new_files(folder: Path) -> bool:
    try:
        (folder / ".kquota-probe").open("x").close()
    except OSError:
        return True
    (folder / ".kquota-probe").unlink()
    return False


@pytest.fixture(scope="module")
def unwritable(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder in which creating a file really fails: a folder without write permission,
    or, for root (whom permissions do not stop), sysfs, which refuses new files to anyone."""
    folder = tmp_path_factory.mktemp("unwritable")
    folder.chmod(0o555)
    if _refuses_new_files(folder):
        return folder
    for candidate in (Path("/sys/kernel"), Path("/sys")):
        if candidate.is_dir() and _refuses_new_files(candidate):
            return candidate
    pytest.fail("no folder here refuses new files: the unwritable-folder cases cannot run")


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    """Valid inputs for every command, and a regular file to put in a path."""
    SQLiteStore(tmp_path / "store.sqlite").replace(QUOTAS)
    (tmp_path / "quotas.json").write_text(QUOTAS.dumps())
    (tmp_path / "traffic.csv").write_text(TRAFFIC_CSV)
    (tmp_path / "scenario.json").write_text(SCENARIO)
    (tmp_path / "somefile.txt").write_text("a regular file\n")
    return tmp_path


def contents(folder: Path) -> dict[str, bytes | None]:
    """Every entry under ``folder`` with its bytes (``None`` for a folder)."""
    return {
        str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes()
        for p in sorted(folder.rglob("*"))
    }


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def assert_one_line_naming(command: str, err: str, named: str) -> str:
    """``err`` is exactly one line ``kquota COMMAND: ...`` naming ``named``; return it."""
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert err.endswith("\n")
    assert lines[0].startswith(f"kquota {command}: "), err
    assert named in lines[0], f"{named!r} not named in {lines[0]!r}"
    return lines[0]


# -- the three bad paths, for every path option --------------------------------------------

BadPath = Callable[[Path, Path, str], str]
"""``(sandbox, unwritable folder, file name) -> path``."""

BAD_PATHS: dict[str, BadPath] = {
    "too-long": lambda box, _, name: str(box / f"{LONG}{Path(name).suffix}"),
    "through-a-file": lambda box, _, name: str(box / "somefile.txt" / name),
    "unwritable-folder": lambda _, folder, name: str(folder / f"kquota-{name}"),
}

# (command, argv with PATH for the bad path, the file name PATH ends in); the other
# arguments are valid files of the sandbox (BOX).
CASES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "conformance": ("conformance", ("BOX/scenario.json", "PATH"), "x.json"),
    "configs-store-describe": ("configs", ("--store", "PATH", "--describe"), "q.sqlite"),
    "configs-store-export": (
        "configs",
        ("--store", "PATH", "--export", "BOX/out.json"),
        "q.sqlite",
    ),
    "configs-store-alter": (
        "configs",
        ("--store", "PATH", "--alter", "--add-config", "producer_byte_rate=5", "--user", "a"),
        "q.sqlite",
    ),
    "configs-store-import": (
        "configs",
        ("--store", "PATH", "--import", "BOX/quotas.json"),
        "q.sqlite",
    ),
    "configs-import": ("configs", ("--store", "BOX/store.sqlite", "--import", "PATH"), "x.json"),
    "configs-export": ("configs", ("--store", "BOX/store.sqlite", "--export", "PATH"), "x.json"),
    "backtest-traffic": (
        "backtest",
        ("--traffic", "PATH", "--quotas", "BOX/quotas.json", "--out", "BOX/out"),
        "t.csv",
    ),
    "backtest-quotas": (
        "backtest",
        ("--traffic", "BOX/traffic.csv", "--quotas", "PATH", "--out", "BOX/out"),
        "q.json",
    ),
    "backtest-store-sqlite-url": (
        "backtest",
        ("--traffic", "BOX/traffic.csv", "--store", "sqlite://PATH", "--out", "BOX/out"),
        "q.sqlite",
    ),
    "backtest-out": (
        "backtest",
        ("--traffic", "BOX/traffic.csv", "--quotas", "BOX/quotas.json", "--out", "PATH"),
        "out",
    ),
    "gen-traffic-out": ("gen-traffic", ("--out", "PATH", "--requests", "50"), "t.csv"),
    "gen-traffic-quotas-out": (
        "gen-traffic",
        ("--out", "BOX/t.parquet", "--requests", "50", "--quotas-out", "PATH"),
        "q.json",
    ),
}


@pytest.mark.parametrize("bad", BAD_PATHS)
@pytest.mark.parametrize("case", CASES)
def test_a_path_that_cannot_be_used_is_one_line_and_exit_2(
    sandbox: Path,
    unwritable: Path,
    capsys: pytest.CaptureFixture[str],
    case: str,
    bad: str,
) -> None:
    command, template, name = CASES[case]
    path = BAD_PATHS[bad](sandbox, unwritable, name)
    argv = [
        a.replace("PATH", path) if "PATH" in a else a.replace("BOX", str(sandbox)) for a in template
    ]
    store = sandbox / "store.sqlite"
    store_before = hashlib.sha256(store.read_bytes()).hexdigest()
    before = contents(sandbox)
    unwritable_before = sorted(os.listdir(unwritable))

    status, out, err = run(capsys, command, *argv)

    assert status == 2, err
    assert out == ""
    line = assert_one_line_naming(command, err, path)
    assert len(line) < len(path) + 400  # one message, not a dump
    assert hashlib.sha256(store.read_bytes()).hexdigest() == store_before
    assert contents(sandbox) == before  # nothing written, no folder or half file left
    assert sorted(os.listdir(unwritable)) == unwritable_before


def test_the_unwritable_folder_really_refuses_files(unwritable: Path) -> None:
    with pytest.raises(OSError):
        (unwritable / "kquota-probe").open("x")


def test_the_safety_net_line_names_the_file() -> None:
    """What ``kquota.cli.main`` prints for an ``OSError`` no command translated."""
    from kquota.cli.common import _os_error

    too_long = OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), LONG)
    assert _os_error(too_long) == f"'{LONG}': File name too long"
    moved = OSError(errno.EXDEV, os.strerror(errno.EXDEV), "a", None, "b")
    assert _os_error(moved) == "'a' -> 'b': Invalid cross-device link"
    assert _os_error(OSError("no file named")) == "no file named"


# -- gen-traffic writes the format its name says -----------------------------------------------


def test_gen_traffic_writes_csv_for_csv_names_and_parquet_for_parquet_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = ["--requests", "300", "--seed", "5"]
    names = ["t.csv", "t.csv.gz", "T.CSV", "t.parquet", "t.pq", "folder"]
    for name in names:
        assert main(["gen-traffic", "--out", str(tmp_path / name), *spec]) == 0, name
    capsys.readouterr()
    expected = synthetic.generate(synthetic.TrafficSpec(requests=300, seed=5)).to_pandas()

    assert (tmp_path / "t.csv").read_text().startswith('"ts_ms","broker","user"')
    assert gzip.decompress((tmp_path / "t.csv.gz").read_bytes()).startswith(b'"ts_ms"')
    tables = {
        "t.csv": pcsv.read_csv(tmp_path / "t.csv"),
        "t.csv.gz": pcsv.read_csv(tmp_path / "t.csv.gz"),
        "T.CSV": pcsv.read_csv(tmp_path / "T.CSV"),
        "t.parquet": pq.read_table(tmp_path / "t.parquet"),
        "t.pq": pq.read_table(tmp_path / "t.pq"),
        "folder": pq.read_table(tmp_path / "folder" / "part-00000.parquet"),
    }
    for name, table in tables.items():
        frame = table.to_pandas()
        pd.testing.assert_frame_equal(frame, expected, check_dtype=False, obj=name)
    for name in ("t.parquet", "t.pq", "folder/part-00000.parquet"):
        assert (tmp_path / name).read_bytes()[:4] == b"PAR1", name
    # What backtest --format auto reads each name as is what was written.
    for name in names:
        wanted = "csv" if "csv" in name.lower() else "parquet"
        assert inputs.check_traffic(str(tmp_path / name)) == wanted, name
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)  # no temporary left


@pytest.mark.parametrize("name", ["t.json", "traffic.txt", "t.csv.bz2", "t.parquet.tmp", ""])
def test_gen_traffic_refuses_a_name_that_says_no_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    out = str(tmp_path / name) if name else ""
    status, _, err = run(capsys, "gen-traffic", "--out", out, "--requests", "50")
    assert status == 2
    line = assert_one_line_naming("gen-traffic", err, f"{out!r}" if name else "empty")
    assert ".parquet" in line and ".csv" in line  # what is accepted
    assert list(tmp_path.iterdir()) == []


def test_gen_traffic_refuses_one_file_for_both_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "t.csv")
    status, _, err = run(capsys, "gen-traffic", "--out", out, "--quotas-out", out)
    assert status == 2
    assert_one_line_naming("gen-traffic", err, "is the --out file")
    assert list(tmp_path.iterdir()) == []


def test_gen_traffic_replaces_an_existing_file_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.csv"
    out.write_text("old\n")
    out.chmod(0o600)
    reference = tmp_path / "reference"
    reference.write_text("")  # the mode any new file gets here (the umask applied)
    assert main(["gen-traffic", "--out", str(out), "--requests", "20"]) == 0
    capsys.readouterr()
    assert pcsv.read_csv(out).num_rows == 20
    assert sorted(tmp_path.iterdir()) == [reference, out]
    assert out.stat().st_mode == reference.stat().st_mode  # not tempfile's private 0600


# -- reading a store that does not exist is an error -------------------------------------------


@pytest.mark.parametrize("option", ["--store", "--quotas"])  # --quotas: the old name
@pytest.mark.parametrize("form", ["sqlite-url", "plain-path"])
def test_backtest_refuses_a_store_that_does_not_exist_before_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], form: str, option: str
) -> None:
    (tmp_path / "traffic.csv").write_text(TRAFFIC_CSV)
    typo = tmp_path / "typo.db"
    spec = f"sqlite://{typo}" if form == "sqlite-url" else str(typo)
    status, _, err = run(
        capsys,
        "backtest",
        *("--traffic", str(tmp_path / "traffic.csv"), option, spec),
        *("--out", str(tmp_path / "out")),
    )
    assert status == 2
    line = assert_one_line_naming("backtest", err, str(typo))
    if option == "--quotas" and form == "plain-path":  # a quota file or a store
        assert "No such file" in line
    else:
        assert "does not exist" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["traffic.csv"]  # no store, no out


def backtest_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, *options: str, naming: str
) -> str:
    """``kquota backtest`` of a small traffic.csv with ``options`` is refused in one line
    that names ``naming``, before it writes anything: that line."""
    (tmp_path / "traffic.csv").write_text(TRAFFIC_CSV)
    traffic = ("--traffic", str(tmp_path / "traffic.csv"), "--out", str(tmp_path / "out"))
    status, _, err = run(capsys, "backtest", *traffic, *options)
    assert status == 2
    assert not (tmp_path / "out").exists()
    return assert_one_line_naming("backtest", err, naming)


@pytest.mark.parametrize("option", ["--store", "--quotas"])
def test_backtest_refuses_a_store_never_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(empty).close()  # an empty SQLite database: there, but no quotas
    line = backtest_refused(capsys, tmp_path, option, f"sqlite://{empty}", naming=str(empty))
    assert "holds no quotas yet" in line


def test_backtest_store_refuses_a_quota_file_naming_quotas(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    quotas = tmp_path / "quotas.json"
    quotas.write_text(QUOTAS.dumps())
    line = backtest_refused(capsys, tmp_path, "--store", str(quotas), naming=str(quotas))
    assert "is not a kquota store" in line and "use --quotas FILE" in line


@pytest.mark.parametrize(
    "argv",
    [
        ("--quotas", "q.json", "--store", "q.sqlite"),  # both
        (),  # neither
    ],
)
def test_backtest_takes_exactly_one_of_quotas_and_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    status, out, err = run(capsys, "backtest", "--traffic", "t.csv", *argv, "--out", "o")
    assert status == 2 and out == ""
    assert "--quotas" in err and "--store" in err
    assert "not allowed with" in err or "one of the arguments" in err
    assert not (tmp_path / "o").exists()


def test_backtest_reads_a_store_by_store_and_by_its_old_name_quotas(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--store STORE`` and the old ``--quotas STORE`` both read the store: the run goes on
    to the next check (a bad ``--master`` here, so no Spark starts) and is refused there in
    one line, with no note (the note naming ``--store`` follows a run that succeeds)."""
    (tmp_path / "traffic.csv").write_text(TRAFFIC_CSV)
    store = tmp_path / "quotas.sqlite"
    SQLiteStore(store).replace(QUOTAS)
    traffic = ("--traffic", str(tmp_path / "traffic.csv"), "--out", str(tmp_path / "out"))
    for option, spec in (
        ("--store", str(store)),
        ("--store", f"sqlite://{store}"),
        ("--quotas", str(store)),
        ("--quotas", f"sqlite://{store}"),
    ):
        status, _, err = run(capsys, "backtest", *traffic, option, spec, "--master", "x")
        assert status == 2, (option, spec)
        assert err.splitlines() == [
            "kquota backtest: invalid --master 'x': expected local, local[N], local[*], "
            "spark://HOST:PORT, yarn or k8s://URL"
        ], (option, spec)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("master", ["foo", "local[x]", "spark://", ""])
def test_backtest_refuses_a_master_spark_would_die_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], master: str
) -> None:
    """spark-submit prints a Java stack trace for these and exits: refused before it runs."""
    quotas = tmp_path / "quotas.json"
    quotas.write_text(QUOTAS.dumps())
    line = backtest_refused(
        capsys,
        tmp_path,
        "--quotas",
        str(quotas),
        "--master",
        master,
        naming=f"invalid --master {master!r}",
    )
    assert "local[N]" in line and "spark://HOST:PORT" in line


# -- Spark failures while reading and writing ----------------------------------------------------


@pytest.mark.slow
def test_spark_failures_reading_and_writing_are_one_line(
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A relative name with a colon (``run:1``) passes every local check but Hadoop takes
    ``run`` for a URL scheme: Spark's Java side refuses it when reading the traffic, and
    when writing the results after the replay ran."""
    monkeypatch.chdir(tmp_path)  # Python's; Spark's JVM keeps its own: absolute paths below
    (tmp_path / "quotas.json").write_text(QUOTAS.dumps())
    good = tmp_path / "traffic.csv"
    good.write_text(TRAFFIC_CSV)
    (tmp_path / "in:1.csv").write_text(TRAFFIC_CSV)
    common = ["--quotas", "quotas.json", "--quiet"]

    status, _, err = run(
        capsys, "backtest", "--traffic", "in:1.csv", "--out", str(tmp_path / "out"), *common
    )
    assert status == 2
    line = assert_one_line_naming("backtest", err, "cannot read traffic 'in:1.csv'")
    assert "Py4J" not in line and "An error occurred while calling" not in line

    status, _, err = run(capsys, "backtest", "--traffic", str(good), "--out", "run:1", *common)
    assert status == 2
    line = assert_one_line_naming("backtest", err, "cannot write 'run:1/requests'")
    assert "Py4J" not in line and "An error occurred while calling" not in line
    assert list((tmp_path / "run:1").iterdir()) == []  # prepared, and nothing written into it


@pytest.mark.slow
def test_csv_and_parquet_from_gen_traffic_back_test_alike(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("t.csv", "t.parquet"):
        args = ["--out", str(tmp_path / name), "--requests", "2000", "--hours", "0.1"]
        assert main(["gen-traffic", *args, "--quotas-out", str(tmp_path / "q.json")]) == 0
    results = {}
    for name in ("t.csv", "t.parquet"):
        out = tmp_path / f"out-{name}"
        quotas = str(tmp_path / "q.json")
        args = ["--traffic", str(tmp_path / name), "--quotas", quotas, "--out", str(out)]
        status = main(["backtest", *args, "--quiet"])
        assert status == 0, capsys.readouterr().err
        frame = read_requests(out / "requests")
        frame["request_id"] = frame["request_id"].astype("int64")  # CSV columns are strings
        results[name] = frame.sort_values("request_id")["throttle_ms"].tolist()
    assert "0 quarantined" in capsys.readouterr().out
    assert results["t.csv"] == results["t.parquet"]
    assert any(results["t.csv"])  # the quotas throttle something, so the comparison says a lot
