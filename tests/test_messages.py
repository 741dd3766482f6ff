"""The toolkit's message value formats as each broker connector declares them: the avro options
reach every broker source's and sink's format (no broker needed: the bytes are the format's;
test_kafka.py and test_redis.py carry them through real brokers)."""

from __future__ import annotations

import io
import json

import fastavro
import pyarrow as pa
import pytest

from connectql.connectors.kafka.sink import KafkaSink
from connectql.connectors.kafka.source import KafkaSource
from connectql.connectors.mqtt.sink import MqttSink
from connectql.connectors.mqtt.source import MqttSource
from connectql.connectors.nats.sink import NatsSink
from connectql.connectors.nats.source import NatsSource
from connectql.connectors.rabbitmq.sink import RabbitSink
from connectql.connectors.rabbitmq.source import RabbitSource
from connectql.connectors.redis.sink import RedisSink
from connectql.connectors.redis.source import RedisSource
from connectql.errors import ValidationError
from connectql.toolkit.messages import message_rows
from connectql.toolkit.source import DeadLetter
from connectql.toolkit.testing import options_of

BROKERS = {
    "kafka": (KafkaSource, KafkaSink),
    "mqtt": (MqttSource, MqttSink),
    "nats": (NatsSource, NatsSink),
    "rabbitmq": (RabbitSource, RabbitSink),
    "redis": (RedisSource, RedisSink),
}
SCHEMA = {"type": "record", "name": "r", "fields": [
    {"name": "id", "type": "long"}, {"name": "day", "type": {"type": "int", "logicalType": "date"}}]}  # fmt: skip


def made(cls, **given):
    """A connector class made with `given` and a placeholder for each other required option."""
    required = {o.name: "x" for o in cls.options if o.required}
    return cls(options_of(cls, {**required, **given}))


def test_every_broker_declares_avro_and_no_other_connector_does():
    from connectql.connectors import registry

    declaring = {
        p.type for p in registry.builtins() for k in p.kinds if "avro.schema" in p.options_for(k)
    }
    assert declaring == set(BROKERS)


@pytest.mark.parametrize("broker", sorted(BROKERS))
def test_each_broker_source_and_sink_reads_and_writes_avro_values(broker):
    source_cls, sink_cls = BROKERS[broker]
    text = json.dumps(SCHEMA)
    datum = io.BytesIO()
    fastavro.schemaless_writer(datum, fastavro.parse_schema(SCHEMA), {"id": 7, "day": 20_000})
    source = made(source_cls, format="avro", **{"avro.schema": text,
                                                "avro.confluent.header": "true"})  # fmt: skip
    assert source.format.row_ddl().startswith("`id` bigint, `day` date, `__key` STRING")
    got = list(message_rows(source.format, [b"\0\0\0\0\1" + datum.getvalue(), datum.getvalue()],
                            where=lambda i: {"n": i}, meta=lambda kept: {}))  # fmt: skip
    assert isinstance(got[0], DeadLetter) and "no Confluent header" in got[0].error
    assert got[1].select(["id", "day"]).to_pylist()[0]["id"] == 7 and got[1].num_rows == 1
    sink = made(sink_cls, format="avro", **{"avro.schema": text})
    rows = pa.table({"id": [7], "day": pa.array([20_000], pa.date32()), "__key": ["k"]})
    assert sink.format.encode(rows) == [datum.getvalue()]
    with pytest.raises(ValidationError, match="avro.schema is for format = 'avro' only"):
        made(sink_cls, **{"avro.schema": text})
