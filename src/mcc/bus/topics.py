"""The topic catalogue: each MCC topic's name, type and default QoS profile.

Topic names are the type names (``Track`` carries ``mcc.Track``), so ``mcc topic echo Track``
needs no lookup table in a user's head. Code may override a profile (a benchmark asking for
``perf_best_effort``) but never builds QoS inline.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcc import types
from mcc.errors import TopicError

#: Writers of a sourced topic write in the partition ``src/PRINCIPAL`` of their identity.
SOURCE_PREFIX = "src/"


@dataclass(frozen=True)
class TopicSpec:
    """A topic: its name, its IDL type and the QoS profile it uses by default.

    ``sourced``: who speaks on it is part of the message. A bus with a ``source`` (an
    instance's principal, ``SYSTEM.INDEX``) writes it in the partition ``src/PRINCIPAL`` only,
    and a secured mission grants each identity its own such partition and no other, so a reader
    knows the authenticated writer of every sample (`Reader.source_of`), whatever fields the
    sample fills in.
    """

    name: str
    type: type
    profile: str
    doc: str
    sourced: bool = False


_SPECS = (
    TopicSpec("DetectionBatch", types.DetectionBatch, "sensor_stream", "one radar scan", True),
    TopicSpec("Truth", types.Truth, "sensor_stream", "simulation ground truth"),
    TopicSpec("AirPicture", types.AirPicture, "sensor_stream", "one tracker cycle"),
    TopicSpec("Track", types.Track, "state", "latest state of each track"),
    TopicSpec("Threat", types.Threat, "state", "threat evaluation per track"),
    TopicSpec("EngagementOrder", types.EngagementOrder, "state", "weapon assignment orders"),
    # The launchers' answers (in flight, kill, miss, abort) on a topic of their own, so that
    # DDS Security can grant `EngagementOrder` to TEWA alone.
    TopicSpec(
        "EngagementOutcome", types.EngagementOrder, "state", "launchers' answers to orders", True
    ),
    TopicSpec("WeaponStatus", types.WeaponStatus, "state", "readiness of each weapon", True),
    TopicSpec("Heartbeat", types.Heartbeat, "health", "liveliness and load per instance", True),
    TopicSpec("Command", types.Command, "request", "control-plane requests"),
    TopicSpec("CommandReply", types.CommandReply, "command", "control-plane answers", True),
    TopicSpec("MissionStatus", types.MissionStatus, "state", "mission phase and systems"),
    TopicSpec("ComputeRequest", types.ComputeRequest, "bulk", "remote kernel calls"),
    TopicSpec("ComputeReply", types.ComputeReply, "bulk", "remote kernel results"),
    # WorkItem on `state`: kept for a worker discovered after the items were sent (with
    # `bulk`, such a worker never got them), disposed once done.
    TopicSpec("WorkItem", types.WorkItem, "state", "HPC task farm work"),
    TopicSpec("WorkResult", types.WorkResult, "bulk", "HPC task farm results"),
    # Bulk transfers (mcc.bus.bulk), one topic a direction: a participant's reader would
    # otherwise be handed its own writer's blocks. Their endpoints are the native core's (the
    # C type, so that iceoryx can loan its samples): a process never makes them from Python.
    TopicSpec("Bulk", types.BulkBlock, "bulk_transfer", "bulk transfers: a buffer in blocks"),
    TopicSpec("BulkReturn", types.BulkBlock, "bulk_transfer", "bulk transfers: the way back"),
    # The compute service's own pair: a system granted Bulk for a stream of its own cannot
    # read the arguments and results of remote kernel calls.
    TopicSpec("ComputeBulk", types.BulkBlock, "bulk_transfer", "remote kernel arguments"),
    TopicSpec("ComputeBulkReturn", types.BulkBlock, "bulk_transfer", "remote kernel results"),
    TopicSpec("Checkpoint", types.Checkpoint, "durable", "HPC worker checkpoints"),
    # The farm master's journal (mcc.hpc.journal), on a topic of its own: only the masters may
    # write it (a worker's identity cannot forge a lease or a result), and neither the masters
    # nor the workers take in each other's records.
    TopicSpec("FarmJournal", types.Checkpoint, "durable", "HPC farm master's lease and results"),
    TopicSpec("PersistRequest", types.PersistRequest, "bulk", "history asked of the store"),
    TopicSpec("PersistReply", types.PersistReply, "bulk", "retained samples, per replica"),
    TopicSpec("PersistAck", types.PersistAck, "state", "samples committed to the store"),
    TopicSpec("NavSample", types.NavSample, "sensor_stream", "C2 loop: sensed aircraft state"),
    TopicSpec("GuidanceCommand", types.GuidanceCommand, "sensor_stream", "C2 loop: guidance"),
    TopicSpec("PerfSample", types.PerfSample, "perf_reliable", "bus performance tests"),
)

TOPICS: dict[str, TopicSpec] = {spec.name: spec for spec in _SPECS}


def topic_spec(name: str) -> TopicSpec:
    """The catalogue entry for ``name``; ``TopicError`` listing the known topics otherwise."""
    try:
        return TOPICS[name]
    except KeyError:
        known = ", ".join(sorted(TOPICS))
        raise TopicError(
            f"unknown topic {name!r}; MCC topics are: {known} "
            "(pass type= to use a topic of your own)"
        ) from None


def is_sourced(name: str) -> bool:
    """True for a catalogue topic whose writers speak in their own source partition."""
    spec = TOPICS.get(name)
    return spec is not None and spec.sourced


def source_partition(principal: str) -> str:
    """The partition in which ``principal`` writes sourced topics."""
    return f"{SOURCE_PREFIX}{principal}"


def partition_source(partitions: tuple[str, ...]) -> str | None:
    """The source of a writer in ``partitions`` (``PRINCIPAL`` or ``PRINCIPAL#GENERATION``,
    `split_source`) when it writes in exactly one source partition (and no other); None
    otherwise."""
    if len(partitions) != 1 or not partitions[0].startswith(SOURCE_PREFIX):
        return None
    source = partitions[0][len(SOURCE_PREFIX) :]
    if not source or any(c in source for c in "*?[]") or split_source(source) is None:
        return None
    return source


#: A source with its identity's generation: ``PRINCIPAL#GENERATION`` (`split_source`).
GENERATION_MARK = "#"


def split_source(source: str) -> tuple[str, int] | None:
    """``(principal, generation)`` of a source: an instance's identity is issued afresh at
    every start, with a larger generation (its issue time, microseconds), and may write only
    in ``src/PRINCIPAL#GENERATION``; a source without one (a supervisor, a foreign peer) is
    generation 0. None for a malformed generation."""
    principal, mark, generation = source.partition(GENERATION_MARK)
    if not mark:
        return source, 0
    if not principal or not generation.isdigit() or len(generation) > 20:
        return None
    return principal, int(generation)
