"""The `redis` connector: Redis Streams as a source (XRANGE from the checkpointed entry ids) and
a sink (XADD with the batch's progress in the same MULTI/EXEC), both exactly-once, on the
connector toolkit."""

from connectql.connectors.redis.sink import RedisSink
from connectql.connectors.redis.source import RedisSource
from connectql.toolkit import Connector

CONNECTOR = Connector(
    type="redis",
    doc="Redis Streams: the source reads entries from the checkpointed entry ids (exactly-once"
    " into the stream); the sink adds each row as an entry together with the batch's progress"
    " in one MULTI/EXEC (exactly-once).",
    source=RedisSource,
    sink=RedisSink,
)
