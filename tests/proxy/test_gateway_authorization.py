"""Quota administration through the gateway is authorized as the cluster authorizes it.

One Kafka broker with SASL/PLAIN users and ``StandardAuthorizer``: ``alice`` has
ALTER_CONFIGS and DESCRIBE_CONFIGS on the cluster, ``mallory`` has no ACL, and a client
without SASL is ``User:ANONYMOUS``, which no ACL names. Every principal's requests go to
the cluster itself too, and the gateway must agree with it; the store must change only for
whom it allows.
"""

from __future__ import annotations

import importlib
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kquota
import pytest
from authorizing_kafka import AuthorizingBroker
from kafka_support import KAFKA_VERSION, KafkaToolFailed, kafka_configs
from kafka_wire import encode_request, read_response
from kquota import QuotaManager
from kquota.config.store import MemoryStore
from kquota.exceptions import InvalidConfigError
from kquota.proxy import AdminAccess, StoreAdmin
from ports import free_port, free_ports
from proxy_support import (
    RecordingPlugin,
    read_frame,
    run_proxy,
    sasl_authenticate_request,
    sasl_handshake_request,
)

pytestmark = pytest.mark.slow

CLUSTER_AUTHORIZATION_FAILED = 31
USERS = {"alice": "alice-secret", "mallory": "mallory-secret"}


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthorizingBroker]:
    broker = AuthorizingBroker(
        tmp_path_factory.mktemp(f"kafka-authorizing-{KAFKA_VERSION}-"), users=USERS
    )
    broker.start()
    try:
        broker.allow_on_cluster("alice", "ALTER_CONFIGS", "DESCRIBE_CONFIGS")
        yield broker
    finally:
        if not broker.stop():
            pytest.fail(f"did not stop on SIGTERM; killed\n{broker.describe()}", pytrace=False)


def _gateway(bootstrap: str, store: MemoryStore, access: AdminAccess | None = None) -> Any:
    host, port = bootstrap.rsplit(":", 1)
    plugin = RecordingPlugin(*(QuotaManager(t) for t in ("produce", "fetch", "request")))
    return run_proxy(
        (host, int(port)),
        free_port(),
        plugin,
        broker_ports=free_ports(2),
        admin=StoreAdmin(store, access=access),
    )


