"""``pip install kquota`` as a user does it: the wheel built from this tree, installed into
fresh virtual environments with each set of extras, and every command run there for real.

Each environment holds only what the wheel and its extras bring (no source tree on the path,
no dev dependencies), so a module that a command imports without its extra fails here, as
it would for a user. The environments are made once per run and shared by the tests;
pip's cache makes every install after the machine's first one local.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paths
import pytest
from ports import free_port
from proxy_support import create_topic, stopped_by_sigterm

ROOT = paths.ROOT
SHARED = Path(os.environ.get("SHARED", ROOT.parent / "shared")).resolve()

pytestmark = pytest.mark.slow

PROXY_WITH_CAPTURE = (
    *("proxy", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:9"),
    *("--capture", "capture"),
)
"""A ``kquota proxy`` command that needs the ``proxy`` extra (for ``--capture``)."""

EXTRA_SETS: dict[str, str] = {
    "plain": "",
    "spark": "[spark]",
    "proxy": "[proxy]",
    "all": "[spark,proxy]",
}
"""The installs a user makes: ``pip install kquota``, ``"kquota[spark]"``, ``"kquota[proxy]"``
and both extras."""


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: nothing of this test run's virtualenv or source."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONSTARTUP")
    }
    env.update(extra)
    return env


def _other_pythons() -> dict[str, Path]:
    """CPython interpreters besides this one that the abi3 wheel is installed on: pyenv's
    3.12 and later, when the machine has them."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    found: dict[str, Path] = {}
    for minor in ("3.13",):
        for candidate in sorted(
            glob.glob(str(root / "versions" / f"{minor}*" / "bin" / "python3"))
        ):
            found[minor] = Path(candidate)
    return found


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The release wheel of this tree, built with maturin as a release build is."""
    out = tmp_path_factory.mktemp("wheel")
    maturin = Path(sys.executable).parent / "maturin"
    result = subprocess.run(
        [str(maturin), "build", "--release", "--quiet", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    (built,) = out.glob("kquota-*.whl")
    return built


@dataclass
class Venv:
    """A fresh virtual environment with the wheel installed."""

    path: Path
    python: Path

    @property
    def kquota(self) -> Path:
        return self.path / "bin" / "kquota"

    def run(self, *argv: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """``kquota ARGV`` from the venv's console script, in ``cwd``."""
        return subprocess.run(
            [str(self.kquota), *argv],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_clean_env(),
        )

    def python_code(self, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.python), "-c", code],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=120,
            env=_clean_env(),
        )


def _make_venv(base_python: Path, where: Path, requirement: str) -> Venv:
    subprocess.run(
        [str(base_python), "-m", "venv", str(where)],
        check=True,
        capture_output=True,
        timeout=300,
        env=_clean_env(),
    )
    python = where / "bin" / "python"
    result = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            requirement,
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        env=_clean_env(),
    )
    assert result.returncode == 0, f"pip install {requirement}:\n{result.stderr[-4000:]}"
    return Venv(where, python)


class Venvs:
    """The environments of this run, made on first use."""

    def __init__(self, wheel: Path, root: Path) -> None:
        self.wheel = wheel
        self.root = root
        self.made: dict[tuple[str, str], Venv] = {}

    def get(self, extras: str, python: str = "3.11") -> Venv:
        key = (extras, python)
        if key not in self.made:
            if python == "3.11":
                base = Path(sys.executable)
            else:
                others = _other_pythons()
                if python not in others:
                    pytest.skip(f"no CPython {python} on this machine (pyenv's versions/)")
                base = others[python]
            requirement = f"{self.wheel}{EXTRA_SETS[extras]}"
            self.made[key] = _make_venv(base, self.root / f"{extras}-{python}", requirement)
        return self.made[key]


@pytest.fixture(scope="session")
def venvs(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venvs:
    return Venvs(wheel, tmp_path_factory.mktemp("venvs"))


def _installed_distributions(venv: Venv, cwd: Path) -> set[str]:
    result = venv.python_code(
        "import importlib.metadata as m, json;"
        "print(json.dumps(sorted(d.metadata['Name'].lower() for d in m.distributions())))",
        cwd,
    )
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout))


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a refused command (no traceback)."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# -- the wheel ----------------------------------------------------------------------------


