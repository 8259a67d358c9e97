"""``kquota configs``: set, change and show quotas the way ``kafka-configs.sh`` does.

A thin layer over :mod:`kquota.config`: it parses Kafka's options into a
:class:`~kquota.config.store.ChangeSet` or a filter, validates everything before the store
is opened, and prints Kafka's wording. Exit status 0 on success, 2 on bad input or an
unusable store (one line on stderr; the store is then unchanged).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kquota import DEFAULT, Entity
from kquota.cli.common import EXIT_OK, fail
from kquota.config.backends import STORE_ENV, open_store
from kquota.config.model import (
    CLIENT_PROPERTIES,
    IP_PROPERTIES,
    AnyEntity,
    IpEntity,
    QuotaConfig,
    check_ip,
    check_name,
    check_property,
    describe_entity,
    entity_sort_key,
    parse_value,
)
from kquota.config.store import (
    DEFAULT_LOCK_TIMEOUT,
    Alteration,
    ChangeSet,
    QuotaStore,
    SQLiteStore,
)
from kquota.exceptions import KquotaError, QuotaFileError, StoreError

ENTITY_TYPES: Final = ("users", "clients", "ips")
"""The entity types of client quotas, as ``kafka-configs --entity-type`` names them."""


@dataclass(frozen=True)
class EntityFilter:
    """Entity types given on the command line, each with a name, the default, or any."""

    parts: tuple[tuple[str, str | None], ...]
    """``(entity type, name)``: a name, :data:`~kquota.DEFAULT`, or ``None`` for any.
    An ``ips`` name is the canonical address (see :func:`~kquota.config.model.check_ip`)."""

    def entity(self) -> AnyEntity:
        """The one entity an ``--alter`` names (every type has a name or the default)."""
        names = dict(self.parts)
        if "ips" in names:
            return IpEntity(names["ips"] or DEFAULT)
        return Entity(user=names.get("users"), client_id=names.get("clients"))

    def matches(self, entity: AnyEntity) -> bool:
        """Kafka's ``containsOnly``: exactly these entity types, with the names given.

        No types at all matches every entity.
        """
        if not self.parts:
            return True
        values = (
            {"ips": entity.ip}
            if isinstance(entity, IpEntity)
            else {"users": entity.user, "clients": entity.client_id}
        )
        types = {t for t, _ in self.parts}
        if {t for t, v in values.items() if v is not None} != types:
            return False
        return all(name is None or values[t] == name for t, name in self.parts)


def register(subparsers: Any) -> None:
    """Add the ``configs`` subcommand."""
    parser = subparsers.add_parser(
        "configs",
        help="set, change and show quotas in the store, like kafka-configs.sh",
        description=(
            "Alter, describe, import or export the client quotas of a store, with\n"
            "kafka-configs.sh's options. Entity types: users and clients, alone or together\n"
            "(a user's clients), or ips alone; each with --entity-name NAME or --entity-default.\n"
            "Properties of users and clients:\n"
            f"  {', '.join(CLIENT_PROPERTIES)}.\n"
            f"Properties of ips (IPv4 or IPv6 addresses): {', '.join(IP_PROPERTIES)}.\n"
            "Every change is one transaction. Bad input exits with status 2 and changes nothing."
        ),
        epilog=(
            "examples:\n"
            "  kquota configs --alter --add-config 'producer_byte_rate=1048576' "
            "--entity-type users --entity-name alice\n"
            "  kquota configs --alter --delete-config producer_byte_rate "
            "--entity-type users --entity-default\n"
            "  kquota configs --alter --add-config controller_mutation_rate=10 "
            "--client-defaults\n"
            "  kquota configs --alter --add-config connection_creation_rate=20 "
            "--entity-type ips --entity-name 10.0.0.1\n"
            "  kquota configs --describe --entity-type users --entity-name bob "
            "--entity-type clients --entity-name app-1\n"
            "  kquota configs --describe --entity-type ips\n"
            "  kquota configs --export quotas.json\n"
            "  kquota configs --store quotas.sqlite --import out/recommendations/quotas.json\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--store",
        metavar="STORE",
        help=(
            f"the store: a SQLite file path, sqlite://PATH, kafka://HOST:PORT/TOPIC (a compacted"
            f" topic, shared by several hosts; ?NAME=VALUE&... adds librdkafka settings,"
            f" ?config=FILE reads them from a file), or SCHEME://... of an installed backend"
            f" (default: ${STORE_ENV}, else $XDG_STATE_HOME/kquota/quotas.sqlite, "
            "i.e. ~/.local/state/kquota/quotas.sqlite)"
        ),
    )
    parser.add_argument(
        "--lock-timeout",
        type=float,
        default=DEFAULT_LOCK_TIMEOUT,
        metavar="SECONDS",
        help=f"wait at most this long for another process's lock ({DEFAULT_LOCK_TIMEOUT:g})",
    )
    actions = parser.add_argument_group("actions (exactly one)")
    actions.add_argument("--alter", action="store_true", help="change one entity's quotas")
    actions.add_argument(
        "--describe", action="store_true", help="show quotas (every entity without a filter)"
    )
    actions.add_argument(
        "--import",
        dest="import_file",
        metavar="FILE",
        help=(
            "replace the store's whole content (window included) with the quota file FILE, "
            "in one transaction: entities not in FILE are deleted"
        ),
    )
    actions.add_argument(
        "--export",
        dest="export_file",
        metavar="FILE",
        help="write the store to the quota file FILE",
    )
    change = parser.add_argument_group("--alter")
    change.add_argument(
        "--add-config",
        action="append",
        metavar="K=V,...",
        help="properties to set, e.g. 'producer_byte_rate=1048576,consumer_byte_rate=2097152'",
    )
    change.add_argument(
        "--delete-config",
        action="append",
        metavar="K,...",
        help="properties to delete, e.g. 'producer_byte_rate'",
    )
    entity = parser.add_argument_group("entities")
    entity.add_argument(
        "--entity-type",
        action="append",
        dest="entity_types",
        metavar="TYPE",
        help="users, clients or ips; give users and clients (in either order) for a user's clients",
    )
    entity.add_argument(
        "--entity-name",
        action="append",
        dest="entity_names",
        metavar="NAME",
        help="the name for the --entity-type at the same position",
    )
    entity.add_argument(
        "--entity-default",
        action="append_const",
        const=None,
        dest="entity_names",
        help="the default entity for the --entity-type at the same position",
    )
    entity.add_argument(
        "--user",
        action="append",
        dest="user_flags",
        metavar="NAME",
        help="= --entity-type users --entity-name NAME",
    )
    entity.add_argument(
        "--user-defaults",
        action="append_const",
        const=None,
        dest="user_flags",
        help="= --entity-type users --entity-default",
    )
    entity.add_argument(
        "--client",
        action="append",
        dest="client_flags",
        metavar="ID",
        help="= --entity-type clients --entity-name ID",
    )
    entity.add_argument(
        "--client-defaults",
        action="append_const",
        const=None,
        dest="client_flags",
        help="= --entity-type clients --entity-default",
    )
    entity.add_argument(
        "--ip",
        action="append",
        dest="ip_flags",
        metavar="IP",
        help="= --entity-type ips --entity-name IP",
    )
    entity.add_argument(
        "--ip-defaults",
        action="append_const",
        const=None,
        dest="ip_flags",
        help="= --entity-type ips --entity-default",
    )
    parser.add_argument(
        "--json", action="store_true", help="with --describe: print the quota file format"
    )
    parser.set_defaults(run=run, entity_names=None)


def run(args: argparse.Namespace) -> int:
    """Validate everything, then open the store and do the one action."""
    try:
        return _run(args)
    except KquotaError as exc:
        return fail("configs", exc)


def _run(args: argparse.Namespace) -> int:
    action = _action(args)
    entities = _entities(args, action)
    if action == "alter":
        change = _change_set(args, entities)
        store = _store(args)
        version = store.apply(change)
        print(
            f"Completed updating quota configs for {describe_entity(entities.entity())} "
            f"in {store.describe()} (version {version})."
        )
    elif action == "describe":
        config = _read(_store(args))
        entries = tuple(
            sorted(
                (e for e in config.entries if entities.matches(e.entity)),
                key=lambda e: entity_sort_key(e.entity),
            )
        )
        if args.json:
            print(QuotaConfig(config.window, entries).dumps(), end="")
        for entry in [] if args.json else entries:
            properties = ", ".join(f"{k}={v!r}" for k, v in sorted(entry.config.items()))
            print(f"Quota configs for {describe_entity(entry.entity)} are {properties}")
    elif action == "import":
        config = QuotaConfig.load(args.import_file)
        store = _store(args)
        version = store.replace(config)
        print(
            f"Imported {len(config.entries)} entities from {args.import_file} into "
            f"{store.describe()} (version {version})."
        )
    else:
        store = _store(args)
        config = _read(store)
        if isinstance(store, SQLiteStore) and _same_file(Path(args.export_file), store.path):
            raise QuotaFileError(
                f"--export {args.export_file!r} is the store itself: give another file"
            )
        _write_file(Path(args.export_file), config.dumps())
        print(
            f"Exported {len(config.entries)} entities from {store.describe()} "
            f"to {args.export_file}."
        )
    return EXIT_OK


def _action(args: argparse.Namespace) -> str:
    given = [
        name
        for name, present in (
            ("alter", args.alter),
            ("describe", args.describe),
            ("import", args.import_file is not None),
            ("export", args.export_file is not None),
        )
        if present
    ]
    if len(given) != 1:
        found = f" (got --{', --'.join(given)})" if given else ""
        raise QuotaFileError(
            f"exactly one action is needed: --alter, --describe, --import FILE or "
            f"--export FILE{found}"
        )
    action = given[0]
    if action != "alter" and (args.add_config or args.delete_config):
        raise QuotaFileError("--add-config and --delete-config go with --alter only")
    if action != "describe" and args.json:
        raise QuotaFileError("--json goes with --describe only")
    return action


def _entities(args: argparse.Namespace, action: str) -> EntityFilter:
    # Names and defaults in command-line order; None stands for --entity-default.
    types: list[str] = list(args.entity_types or [])
    names: list[str | None] = list(args.entity_names or [])
    flags = (
        [("users", n) for n in args.user_flags or []]
        + [("clients", n) for n in args.client_flags or []]
        + [("ips", n) for n in args.ip_flags or []]
    )
    if flags and (types or names):
        raise QuotaFileError(
            "--user/--client/--ip(-defaults) cannot be combined with --entity-type/-name/-default"
        )
    if flags:
        types, names = [t for t, _ in flags], [n for _, n in flags]
    if action in ("import", "export"):
        if types or names:
            raise QuotaFileError(f"--{action} works on the whole store: give no entity options")
        return EntityFilter(())
    for entity_type in types:
        if entity_type not in ENTITY_TYPES:
            raise QuotaFileError(
                f"unknown entity type {entity_type!r}: expected users, clients or ips"
            )
    if len(set(types)) != len(types):
        raise QuotaFileError(f"entity type {types[-1]!r} given twice")
    if "ips" in types and len(types) > 1:
        others = " and ".join(t for t in types if t != "ips")
        raise QuotaFileError(
            f"entity type ips cannot be combined with {others}: only users and clients may "
            "be given together"
        )
    if len(names) > len(types):
        given = [n for n in names if n is not None]
        if len(types) == 1 and given and None in names:
            raise QuotaFileError(
                f"--entity-name {given[0]!r} and --entity-default both given for {types[0]}: "
                "give one of them"
            )
        raise QuotaFileError(
            f"{len(names)} entity names/defaults for {len(types)} entity type(s): give one "
            "--entity-name or --entity-default per --entity-type"
        )
    if action == "alter" and (not types or len(names) < len(types)):
        missing = types[len(names)] if types else "users (or clients)"
        raise QuotaFileError(
            f"--alter needs an entity: --entity-type {missing} with --entity-name NAME "
            "or --entity-default"
        )
    for entity_type, name in zip(types, names, strict=False):
        if name == "":
            raise QuotaFileError(f"empty --entity-name for {entity_type}")
        if name is not None:
            check_name(name, f"--entity-name for {entity_type}")
        if name == DEFAULT:
            raise QuotaFileError(
                f"--entity-name {DEFAULT!r} for {entity_type}: use --entity-default for the "
                "default entity"
            )
    parts = tuple(
        (t, _entity_name(t, names[i]) if i < len(names) else None) for i, t in enumerate(types)
    )
    return EntityFilter(parts)


def _entity_name(entity_type: str, name: str | None) -> str:
    """A checked ``--entity-name`` (an ``ips`` one canonical), or the default for ``None``."""
    if name is None:
        return DEFAULT
    if entity_type == "ips":
        return check_ip(name, "ip")
    return name


def parse_add_config(text: str) -> dict[str, float]:
    """``'k1=v1,k2=v2'`` as ``{property: value}``; the error names the bad item."""
    pairs: list[tuple[str, str]] = []
    for item in text.split(","):  # the syntax of every item first, then the meaning
        key, sep, value = item.partition("=")
        if not item.strip():
            problem = "an empty item (expected 'key=value,key=value')"
        elif not sep:
            problem = f"{item.strip()!r} is not key=value"
        elif not key.strip():
            problem = f"{item.strip()!r} has no property name"
        else:
            pairs.append((key.strip(), value))
            continue
        raise QuotaFileError(f"--add-config {text!r}: {problem}")
    out: dict[str, float] = {}
    try:
        for key, value in pairs:
            check_property(key)
            if key in out:
                raise QuotaFileError(f"{key} is given twice")
            out[key] = parse_value(key, value)
    except QuotaFileError as exc:
        raise QuotaFileError(f"--add-config {text!r}: {exc}") from None
    return out


def parse_delete_config(text: str) -> list[str]:
    """``'k1,k2'`` as property names; the error names the bad item."""
    names = [item.strip() for item in text.split(",")]
    if not all(names):
        raise QuotaFileError(
            f"--delete-config {text!r}: an empty item (expected 'key' or 'key,key')"
        )
    try:
        for i, name in enumerate(names):
            check_property(name)
            if name in names[:i]:
                raise QuotaFileError(f"{name} is given twice")
    except QuotaFileError as exc:
        raise QuotaFileError(f"--delete-config {text!r}: {exc}") from None
    return names


def _change_set(args: argparse.Namespace, entities: EntityFilter) -> ChangeSet:
    add: dict[str, float] = {}
    for text in args.add_config or []:
        for key, value in parse_add_config(text).items():
            if key in add:
                raise QuotaFileError(f"--add-config: {key} is given twice")
            add[key] = value
    delete: list[str] = []
    for text in args.delete_config or []:
        for name in parse_delete_config(text):
            if name in delete:
                raise QuotaFileError(f"--delete-config: {name} is given twice")
            delete.append(name)
    if not add and not delete:
        raise QuotaFileError("--alter needs --add-config K=V,... or --delete-config K,...")
    return ChangeSet((Alteration(entities.entity(), add, delete),))


def _store(args: argparse.Namespace) -> QuotaStore:
    return open_store(args.store, timeout=args.lock_timeout)


def _read(store: QuotaStore) -> QuotaConfig:
    snapshot = store.read()
    if snapshot.version == 0:
        raise StoreError(f"{store.describe()} holds no quotas yet (--alter or --import creates it)")
    return snapshot.config


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # either does not exist (or cannot be read)
        return False


def _write_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, so a failure leaves no half file."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or Path("."))
    except OSError as exc:
        raise QuotaFileError(f"cannot write {str(path)!r}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise QuotaFileError(f"cannot write {str(path)!r}: {exc.strerror}") from None