def _ask(address: str, body: Any, user: str | None) -> Any:
    """``body`` sent to ``address`` on a connection authenticated as ``user`` with
    SASL/PLAIN (``None``: no SASL, ``User:ANONYMOUS``); the decoded response."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        if user is not None:
            sock.sendall(sasl_handshake_request(1, "PLAIN"))
            assert read_frame(sock) is not None
            token = b"\0" + user.encode() + b"\0" + USERS[user].encode()
            sock.sendall(sasl_authenticate_request(2, token))
            answer = read_frame(sock)
            assert answer is not None
            from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse

            _, offset = _header_end(answer)
            assert answer[offset : offset + 2] == b"\0\0", f"{user} not authenticated"
            del SaslAuthenticateResponse
        sock.sendall(encode_request(body, 7, "quota-admin"))
        frame = read_frame(sock)
    assert frame is not None, f"{address} closed the connection"
    return read_response(frame, body.__api_key__, body.__version__)


def _header_end(frame: bytes) -> tuple[int, int]:
    """A flexible response header (SaslAuthenticate v2): correlation id, empty tags."""
    return int.from_bytes(frame[:4], "big"), 5


def _alter(user_quota: float, validate_only: bool, version: int = 1) -> Any:
    from kio.static.primitive import f64

    schema = importlib.import_module(f"kio.schema.alter_client_quotas.v{version}.request")
    return schema.AlterClientQuotasRequest(
        entries=(
            schema.EntryData(
                entity=(schema.EntityData(entity_type="user", entity_name="mallory"),),
                ops=(schema.OpData(key="producer_byte_rate", value=f64(user_quota), remove=False),),
            ),
        ),
        validate_only=validate_only,
    )


def _describe(version: int = 1) -> Any:
    schema = importlib.import_module(f"kio.schema.describe_client_quotas.v{version}.request")
    return schema.DescribeClientQuotasRequest(components=(), strict=False)


def _alter_codes(response: Any) -> list[int]:
    return [int(entry.error_code) for entry in response.entries]


def _alter_answer(response: Any) -> list[tuple[int, str | None]]:
    return [(int(entry.error_code), entry.error_message) for entry in response.entries]


def _cases(kafka: AuthorizingBroker) -> list[tuple[str, str | None]]:
    """(bootstrap, user): the SASL listener as alice and as mallory, the PLAINTEXT one as
    ``User:ANONYMOUS``."""
    return [
        (kafka.sasl_bootstrap, "alice"),
        (kafka.sasl_bootstrap, "mallory"),
        (kafka.bootstrap, None),
    ]


def test_the_cluster_decides_by_default_and_the_gateway_agrees(
    kafka: AuthorizingBroker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kquota.proxy")
    for bootstrap, user in _cases(kafka):
        expected_alter = _alter_answer(_ask(bootstrap, _alter(1e6, validate_only=True), user))
        kafka_describe = _ask(bootstrap, _describe(), user)
        expected_describe = (int(kafka_describe.error_code), kafka_describe.error_message)
        allowed = user == "alice"
        refused = CLUSTER_AUTHORIZATION_FAILED
        assert [code for code, _ in expected_alter] == [0 if allowed else refused], user
        assert expected_describe[0] == (0 if allowed else refused), user

        store = MemoryStore()
        with _gateway(bootstrap, store) as gateway:
            altered = _ask(gateway.address, _alter(1e6, validate_only=False), user)
            described = _ask(gateway.address, _describe(), user)
        # the same codes and messages as the cluster's own answer
        assert _alter_answer(altered) == expected_alter, user
        assert (int(described.error_code), described.error_message) == expected_describe, user
        written = store.read().config.by_entity()
        if allowed:
            assert written == {kquota.Entity(user="mallory"): {"producer_byte_rate": 1e6}}
            assert described.entries is not None and len(described.entries) == 1
        else:
            assert written == {}, f"{user} changed the gateway's quotas"
            assert described.entries is None
    refusals = [r.getMessage() for r in caplog.records if "refused to" in r.getMessage()]
    assert any("User:mallory" in r and "the cluster refuses it" in r for r in refusals)
    assert any("User:ANONYMOUS" in r for r in refusals)
    assert not any("User:alice" in r for r in refusals)
    started = [r.getMessage() for r in caplog.records if "quota administration:" in r.getMessage()]
    assert started and "where the cluster allows" in started[0]


def test_kafka_configs_changes_the_gateways_quotas_only_as_an_allowed_principal(
    kafka: AuthorizingBroker, tmp_path: Path
) -> None:
    store = MemoryStore()
    add = ("--alter", "--add-config", "consumer_byte_rate=2048")
    entity = ("--entity-type", "clients", "--entity-name", "reporting")
    with _gateway(kafka.sasl_bootstrap, store) as gateway:
        with pytest.raises(KafkaToolFailed) as refused:
            kafka_configs(
                gateway.address,
                "--command-config",
                str(kafka.tool_config("mallory", tmp_path)),
                *add,
                *entity,
            )
        assert "ClusterAuthorizationException" in str(refused.value)
        assert store.read().config.by_entity() == {}
        alice = str(kafka.tool_config("alice", tmp_path))
        kafka_configs(gateway.address, "--command-config", alice, *add, *entity)
        described = kafka_configs(gateway.address, "--command-config", alice, "--describe", *entity)
    assert store.read().config.by_entity() == {
        kquota.Entity(client_id="reporting"): {"consumer_byte_rate": 2048}
    }
    assert "consumer_byte_rate=2048.0" in described


@pytest.mark.parametrize(
    ("access", "allowed"),
    [
        # the list alone: the operator's choice, whatever the cluster says
        ("User:alice,User:mallory", {"alice", "mallory"}),
        ("User:ANONYMOUS", {None}),
        # both: a listed principal the cluster allows
        ("cluster,User:mallory", set()),
        ("cluster,User:alice,User:mallory", {"alice"}),
        ("nobody", set()),
        ("anyone", {"alice", "mallory", None}),
    ],
)
def test_an_operators_list_of_principals_applies_alone_or_with_the_cluster(
    kafka: AuthorizingBroker, access: str, allowed: set[str | None]
) -> None:
    for bootstrap, user in _cases(kafka):
        store = MemoryStore()
        with _gateway(bootstrap, store, AdminAccess.parse(access)) as gateway:
            altered = _ask(gateway.address, _alter(5e5, validate_only=False), user)
            described = _ask(gateway.address, _describe(0), user)
        if user in allowed:
            assert _alter_codes(altered) == [0], (access, user)
            assert int(described.error_code) == 0, (access, user)
            assert store.read().config.by_entity() == {
                kquota.Entity(user="mallory"): {"producer_byte_rate": 5e5}
            }
        else:
            assert _alter_codes(altered) == [CLUSTER_AUTHORIZATION_FAILED], (access, user)
            assert int(described.error_code) == CLUSTER_AUTHORIZATION_FAILED, (access, user)
            assert store.read().config.by_entity() == {}, (access, user)


@pytest.mark.parametrize("version", [0, 1])
def test_the_gateways_own_refusal_is_the_one_kafka_gives(
    kafka: AuthorizingBroker, version: int
) -> None:
    """An unlisted principal is refused by the gateway itself (the cluster is not asked):
    what it answers is what the cluster answers mallory."""
    alter = _alter(1.0, validate_only=True, version=version)
    with _gateway(kafka.sasl_bootstrap, MemoryStore(), AdminAccess.parse("User:alice")) as gw:
        altered = _ask(gw.address, alter, "mallory")
        described = _ask(gw.address, _describe(version), "mallory")
    kafka_altered = _ask(kafka.sasl_bootstrap, alter, "mallory")
    kafka_described = _ask(kafka.sasl_bootstrap, _describe(version), "mallory")
    assert _alter_answer(altered) == _alter_answer(kafka_altered)
    assert [(e.entity_type, e.entity_name) for e in altered.entries[0].entity] == [
        ("user", "mallory")
    ]
    assert (int(described.error_code), described.error_message, described.entries) == (
        int(kafka_described.error_code),
        kafka_described.error_message,
        kafka_described.entries,
    )
    assert int(described.error_code) == CLUSTER_AUTHORIZATION_FAILED


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected cluster, User:NAME"),
        ("cluster,", "expected cluster, User:NAME"),
        ("alice", "invalid principal 'alice'"),
        ("Group:ops", "invalid principal 'Group:ops'"),
        ("User:", "invalid principal 'User:'"),
        ("anyone,User:alice", "anyone stands alone"),
    ],
)
def test_a_bad_list_of_admins_is_refused_naming_it(text: str, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        AdminAccess.parse(text)
    assert AdminAccess.parse("cluster") == AdminAccess()
    assert AdminAccess.parse(" User:b , cluster,User:a").users == ["a", "b"]