def test_the_wheel_is_one_abi3_wheel_for_cpython_3_11_and_later(wheel: Path) -> None:
    assert re.fullmatch(r"kquota-[^-]+-cp311-abi3-[a-z0-9_.]+\.whl", wheel.name), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (wheel_file,) = [n for n in names if n.endswith(".dist-info/WHEEL")]
        tags = [
            line.split(": ", 1)[1]
            for line in archive.read(wheel_file).decode().splitlines()
            if line.startswith("Tag: ")
        ]
        metadata = archive.read(wheel_file.replace("WHEEL", "METADATA")).decode()
    assert tags and all(tag.startswith("cp311-abi3-") for tag in tags), tags
    assert [n for n in names if re.search(r"_core\.[^/]*so$|_core\.[^/]*pyd$", n)] == [
        "kquota/_core.abi3.so"
    ]
    assert "kquota/_core.pyi" in names and "kquota/py.typed" in names
    assert "Requires-Python: >=3.11" in metadata
    # The version comes from one place: the Cargo workspace.
    cargo = (ROOT / "Cargo.toml").read_text()
    version = re.search(r'^version = "([^"]+)"', cargo, re.M)
    assert version is not None and f"\nVersion: {version.group(1)}\n" in metadata


# -- plain `pip install kquota` ---------------------------------------------------------------


@pytest.mark.parametrize("python", ["3.11", "3.13"])
def test_plain_install_runs_the_library_configs_and_conformance(
    venvs: Venvs, python: str, tmp_path: Path
) -> None:
    venv = venvs.get("plain", python)
    dists = _installed_distributions(venv, tmp_path)
    assert "kquota" in dists
    assert not dists & {"pyspark", "pandas", "pyarrow", "kio", "matplotlib"}, dists

    help_ = venv.run("--help", cwd=tmp_path)
    assert help_.returncode == 0, help_.stderr
    for command in ("conformance", "configs", "backtest", "gen-traffic", "traffic", "proxy"):
        assert command in help_.stdout

    store = tmp_path / "quotas.sqlite"
    alter = venv.run(
        *("configs", "--store", str(store), "--alter", "--user", "alice"),
        *("--add-config", "producer_byte_rate=1048576"),
        cwd=tmp_path,
    )
    assert alter.returncode == 0, alter.stderr
    describe = venv.run("configs", "--store", str(store), "--describe", cwd=tmp_path)
    assert describe.returncode == 0, describe.stderr
    assert "Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0" in (
        describe.stdout
    )

    conformance = venv.run(
        "conformance", str(SHARED / "conformance"), str(ROOT / "tests" / "vectors"), cwd=tmp_path
    )
    assert conformance.returncode == 0, conformance.stdout[-2000:] + conformance.stderr
    match = re.search(r"^(\d+)/(\d+) scenarios match$", conformance.stdout, re.M)
    assert match is not None and match.group(1) == match.group(2) and int(match.group(1)) > 50

    library = venv.python_code(
        "import kquota, pathlib;"
        "m = kquota.QuotaManager('produce');"
        "m.set_quota(kquota.Entity(user='alice'), 1000);"
        "print(m.record('alice', 'a', 6000, now_ms=0), m.record('alice', 'a', 6000, now_ms=10),"
        " pathlib.Path(kquota.__file__).parent.parent.name)",
        tmp_path,
    )
    assert library.returncode == 0, library.stderr
    first, second, site = library.stdout.split()
    assert (int(first), site) == (0, "site-packages")
    assert int(second) > 0  # 12,000 B over Kafka's 10 s minimum window: 1200 B/s


