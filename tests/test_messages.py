"""The toolkit's message value formats as each broker connector declares them: the avro options
reach every broker source's and sink's format (no broker needed: the bytes are the format's;
test_kafka.py and test_redis.py carry them through real brokers), and a datum its column
cannot hold is a bad value of its own."""

from __future__ import annotations

import io
import json
from decimal import Decimal

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
    with pytest.raises(ValidationError, match="format = 'avro' needs avro.schema"):
        made(source_cls, format="avro").format.row_ddl()


def test_an_avro_datum_its_column_cannot_hold_is_a_bad_value_not_a_failed_page():
    """A decimal datum past its declared precision: that value is set apart, the page's others
    are rows."""
    schema = {"type": "record", "name": "r", "fields": [{"name": "d", "type": {
        "type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}}]}  # fmt: skip
    wide = json.loads(json.dumps(schema).replace('"precision": 4', '"precision": 20'))
    parsed, values = fastavro.parse_schema(wide), []  # a producer's wider decimal
    for number in ("1.50", "10000000000.00", "-0.25"):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, {"d": Decimal(number)})
        values.append(out.getvalue())
    source = made(KafkaSource, format="avro", **{"avro.schema": json.dumps(schema)})
    batch, bad = source.format.decode(values)
    assert [b.index for b in bad] == [1] and "cannot hold" in bad[0].why
    assert [str(d) for d in batch.column("d").to_pylist()] == ["1.50", "-0.25"]
