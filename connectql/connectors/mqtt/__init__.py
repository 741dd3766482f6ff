"""The `mqtt` connector: an MQTT topic filter as a source (a persistent session whose messages
are spooled under the checkpoint before they are acknowledged: at-least-once) and a sink
(publishes with a QoS, each acknowledged before the batch commits: at-least-once)."""

from connectql.connectors.mqtt.sink import MqttSink
from connectql.connectors.mqtt.source import MqttSource
from connectql.toolkit import Connector

CONNECTOR = Connector(
    type="mqtt",
    doc="MQTT (3.1.1) brokers such as Mosquitto: the source subscribes with a persistent session"
    " and spools each message under its checkpoint before acknowledging it (at-least-once, no"
    " loss across kill -9); the sink publishes each row with a QoS (at-least-once).",
    source=MqttSource,
    sink=MqttSink,
)