def test_plain_install_serves_the_metrics_over_http(venvs: Venvs, tmp_path: Path) -> None:
    venv = venvs.get("plain")
    script = (
        "import sys, kquota\n"
        "from kquota.broker import QuotaCollector, QuotaPlugin, serve_metrics\n"
        "with QuotaPlugin() as plugin:\n"
        "    plugin.produce.set_quota(kquota.Entity(user='alice'), 1_048_576)\n"
        "    plugin.on_produce('alice', 'app-1', 4096, thread_time_ns=50_000)\n"
        "    server = serve_metrics(QuotaCollector(*plugin.managers))\n"
        "    print(server.port, flush=True)\n"
        "    sys.stdin.readline()\n"
        "    server.close()\n"
    )
    process = subprocess.Popen(
        [str(venv.python), "-c", script],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_clean_env(),
    )
    try:
        assert process.stdout is not None and process.stdin is not None
        port = int(process.stdout.readline())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            text = response.read().decode()
        process.stdin.write("\n")
        process.stdin.flush()
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)
    rate = [
        line
        for line in text.splitlines()
        if line.startswith("kafka_server_produce_byte_rate{") and 'user="alice"' in line
    ]
    assert len(rate) == 1, text
    assert float(rate[0].rsplit(" ", 1)[1]) > 0


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (("backtest", "--traffic", "t", "--quotas", "q.json", "--out", "o"), "spark"),
        (("gen-traffic", "--out", "t.parquet"), "spark"),
        (("traffic", "describe", "logs"), "spark"),
        (("traffic", "import", "logs", "--out", "t"), "spark"),
        (PROXY_WITH_CAPTURE, "proxy"),
    ],
)
def test_plain_install_names_the_extra_a_command_needs(
    venvs: Venvs, tmp_path: Path, argv: tuple[str, ...], extra: str
) -> None:
    venv = venvs.get("plain")
    result = venv.run(*argv, cwd=tmp_path)
    assert result.returncode == 2
    line = _one_line(result)
    option = "--capture " if argv == PROXY_WITH_CAPTURE else ""
    assert line.startswith(f"kquota {argv[0]}: {option}needs the {extra} extra ("), line
    assert line.endswith(f'pip install "kquota[{extra}]"'), line
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_plain_install_library_serves_and_names_the_capture_extra(
    venvs: Venvs, tmp_path: Path
) -> None:
    """The proxy's server imports on a plain install; its capture names the extra."""
    venv = venvs.get("plain")
    result = venv.python_code(
        "import kquota.proxy\n"
        "print(kquota.proxy.ProxyServer.__name__)\n"
        "try:\n"
        "    kquota.proxy.TrafficCapture('capture', 'broker-1')\n"
        "except kquota.MissingExtraError as exc:\n"
        "    print(isinstance(exc, ImportError), exc)\n",
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "ProxyServer",
        "True kquota proxy --capture needs the proxy extra (pyarrow not installed):"
        ' pip install "kquota[proxy]"',
    ]
    assert list(tmp_path.iterdir()) == []  # no capture folder made


def test_plain_install_runs_the_proxy(venvs: Venvs, tansu: Any, tmp_path: Path) -> None:
    """``kquota proxy`` from a plain install, in front of Tansu: a producer's messages go
    through, and the proxy's metrics show them on the client's quota sensor."""
    venv = venvs.get("plain")
    folder, scrape = _run_proxy(venv, tansu, tmp_path, capture=False)
    assert not folder.exists()
    assert _produce_rate(scrape) > 0  # the client's quota sensor, fed by the Rust data path


# -- `pip install "kquota[spark]"` --------------------------------------------------------------


def _request_log(folder: Path) -> Path:
    """A small request log in Kafka's format (the generator needs kio: written here, by the
    test's own environment)."""
    import requestlog_gen as gen

    gen.write(gen.LogSpec(requests=300, brokers=2, seed=5), folder)
    return folder


