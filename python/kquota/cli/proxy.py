"""``kquota proxy``: Kafka's client quotas in front of a Kafka-protocol broker, or (with
``--bootstrap``) a gateway in front of a whole cluster.

Runs :class:`~kquota.proxy.ProxyServer` on ``--listen`` in front of ``--upstream`` (or the
cluster of ``--bootstrap``, each broker on a port of ``--broker-ports``), with
the quotas of a store followed live (``kquota configs --alter`` changes apply within a
second) and, with ``--metrics-port``, Kafka's quota metrics in the Prometheus format (a
gateway's per broker, with a ``broker`` label).
Besides the produce, fetch and request quotas it applies the store's
``controller_mutation_rate`` to CreateTopics, CreatePartitions and DeleteTopics (KIP-599)
and its ``connection_creation_rate`` of IPs, with ``--max-connection-creation-rate`` and
``--listener-max-connection-creation-rate``, to new connections (KIP-612).
SIGTERM or SIGINT stops it cleanly: no new connection is accepted, requests in flight are
answered, then every connection is closed and the status is 0. Bad options or an unusable
store exit with status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import re
import signal
import sys
from typing import Any

from kquota import (
    UNLIMITED_CONNECTION_RATE,
    ConnectionQuotas,
    ControllerMutationQuotaManager,
    QuotaManager,
    load_callback,
)
from kquota._core import check_proxy_options, check_window_seconds
from kquota._extras import missing, needs
from kquota.cli.common import EXIT_OK, fail
from kquota.config.backends import STORE_ENV, open_store
from kquota.config.store import DEFAULT_LOCK_TIMEOUT
from kquota.exceptions import InvalidConfigError, KquotaError
from kquota.proxy.admin import AdminAccess
from kquota.proxy.capture import DEFAULT_ROLL_BYTES, DEFAULT_ROLL_SECONDS
from kquota.proxy.server import (
    DEFAULT_CONNECTIONS_MAX_IDLE,
    DEFAULT_LISTENER,
    MAX_REQUEST_BYTES,
)

_COMMAND = "proxy"


def register(subparsers: Any) -> None:
    """Add the ``proxy`` subcommand."""
    parser = subparsers.add_parser(
        _COMMAND,
        help="a Kafka-protocol proxy that applies Kafka's client quotas to a broker",
        description=(
            "Listen for Kafka clients and forward their requests to one broker, applying\n"
            "Kafka's produce, fetch and request quotas (KIP-13, KIP-124, KIP-219) from the\n"
            "store, followed live. The broker must advertise the proxy's address (Tansu:\n"
            "--advertised-listener-url; Apache Kafka: advertised.listeners).\n\n"
            "The store's controller_mutation_rate (KIP-599) applies to CreateTopics,\n"
            "CreatePartitions and DeleteTopics: at strict request versions (CreateTopics\n"
            "v6+, CreatePartitions v3+, DeleteTopics v5+) the topics over the quota fail\n"
            "with THROTTLING_QUOTA_EXCEEDED and are not forwarded; older versions are\n"
            "forwarded and throttled after. Partition counts of existing topics come from\n"
            "a Metadata v12 request to the broker (Kafka 3.1+). The store's IP\n"
            "connection_creation_rate (KIP-612) closes a connection over it after the\n"
            "throttle time; the broker and listener rates below delay accepting.\n\n"
            "As a gateway (--bootstrap instead of --upstream), it fronts a whole cluster\n"
            "with no change to its brokers: --listen is the bootstrap address clients are\n"
            "given, broker N is served on the N-th port of --broker-ports, and every broker\n"
            "address in the responses is rewritten to the gateway's. Each broker's traffic\n"
            "is held to the quotas on sensors of its own, as each Kafka broker holds it.\n"
            "A gateway answers Kafka's quota administration (DescribeClientQuotas and\n"
            "AlterClientQuotas, KIP-546) from and into the store: kafka-configs.sh\n"
            "--bootstrap-server <gateway> --alter --add-config ... changes its quotas,\n"
            "for the principals --quota-admins admits (by default, whoever the cluster\n"
            "itself allows: ALTER_CONFIGS or DESCRIBE_CONFIGS on the cluster, asked on the\n"
            "client's own connection). It says at start who that is."
        ),
        epilog=(
            "examples:\n"
            "  kquota proxy --listen 127.0.0.1:9092 --upstream 127.0.0.1:19092 \\\n"
            "      --store quotas.sqlite --metrics-port 9464\n"
            "  kquota proxy --listen 127.0.0.1:9092 --bootstrap kafka-0:9092,kafka-1:9092 \\\n"
            "      --broker-ports 9100-9199 --store quotas.sqlite"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--listen", required=True, metavar="HOST:PORT", help="where clients connect (port 0: any)"
    )
    upstream = parser.add_mutually_exclusive_group(required=True)
    upstream.add_argument("--upstream", metavar="HOST:PORT", help="the broker's listener")
    upstream.add_argument(
        "--bootstrap",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="gateway mode: the cluster's bootstrap addresses (the first that answers)",
    )
    parser.add_argument(
        "--broker-ports",
        metavar="FIRST-LAST",
        help="gateway mode: the ports the brokers get, node id N on FIRST+N (required)",
    )
    parser.add_argument(
        "--advertised-host",
        metavar="HOST",
        help="gateway mode: the host clients are told (default: the --listen host)",
    )
    parser.add_argument(
        "--quota-admins",
        metavar="WHO",
        help=(
            "gateway mode: who may read and change the quotas with Kafka's tools: cluster"
            " (default: whoever the cluster allows, asked on the client's own connection),"
            " User:NAME[,User:NAME...] (only those principals), cluster,User:NAME... (a"
            " listed principal the cluster allows), anyone, or nobody"
        ),
    )
    parser.add_argument(
        "--quota-callback",
        metavar="MODULE:FACTORY",
        help=(
            "a custom quota callback (KIP-257): FACTORY() in the importable MODULE returns a"
            " kquota.QuotaCallback that resolves clients and gives their quota limits instead"
            " of Kafka's precedence; it is told of every quota in the store and of the"
            " brokers and partition leaders in Metadata responses (a gateway calls FACTORY"
            " once more for each broker: each has an instance of its own)"
        ),
    )
    parser.add_argument(
        "--store",
        metavar="STORE",
        help=(
            f"the quota store, as for kquota configs (default: ${STORE_ENV}, else"
            " $XDG_STATE_HOME/kquota/quotas.sqlite); it must exist: kquota configs --alter"
            " creates it. Several gateways share one with kafka://HOST:PORT/TOPIC"
        ),
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="N",
        help=(
            "serve Prometheus metrics on 127.0.0.1:N (0: any free port); a gateway's carry a"
            " broker label, each broker's node id (-1: the bootstrap port's own sensors)"
        ),
    )
    parser.add_argument(
        "--num-samples",
        type=int,
        default=11,
        metavar="N",
        help="quota.window.num: samples per quota window (default 11)",
    )
    parser.add_argument(
        "--window-ms",
        type=int,
        default=1000,
        metavar="MS",
        help="quota.window.size.seconds, in ms: one sample's span (default 1000)",
    )
    parser.add_argument(
        "--kafka-version",
        metavar="VERSION",
        help="follow the quota rules of this Kafka release, 3.8 or later, e.g. 4.4 (default 4.1)",
    )
    parser.add_argument(
        "--max-request-bytes",
        type=int,
        default=MAX_REQUEST_BYTES,
        metavar="BYTES",
        help="socket.request.max.bytes: the largest request accepted (default 100 MiB)",
    )
    parser.add_argument(
        "--connections-max-idle-ms",
        type=int,
        default=int(DEFAULT_CONNECTIONS_MAX_IDLE * 1000),
        metavar="MS",
        help=(
            "connections.max.idle.ms: a client connection idle this long (a client stopped"
            " in the middle of a request among them) is closed (default 600000: 10 minutes)"
        ),
    )
    parser.add_argument(
        "--num-partitions",
        type=int,
        default=1,
        metavar="N",
        help=(
            "num.partitions: the partitions the broker gives a CreateTopics topic that asks"
            " for -1, as the controller-mutation quota counts them (default 1)"
        ),
    )
    parser.add_argument(
        "--max-connection-creation-rate",
        type=int,
        default=UNLIMITED_CONNECTION_RATE,
        metavar="N",
        help=(
            "max.connection.creation.rate: new connections per second the proxy accepts"
            " in all (a gateway: on each port apart, as each broker counts its own);"
            " over it, accepting waits (default: unlimited)"
        ),
    )
    parser.add_argument(
        "--listener-max-connection-creation-rate",
        type=int,
        default=None,
        metavar="N",
        help=(
            "listener.name.LISTENER.max.connection.creation.rate: the same for the proxy's"
            " listener (default: unlimited)"
        ),
    )
    parser.add_argument(
        "--listener-name",
        default=DEFAULT_LISTENER,
        metavar="NAME",
        help=("the listener name the connection rates and their metrics use (default %(default)s)"),
    )
    parser.add_argument(
        "--capture",
        metavar="DIR",
        help=(
            "write every request the proxy checks to DIR as Parquet traffic for kquota"
            " backtest (created if missing; files appear complete, rolled by size or age)"
        ),
    )
    parser.add_argument(
        "--capture-broker",
        metavar="NAME",
        help=(
            "the broker column of the capture (default: the --upstream HOST:PORT; a gateway"
            " writes each broker's node id)"
        ),
    )
    parser.add_argument(
        "--capture-roll-mb",
        type=int,
        default=DEFAULT_ROLL_BYTES // (1024 * 1024),
        metavar="MB",
        help="start a new capture file once one holds this many MiB (default %(default)s)",
    )
    parser.add_argument(
        "--capture-roll-seconds",
        type=float,
        default=DEFAULT_ROLL_SECONDS,
        metavar="S",
        help="... or once it is this old (default %(default)g)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=2,
        metavar="N",
        help="threads serving the connections (default 2)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level on stderr (default INFO)",
    )
    parser.set_defaults(run=run)


def _address(option: str, text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"invalid {option} {text!r}: expected HOST:PORT with a port 0-65535")
    return host.strip("[]"), int(port)


def _port_range(text: str) -> tuple[int, int]:
    first, sep, last = text.partition("-")
    if not sep or not first.isdigit() or not last.isdigit():
        raise ValueError(f"invalid --broker-ports {text!r}: expected FIRST-LAST, e.g. 9100-9199")
    return int(first), int(last)


# The proxy's options the command line gives, by the name the data path's rules use, and
# the flag that sets each.
_FLAGS = {
    "listen": "--listen",
    "broker_ports": "--broker-ports",
    "advertised_host": "--advertised-host",
    "max_request_bytes": "--max-request-bytes",
    "default_num_partitions": "--num-partitions",
    "listener": "--listener-name",
    "threads": "--threads",
}
# A quoted value in a message: option names are not translated inside one.
_QUOTED = re.compile(r'("(?:[^"\\]|\\.)*")')
# Further on in a message, only the names no English word shares.
_NAMES = re.compile(r"\b(" + "|".join(name for name in _FLAGS if "_" in name) + r")\b")


def _with_flags(exc: InvalidConfigError, upstream_flag: str) -> ValueError:
    """The data path's message (``invalid <option> <value>: <reason>``) with the options
    named by their flags."""
    flags = {**_FLAGS, "upstream": upstream_flag}
    message = str(exc)
    option = message.removeprefix("invalid ").partition(" ")[0]
    if message.startswith("invalid ") and option in flags:
        message = f"invalid {flags[option]}{message.removeprefix(f'invalid {option}')}"
    parts = _QUOTED.split(message)
    for i in range(0, len(parts), 2):  # the parts between quoted values
        parts[i] = _NAMES.sub(lambda m: flags[m.group(1)], parts[i])
    return ValueError("".join(parts))


def run(args: argparse.Namespace) -> int:
    """Validate the options, then serve until SIGTERM or SIGINT."""
    if args.capture is not None and (modules := missing("proxy")):
        return fail(_COMMAND, f"--capture {needs('proxy', modules)}")
    try:
        listen = _address("--listen", args.listen)
        gateway = args.bootstrap is not None
        option = "--bootstrap" if gateway else "--upstream"
        text = args.bootstrap if gateway else args.upstream
        upstream = [_address(option, part.strip()) for part in text.split(",")]
        if len(upstream) > 1 and not gateway:
            raise ValueError(f"invalid --upstream {text!r}: one broker (a list is --bootstrap)")
        broker_ports = None
        if gateway:
            if args.broker_ports is None:
                raise ValueError("--bootstrap needs --broker-ports FIRST-LAST")
            broker_ports = _port_range(args.broker_ports)
            if args.capture_broker is not None:
                raise ValueError("--capture-broker is for --upstream: a gateway writes node ids")
        else:
            for gateway_option, given in (
                ("--broker-ports", args.broker_ports),
                ("--advertised-host", args.advertised_host),
                ("--quota-admins", args.quota_admins),
            ):
                if given is not None:
                    raise ValueError(f"{gateway_option} needs --bootstrap (gateway mode)")
        # connections.max.idle.ms is whole milliseconds here and seconds to the data path,
        # whose message could not name the value typed.
        if args.connections_max_idle_ms < 1:
            raise ValueError(
                f"invalid --connections-max-idle-ms {args.connections_max_idle_ms}:"
                " expected 1 or more"
            )
        try:
            check_proxy_options(
                text,
                listen=args.listen,
                max_request_bytes=args.max_request_bytes,
                connections_max_idle=args.connections_max_idle_ms / 1000,
                default_num_partitions=args.num_partitions,
                listener=args.listener_name,
                threads=args.threads,
                broker_ports=broker_ports,
                advertised_host=args.advertised_host,
            )
        except InvalidConfigError as exc:
            raise _with_flags(exc, option) from None
        admin_access = AdminAccess.parse(args.quota_admins or "cluster", "--quota-admins")
        if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
            raise ValueError(f"invalid --metrics-port {args.metrics_port}: expected 0-65535")
        if args.num_samples < 2:
            raise ValueError(f"invalid --num-samples {args.num_samples}: expected 2 or more")
        if args.window_ms < 1:
            raise ValueError(f"invalid --window-ms {args.window_ms}: expected 1 or more")
        check_window_seconds(args.window_ms)  # quota.window.size.seconds, for every manager
        if args.capture is None:
            for option, value, default in (
                ("--capture-broker", args.capture_broker, None),
                ("--capture-roll-mb", args.capture_roll_mb, DEFAULT_ROLL_BYTES // 2**20),
                ("--capture-roll-seconds", args.capture_roll_seconds, DEFAULT_ROLL_SECONDS),
            ):
                if value != default:
                    raise ValueError(f"{option} {value} needs --capture DIR")
        elif args.capture_roll_mb < 1:
            raise ValueError(
                f"invalid --capture-roll-mb {args.capture_roll_mb}: expected 1 or more"
            )
        elif not args.capture_roll_seconds > 0:
            raise ValueError(
                f"invalid --capture-roll-seconds {args.capture_roll_seconds:g}:"
                " expected more than 0"
            )
        callback = None if args.quota_callback is None else load_callback(args.quota_callback)
        managers = [
            QuotaManager(
                t,
                num_samples=args.num_samples,
                window_ms=args.window_ms,
                callback=callback,
                kafka_version=args.kafka_version,
            )
            for t in ("produce", "fetch", "request")
        ]
        mutation = ControllerMutationQuotaManager(
            num_samples=args.num_samples,
            window_ms=args.window_ms,
            kafka_version=args.kafka_version,
        )
        connections = ConnectionQuotas(
            num_samples=args.num_samples,
            window_ms=args.window_ms,
            max_connection_creation_rate=args.max_connection_creation_rate,
        )
        connections.add_listener(args.listener_name, args.listener_max_connection_creation_rate)
        store = open_store(args.store, timeout=DEFAULT_LOCK_TIMEOUT)
    except (ValueError, KquotaError) as exc:
        return fail(_COMMAND, exc)

    from kquota import monotonic_ms
    from kquota.broker import QuotaPlugin, serve_metrics
    from kquota.config.live import LiveQuotas
    from kquota.proxy import ProxyServer, StoreAdmin

    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    capture = None
    if args.capture is not None:
        from kquota.proxy.capture import TrafficCapture

        try:
            capture = TrafficCapture(
                args.capture,
                args.capture_broker or text,
                roll_bytes=args.capture_roll_mb * 1024 * 1024,
                roll_seconds=args.capture_roll_seconds,
            )
        except KquotaError as exc:
            return fail(_COMMAND, exc)
    try:
        live = LiveQuotas(store, *managers, mutation=mutation, connections=connections).start()
    except KquotaError as exc:
        if capture is not None:
            capture.close()
        return fail(_COMMAND, exc)
    metrics = None
    # On Kafka's clock (a new mutation token bucket is full); its channels' maintenance
    # thread ends mutes on time; it closes the callback.
    plugin = QuotaPlugin(*managers, clock=monotonic_ms, background=True, quota_callback=callback)
    try:
        server = ProxyServer(
            upstream if gateway else upstream[0],
            plugin,
            max_request_bytes=args.max_request_bytes,
            connections_max_idle=args.connections_max_idle_ms / 1000,
            capture=capture,
            mutation=mutation,
            connection_quotas=connections,
            listener=args.listener_name,
            default_num_partitions=args.num_partitions,
            threads=args.threads,
            broker_ports=broker_ports,
            advertised_host=args.advertised_host,
            admin=(
                StoreAdmin(store, on_change=live.refresh, access=admin_access) if gateway else None
            ),
            # Each broker's own instance, as each Kafka broker has.
            callback_factory=(
                functools.partial(load_callback, args.quota_callback)
                if gateway and callback is not None
                else None
            ),
        )
        if args.metrics_port is not None:
            # A gateway's are per broker, labelled with the node id.
            collectors = server.metrics_collectors(clock=monotonic_ms)
            metrics = serve_metrics(*collectors, port=args.metrics_port)
        return asyncio.run(_serve(server, listen, metrics.port if metrics else None))
    except (KquotaError, OSError) as exc:
        return fail(_COMMAND, exc)
    finally:
        if capture is not None:
            capture.close()  # what the server has not closed yet: the rest of the rows
        if metrics is not None:
            metrics.close()
        plugin.close()
        live.stop()


async def _serve(server: Any, listen: tuple[str, int], metrics_port: int | None) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await server.start(*listen)
    host, port = server.address
    upstreams = ",".join(f"{h}:{p}" for h, p in server.bootstrap)
    extra = f", metrics on 127.0.0.1:{metrics_port}" if metrics_port is not None else ""
    if server.broker_ports is None:
        print(f"kquota proxy: listening on {host}:{port}, upstream {upstreams}{extra}", flush=True)
    else:
        first, last = server.broker_ports
        print(
            f"kquota proxy: gateway listening on {host}:{port}, brokers on ports"
            f" {first}-{last}, bootstrap {upstreams}{extra}",
            flush=True,
        )
    await stop.wait()
    logging.getLogger("kquota.proxy").info("shutting down: answering requests in flight")
    await server.shutdown()
    return EXIT_OK
