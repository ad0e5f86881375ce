"""What the compute service and its clients share on the bus: the service's partition and
readers whose samples the wire codec decodes (array views, no copy)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from mcc import settings
from mcc.bus import Bus, Reader
from mcc.bus.topics import topic_spec
from mcc.bus.transport import Transport
from mcc.errors import ComputeError

#: Service ``NAME`` talks on DDS partition ``PARTITION_PREFIX + NAME``.
PARTITION_PREFIX = "mcc.compute."
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def service_partition(name: str) -> str:
    """The DDS partition of compute service ``name``; `ComputeError` for a bad name."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ComputeError(
            f"compute service name {name!r}: use 1-64 letters, digits and _.- (e.g. 'compute')"
        )
    return PARTITION_PREFIX + name


def domain_of(domain_id: int | None) -> int:
    """``domain_id``, else ``MCC_DOMAIN``, else 0."""
    return settings.current().domain if domain_id is None else int(domain_id)


def open_service_bus(
    domain_id: int | None,
    name: str,
    discovery_tag: str | None,
    what: str,
    transport: Transport | None = None,
) -> Bus:
    """A bus in compute service ``name``'s partition (``what``: "service" or "client"), on
    ``transport`` (default: the environment's)."""
    return Bus(
        domain_of(domain_id),
        partitions=[service_partition(name)],
        transport=transport,
        discovery_tag=discovery_tag,
        name=f"mcc compute {what} {name}",
    )


class WireReader(Reader[Any]):
    """A `Reader` whose samples are decoded by a `mcc.compute.wire` codec (array views)."""

    def __init__(self, bus: Bus, topic: str, decode: Callable[[bytes], Any]) -> None:
        profile = topic_spec(topic).profile
        super().__init__(bus, bus.topic(topic, profile=profile), profile, validate=False)
        self._decode = decode  # the wire codec checks what it decodes
