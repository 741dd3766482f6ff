"""The kafka connector's options shared by source and sink, and its clients: librdkafka settings
from `bootstrap.servers` and the `kafka.*` options (passed on without the prefix), a broker
that does not answer raised as Retryable naming it, topics listed and created."""

from __future__ import annotations

import logging
from typing import Any

from connectql.config import Option
from connectql.toolkit import Retryable, ValidationError

CONNECTION = (
    Option(
        "bootstrap.servers",
        required=True,
        doc="the brokers to connect to first: host:port, a comma list",
    ),
    Option(
        "kafka.*",
        doc="any librdkafka (Kafka client) setting, prefix kafka. taken off, e.g."
        " kafka.security.protocol = 'SASL_SSL', kafka.sasl.mechanism, kafka.sasl.username,"
        " kafka.sasl.password (a secret: give it with SECRET name), kafka.ssl.ca.location",
    ),
)
TIMEOUT_S = 10.0  # a metadata or offsets request not answered by then: the broker is away
LOG = logging.getLogger("connectql.kafka")


def settings(options: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The client's configuration: bootstrap.servers, every kafka.* option, then `extra` (the
    connector's own settings win over none of the user's: theirs come last)."""
    given = {k[len("kafka.") :]: v for k, v in options.items() if k.startswith("kafka.")}
    return {
        "bootstrap.servers": options["bootstrap.servers"],
        "logger": LOG,
        **extra,
        **given,
    }


def where(options: dict[str, Any]) -> str:
    """The first broker, as a message names it."""
    return options["bootstrap.servers"].split(",")[0].strip()


def admin(options: dict[str, Any]):
    from confluent_kafka.admin import AdminClient

    return AdminClient(settings(options))


def topics(options: dict[str, Any], what: str, client=None) -> dict[str, int]:
    """Each topic the brokers hold (internal ones left out) and its partition count."""
    from confluent_kafka import KafkaException

    client = client or admin(options)
    try:
        found = client.list_topics(timeout=TIMEOUT_S).topics
    except KafkaException as e:
        raise Retryable(f"{what}: cannot reach {where(options)}: {_text(e)}") from None
    return {name: len(t.partitions) for name, t in found.items() if not name.startswith("__")}


def create_topic(options: dict[str, Any], what: str, name: str, partitions: int, replicas: int):
    """Create a topic (one that another writer created meanwhile is fine)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    client = admin(options)  # kept until its futures resolve (a dropped one fails them)
    futures = client.create_topics(
        [NewTopic(name, partitions, replicas)], request_timeout=TIMEOUT_S
    )
    try:
        futures[name].result(timeout=TIMEOUT_S)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise ValidationError(f"{what}: cannot create topic '{name}': {_text(e)}") from None


def _text(e: Exception) -> str:
    error = e.args[0] if e.args else e
    return getattr(error, "str", lambda: str(error))()


def failed(what: str, options: dict[str, Any], e: Exception) -> Retryable:
    """A client error as the Retryable that names the broker."""
    return Retryable(f"{what}: {where(options)}: {_text(e)}")
