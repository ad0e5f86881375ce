"""The MCC data bus: typed topics, QoS by profile name, reader loops, request/reply, heartbeats.

>>> from mcc.bus import Bus
>>> with Bus(domain_id=7) as bus:
...     bus.writer("Track").write(Track(track_id=1))
"""

from mcc.bus.core import Bus, Reader, Writer, open_bus
from mcc.bus.endpoints import Linger
from mcc.bus.heartbeat import HeartbeatPublisher
from mcc.bus.history import DurableWriter, HistoryReader, HistoryStatus, StoreError
from mcc.bus.loop import ReaderLoop
from mcc.bus.qos import QosLibrary, default_library
from mcc.bus.rpc import Replier, Requester
from mcc.bus.statistics import BusStatistics, QosEvent
from mcc.bus.topics import TOPICS, TopicSpec, topic_spec
from mcc.bus.transport import Transport
from mcc.bus.validate import validate_sample

__all__ = [
    "TOPICS",
    "Bus",
    "BusStatistics",
    "DurableWriter",
    "HeartbeatPublisher",
    "HistoryReader",
    "HistoryStatus",
    "Linger",
    "QosEvent",
    "QosLibrary",
    "Reader",
    "ReaderLoop",
    "Replier",
    "Requester",
    "StoreError",
    "TopicSpec",
    "Transport",
    "Writer",
    "default_library",
    "open_bus",
    "topic_spec",
    "validate_sample",
]