def _backtest_and_check(venv: Venv, traffic: Path, quotas: Path, out: Path, cwd: Path) -> None:
    result = venv.run(
        *("backtest", "--traffic", str(traffic), "--quotas", str(quotas), "--out", str(out)),
        *("--master", "local[1]", "--quiet"),
        cwd=cwd,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert (out / "report.html").is_file()
    assert any((out / "requests").rglob("*.parquet"))


def test_spark_install_generates_and_backtests_traffic(venvs: Venvs, tmp_path: Path) -> None:
    venv = venvs.get("spark")
    dists = _installed_distributions(venv, tmp_path)
    assert {"pyspark", "pandas", "pyarrow", "matplotlib"} <= dists and "kio" not in dists

    generated = venv.run(
        *("gen-traffic", "--out", str(tmp_path / "traffic.parquet"), "--requests", "5000"),
        *("--quotas-out", str(tmp_path / "quotas.json")),
        cwd=tmp_path,
    )
    assert generated.returncode == 0, generated.stderr
    _backtest_and_check(
        venv, tmp_path / "traffic.parquet", tmp_path / "quotas.json", tmp_path / "out", tmp_path
    )

    logs = _request_log(tmp_path / "logs")
    described = venv.run(
        "traffic", "describe", str(logs), "--master", "local[1]", cwd=tmp_path, timeout=600
    )
    assert described.returncode == 0, described.stderr[-4000:]
    assert "requests" in described.stdout
    imported = venv.run(
        *("traffic", "import", str(logs), "--out", str(tmp_path / "imported")),
        *("--master", "local[1]"),
        cwd=tmp_path,
        timeout=600,
    )
    assert imported.returncode == 0, imported.stderr[-4000:]
    assert any((tmp_path / "imported").rglob("*.parquet"))


# -- `pip install "kquota[proxy]"` and both extras ------------------------------------------


def _produce_through(bootstrap: str, topic: str, count: int) -> None:
    """A real librdkafka producer (from this test's environment) through the proxy."""
    from confluent_kafka import Producer

    create_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "installed", "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, i.to_bytes(4, "big") + b"x" * 500)
        producer.poll(0)
    assert producer.flush(60) == 0


def _run_proxy(venv: Venv, tansu: Any, tmp_path: Path, *, capture: bool) -> tuple[Path, str]:
    """``kquota proxy`` from ``venv`` in front of Tansu (with ``--capture`` when
    ``capture``), a producer through it, a scrape of its metrics, SIGTERM; the capture
    folder and the scrape."""
    store = tmp_path / "quotas.sqlite"
    alter = venv.run(
        *("configs", "--store", str(store), "--alter", "--client", "installed"),
        *("--add-config", "producer_byte_rate=1000000"),
        cwd=tmp_path,
    )
    assert alter.returncode == 0, alter.stderr
    folder = tmp_path / "capture"
    metrics_port = free_port()
    argv = [
        str(venv.kquota),
        *("proxy", "--listen", f"127.0.0.1:{tansu.proxy_port}"),
        *("--upstream", f"127.0.0.1:{tansu.port}", "--store", str(store)),
        *("--metrics-port", str(metrics_port), "--log-level", "WARNING"),
    ]
    if capture:
        argv += ["--capture", str(folder), "--capture-broker", "1"]
    process = subprocess.Popen(
        argv,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_clean_env(PYTHONUNBUFFERED="1"),
    )
    with stopped_by_sigterm(process) as ended:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("kquota proxy: listening on"), line
        _produce_through(f"127.0.0.1:{tansu.proxy_port}", f"installed-{venv.path.name}", 200)
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as response:
            scrape = response.read().decode()
    assert "Traceback" not in ended.stderr, ended.stderr
    if capture:
        assert list(folder.glob("traffic-*.parquet")), ended.stderr
    return folder, scrape


def _produce_rate(scrape: str) -> float:
    """The produce byte rate of the producer's client id in a scrape of the proxy."""
    (line,) = [
        line
        for line in scrape.splitlines()
        if line.startswith("kafka_server_produce_byte_rate{") and 'client_id="installed"' in line
    ]
    return float(line.rsplit(" ", 1)[1])


def test_proxy_install_runs_the_proxy_with_a_capture(
    venvs: Venvs, tansu: Any, tmp_path: Path
) -> None:
    venv = venvs.get("proxy")
    dists = _installed_distributions(venv, tmp_path)
    assert "pyarrow" in dists and not dists & {"pyspark", "pandas", "kio"}, dists
    _, scrape = _run_proxy(venv, tansu, tmp_path, capture=True)
    assert _produce_rate(scrape) > 0

    backtest = venv.run("backtest", "--traffic", "t", "--quotas", "q", "--out", "o", cwd=tmp_path)
    assert backtest.returncode == 2
    assert _one_line(backtest).endswith('pip install "kquota[spark]"')


def test_both_extras_backtest_what_the_proxy_captured(
    venvs: Venvs, tansu: Any, tmp_path: Path
) -> None:
    venv = venvs.get("all")
    capture, _ = _run_proxy(venv, tansu, tmp_path, capture=True)
    quotas = tmp_path / "quotas.json"
    exported = venv.run(
        "configs", "--store", str(tmp_path / "quotas.sqlite"), "--export", str(quotas), cwd=tmp_path
    )
    assert exported.returncode == 0, exported.stderr
    _backtest_and_check(venv, capture, quotas, tmp_path / "out", tmp_path)


# -- the extras table ---------------------------------------------------------------------------


def test_each_extra_names_the_modules_the_commands_check() -> None:
    import tomllib

    from kquota._extras import EXTRAS

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for extra, modules in EXTRAS.items():
        names = {
            re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower()
            for requirement in extras[extra]
        }
        assert names == set(modules), (extra, names, modules)
