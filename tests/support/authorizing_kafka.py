"""A Kafka broker that authorizes: SASL/PLAIN users, Kafka's ``StandardAuthorizer`` and
ACLs, so that the tests can ask what the cluster itself allows a principal.

Listeners: ``SASL`` (SASL_PLAINTEXT, the users below; the inter-broker and controller
listeners authenticate as the super user ``admin`` too) and ``PLAINTEXT`` (no
authentication: the principal ``User:ANONYMOUS``, which no ACL names, so the authorizer
denies it everything an ACL guards). ``PLAINTEXT`` is the broker's ``bootstrap``, which
its readiness check reads Metadata on (no ACL needed for that).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kafka_support import KafkaBroker, sasl_plain
from ports import free_port

ADMIN = "admin"
"""The super user: the broker itself, and the tests' tools."""


class AuthorizingBroker(KafkaBroker):
    """A :class:`KafkaBroker` with SASL users and ``StandardAuthorizer``."""

    SASL = "SASL"

    def __init__(self, folder: Path, *, users: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(folder, **kwargs)
        self.users = {ADMIN: "admin-secret", **users}
        self.sasl_port = free_port()

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    def server_properties(self) -> dict[str, str]:
        properties = super().server_properties()
        plain = f"PLAINTEXT://127.0.0.1:{self.port}"
        sasl = f"{self.SASL}://127.0.0.1:{self.sasl_port}"
        users = " ".join(f'user_{u}="{p}"' for u, p in self.users.items())
        jaas = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required"
            f' username="{ADMIN}" password="{self.users[ADMIN]}" {users};'
        )
        properties.update(
            {
                "listeners": ",".join(
                    [plain, sasl, f"CONTROLLER://127.0.0.1:{self.controller_port}"]
                ),
                "advertised.listeners": f"{plain},{sasl}",
                "listener.security.protocol.map": (
                    f"PLAINTEXT:PLAINTEXT,{self.SASL}:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT"
                ),
                "inter.broker.listener.name": self.SASL,
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "sasl.mechanism.controller.protocol": "PLAIN",
                f"listener.name.{self.SASL.lower()}.plain.sasl.jaas.config": jaas,
                "listener.name.controller.plain.sasl.jaas.config": jaas,
                "authorizer.class.name": (
                    "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
                ),
                "super.users": f"User:{ADMIN}",
            }
        )
        return properties

    def sasl_config(self, user: str) -> dict[str, str]:
        """librdkafka's settings to log in as ``user``."""
        return sasl_plain(user, self.users[user])

    def tool_config(self, user: str, folder: Path) -> Path:
        """A ``--command-config`` file for Kafka's tools to log in as ``user``."""
        path = folder / f"{user}.properties"
        path.write_text(
            "security.protocol=SASL_PLAINTEXT\n"
            "sasl.mechanism=PLAIN\n"
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule"
            f' required username="{user}" password="{self.users[user]}";\n',
            encoding="utf-8",
        )
        return path

    def allow_on_cluster(self, user: str, *operations: str) -> None:
        """An ACL allowing ``User:user`` ``operations`` (``ALTER_CONFIGS``,
        ``DESCRIBE_CONFIGS``, ...) on the cluster, made as the super user."""
        from confluent_kafka.admin import (
            AclBinding,
            AclOperation,
            AclPermissionType,
            AdminClient,
            ResourcePatternType,
            ResourceType,
        )

        admin = AdminClient({"bootstrap.servers": self.sasl_bootstrap, **self.sasl_config(ADMIN)})
        bindings = [
            AclBinding(
                ResourceType.BROKER,  # librdkafka's name for Kafka's CLUSTER resource
                "kafka-cluster",
                ResourcePatternType.LITERAL,
                f"User:{user}",
                "*",
                getattr(AclOperation, operation),
                AclPermissionType.ALLOW,
            )
            for operation in operations
        ]
        for future in admin.create_acls(bindings, request_timeout=30).values():
            future.result(timeout=60)
