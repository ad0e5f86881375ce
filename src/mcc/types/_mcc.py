"""Topic types of module `mcc`.

GENERATED from idl/mcc.idl by `python -m mcc.types.generate`. Do not edit by hand.
"""

from dataclasses import dataclass, field

import cyclonedds.idl as idl
import cyclonedds.idl.annotations as annotate
import cyclonedds.idl.types as types


class TrackStatus(idl.IdlEnum, typename="mcc.TrackStatus", default_literal="TRACK_TENTATIVE"):
    TRACK_TENTATIVE = 0
    TRACK_CONFIRMED = 1
    TRACK_COASTING = 2
    TRACK_DELETED = 3


class TargetClass(idl.IdlEnum, typename="mcc.TargetClass", default_literal="CLASS_UNKNOWN"):
    CLASS_UNKNOWN = 0
    CLASS_AIRCRAFT = 1
    CLASS_CRUISE_MISSILE = 2
    CLASS_HELICOPTER = 3
    CLASS_BALLISTIC = 4
    CLASS_UAV = 5
    CLASS_DECOY = 6


class OrderStatus(idl.IdlEnum, typename="mcc.OrderStatus", default_literal="ORDER_PROPOSED"):
    ORDER_PROPOSED = 0
    ORDER_ISSUED = 1
    ORDER_IN_FLIGHT = 2
    ORDER_KILL = 3
    ORDER_MISS = 4
    ORDER_ABORTED = 5


class WeaponState(idl.IdlEnum, typename="mcc.WeaponState", default_literal="WEAPON_OFFLINE"):
    WEAPON_OFFLINE = 0
    WEAPON_READY = 1
    WEAPON_ENGAGING = 2
    WEAPON_RELOADING = 3
    WEAPON_FAULT = 4


class IffAnswer(idl.IdlEnum, typename="mcc.IffAnswer", default_literal="IFF_NOT_INTERROGATED"):
    IFF_NOT_INTERROGATED = 0
    IFF_NO_REPLY = 1
    IFF_FRIEND = 2
    IFF_INVALID = 3


class Identity(idl.IdlEnum, typename="mcc.Identity", default_literal="IDENTITY_PENDING"):
    IDENTITY_PENDING = 0
    IDENTITY_UNKNOWN = 1
    IDENTITY_ASSUMED_FRIEND = 2
    IDENTITY_FRIEND = 3
    IDENTITY_NEUTRAL = 4
    IDENTITY_SUSPECT = 5
    IDENTITY_HOSTILE = 6


class SystemState(idl.IdlEnum, typename="mcc.SystemState", default_literal="SYSTEM_STARTING"):
    SYSTEM_STARTING = 0
    SYSTEM_RUNNING = 1
    SYSTEM_DEGRADED = 2
    SYSTEM_STOPPING = 3
    SYSTEM_STOPPED = 4
    SYSTEM_FAILED = 5
    SYSTEM_PENDING = 6


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class NDArray(idl.IdlStruct, typename="mcc.NDArray"):
    dtype: str = ''
    shape: types.sequence[types.uint32] = field(default_factory=list)
    data: bytes = b''


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class DetectionBatch(idl.IdlStruct, typename="mcc.DetectionBatch"):
    sensor_id: str = ''
    scan_id: types.uint64 = 0
    origin_ns: types.int64 = 0
    publish_ns: types.int64 = 0
    sensor_x_m: types.float64 = 0.0
    sensor_y_m: types.float64 = 0.0
    sensor_z_m: types.float64 = 0.0
    count: types.uint32 = 0
    range_m: bytes = b''
    azimuth_rad: bytes = b''
    elevation_rad: bytes = b''
    radial_velocity_mps: bytes = b''
    snr_db: bytes = b''
    x_m: bytes = b''
    y_m: bytes = b''
    z_m: bytes = b''
    iff: bytes = b''


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class Truth(idl.IdlStruct, typename="mcc.Truth"):
    scenario_id: str = ''
    time_ns: types.int64 = 0
    count: types.uint32 = 0
    target_id: bytes = b''
    target_class: bytes = b''
    x_m: bytes = b''
    y_m: bytes = b''
    z_m: bytes = b''
    vx_mps: bytes = b''
    vy_mps: bytes = b''
    vz_mps: bytes = b''


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class Track(idl.IdlStruct, typename="mcc.Track"):
    track_id: types.uint32 = 0
    annotate.key("track_id")
    tracker_id: str = ''
    status: 'TrackStatus' = TrackStatus.TRACK_TENTATIVE
    classification: 'TargetClass' = TargetClass.CLASS_UNKNOWN
    x_m: types.float64 = 0.0
    y_m: types.float64 = 0.0
    z_m: types.float64 = 0.0
    vx_mps: types.float64 = 0.0
    vy_mps: types.float64 = 0.0
    vz_mps: types.float64 = 0.0
    covariance: types.array[types.float64, 36] = field(default_factory=lambda: [0.0] * 36)
    quality: types.float64 = 0.0
    hits: types.uint32 = 0
    misses: types.uint32 = 0
    update_ns: types.int64 = 0
    origin_ns: types.int64 = 0
    identity: 'Identity' = Identity.IDENTITY_PENDING
    iff: 'IffAnswer' = IffAnswer.IFF_NOT_INTERROGATED


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class AirPicture(idl.IdlStruct, typename="mcc.AirPicture"):
    tracker_id: str = ''
    cycle: types.uint64 = 0
    time_ns: types.int64 = 0
    origin_ns: types.int64 = 0
    publish_ns: types.int64 = 0
    count: types.uint32 = 0
    track_id: bytes = b''
    status: bytes = b''
    classification: bytes = b''
    quality: bytes = b''
    state: bytes = b''
    covariance: bytes = b''
    identity: bytes = b''
    iff: bytes = b''


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class Threat(idl.IdlStruct, typename="mcc.Threat"):
    track_id: types.uint32 = 0
    annotate.key("track_id")
    asset_id: str = ''
    score: types.float64 = 0.0
    rank: types.uint32 = 0
    time_to_impact_s: types.float64 = 0.0
    cpa_m: types.float64 = 0.0
    time_to_cpa_s: types.float64 = 0.0
    classification: 'TargetClass' = TargetClass.CLASS_UNKNOWN
    update_ns: types.int64 = 0
    origin_ns: types.int64 = 0
    identity: 'Identity' = Identity.IDENTITY_PENDING
    witnesses: types.uint32 = 0


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class EngagementOrder(idl.IdlStruct, typename="mcc.EngagementOrder"):
    order_id: types.uint32 = 0
    annotate.key("order_id")
    weapon_id: str = ''
    track_id: types.uint32 = 0
    pk: types.float64 = 0.0
    rounds: types.uint32 = 0
    issue_ns: types.int64 = 0
    origin_ns: types.int64 = 0
    status: 'OrderStatus' = OrderStatus.ORDER_PROPOSED


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class WeaponStatus(idl.IdlStruct, typename="mcc.WeaponStatus"):
    weapon_id: str = ''
    annotate.key("weapon_id")
    state: 'WeaponState' = WeaponState.WEAPON_OFFLINE
    rounds_ready: types.uint32 = 0
    rounds_total: types.uint32 = 0
    x_m: types.float64 = 0.0
    y_m: types.float64 = 0.0
    z_m: types.float64 = 0.0
    min_range_m: types.float64 = 0.0
    max_range_m: types.float64 = 0.0
    engaged_track_id: types.uint32 = 0
    update_ns: types.int64 = 0


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class Heartbeat(idl.IdlStruct, typename="mcc.Heartbeat"):
    system_id: str = ''
    annotate.key("system_id")
    host: str = ''
    pid: types.uint32 = 0
    state: 'SystemState' = SystemState.SYSTEM_STARTING
    device: str = ''
    cpu_percent: types.float64 = 0.0
    rss_bytes: types.uint64 = 0
    msgs_in_per_s: types.float64 = 0.0
    msgs_out_per_s: types.float64 = 0.0
    latency_p50_us: types.float64 = 0.0
    latency_p99_us: types.float64 = 0.0
    seq: types.uint64 = 0
    time_ns: types.int64 = 0
    message: str = ''


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class Command(idl.IdlStruct, typename="mcc.Command"):
    command_id: str = ''
    annotate.key("command_id")
    client_id: str = ''
    mission: str = ''
    verb: str = ''
    target: str = ''
    args_json: str = ''
    issue_ns: types.int64 = 0


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class CommandReply(idl.IdlStruct, typename="mcc.CommandReply"):
    command_id: str = ''
    annotate.key("command_id")
    client_id: str = ''
    replier_id: str = ''
    ok: bool = False
    message: str = ''
    result_json: str = ''
    reply_ns: types.int64 = 0


@dataclass
@annotate.final
@annotate.autoid("sequential")
class SystemEntry(idl.IdlStruct, typename="mcc.SystemEntry"):
    system_id: str = ''
    state: 'SystemState' = SystemState.SYSTEM_STARTING
    pid: types.uint32 = 0
    restarts: types.uint32 = 0
    host: str = ''
    device: str = ''
    node: str = ''
    cpus: str = ''
    reason: str = ''
    since_ns: types.int64 = 0


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class MissionStatus(idl.IdlStruct, typename="mcc.MissionStatus"):
    mission: str = ''
    annotate.key("mission")
    phase: str = ''
    state: 'SystemState' = SystemState.SYSTEM_STARTING
    domain_id: types.uint32 = 0
    run_dir: str = ''
    systems: types.sequence['SystemEntry'] = field(default_factory=list)
    time_ns: types.int64 = 0
    backend: str = ''
    clusters_json: str = ''


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class ComputeRequest(idl.IdlStruct, typename="mcc.ComputeRequest"):
    request_id: str = ''
    annotate.key("request_id")
    client_id: str = ''
    kernel: str = ''
    args: types.sequence['NDArray'] = field(default_factory=list)
    params_json: str = ''
    deadline_ns: types.int64 = 0
    issue_ns: types.int64 = 0


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class ComputeReply(idl.IdlStruct, typename="mcc.ComputeReply"):
    request_id: str = ''
    annotate.key("request_id")
    client_id: str = ''
    server_id: str = ''
    ok: bool = False
    error: str = ''
    results: types.sequence['NDArray'] = field(default_factory=list)
    device: str = ''
    compute_ms: types.float64 = 0.0
    reply_ns: types.int64 = 0


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class WorkItem(idl.IdlStruct, typename="mcc.WorkItem"):
    job_id: str = ''
    annotate.key("job_id")
    item_id: types.uint64 = 0
    annotate.key("item_id")
    worker_id: str = ''
    lo: types.int64 = 0
    hi: types.int64 = 0
    payload: bytes = b''
    issue_ns: types.int64 = 0


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class WorkResult(idl.IdlStruct, typename="mcc.WorkResult"):
    job_id: str = ''
    annotate.key("job_id")
    item_id: types.uint64 = 0
    annotate.key("item_id")
    worker_id: str = ''
    count: types.uint64 = 0
    value: types.int64 = 0
    payload: bytes = b''
    elapsed_ns: types.int64 = 0
    done_ns: types.int64 = 0


@dataclass
@annotate.final
@annotate.autoid("sequential")
class BulkBlock(idl.IdlStruct, typename="mcc.BulkBlock"):
    transfer: types.uint64 = 0
    annotate.key("transfer")
    index: types.uint32 = 0
    count: types.uint32 = 0
    offset: types.uint64 = 0
    total: types.uint64 = 0
    length: types.uint32 = 0
    data: types.array[types.byte, 64512] = field(default_factory=lambda: bytes(64512))


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class Checkpoint(idl.IdlStruct, typename="mcc.Checkpoint"):
    job_id: str = ''
    annotate.key("job_id")
    worker_id: str = ''
    annotate.key("worker_id")
    items_done: types.uint64 = 0
    last_item_id: types.uint64 = 0
    state: bytes = b''
    time_ns: types.int64 = 0


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class PersistRequest(idl.IdlStruct, typename="mcc.PersistRequest"):
    request_id: str = ''
    annotate.key("request_id")
    client_id: str = ''
    topic: str = ''
    type_name: str = ''
    partitions_json: str = ''
    issue_ns: types.int64 = 0


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class PersistTopic(idl.IdlStruct, typename="mcc.PersistTopic"):
    topic: str = ''
    type_name: str = ''
    persistent: bool = False
    history_depth: types.int32 = 0
    max_samples: types.int32 = 0
    max_instances: types.int32 = 0
    max_samples_per_instance: types.int32 = 0
    cleanup_delay_ns: types.int64 = 0


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class PersistSample(idl.IdlStruct, typename="mcc.PersistSample"):
    topic: str = ''
    partitions_json: str = ''
    key: bytes = b''
    key_json: str = ''
    writer_guid: str = ''
    writer_seq: types.uint64 = 0
    source_ns: types.int64 = 0
    stored_ns: types.int64 = 0
    data: bytes = b''


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class PersistReply(idl.IdlStruct, typename="mcc.PersistReply"):
    request_id: str = ''
    annotate.key("request_id")
    client_id: str = ''
    replier_id: str = ''
    complete: bool = False
    ok: bool = False
    message: str = ''
    topics: types.sequence['PersistTopic'] = field(default_factory=list)
    samples: types.sequence['PersistSample'] = field(default_factory=list)
    reply_ns: types.int64 = 0


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class PersistAck(idl.IdlStruct, typename="mcc.PersistAck"):
    replica: str = ''
    annotate.key("replica")
    writer_guid: str = ''
    annotate.key("writer_guid")
    topic: str = ''
    stored_source_ns: types.int64 = 0
    stored: types.uint64 = 0
    refused_source_ns: types.int64 = 0
    refused_reason: str = ''
    time_ns: types.int64 = 0


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class NavSample(idl.IdlStruct, typename="mcc.NavSample"):
    vehicle_id: str = ''
    seq: types.uint64 = 0
    origin_ns: types.int64 = 0
    publish_ns: types.int64 = 0
    x_m: types.float64 = 0.0
    y_m: types.float64 = 0.0
    z_m: types.float64 = 0.0
    vx_mps: types.float64 = 0.0
    vy_mps: types.float64 = 0.0
    vz_mps: types.float64 = 0.0


@dataclass
@annotate.appendable
@annotate.autoid("sequential")
class GuidanceCommand(idl.IdlStruct, typename="mcc.GuidanceCommand"):
    vehicle_id: str = ''
    seq: types.uint64 = 0
    origin_ns: types.int64 = 0
    publish_ns: types.int64 = 0
    heading_rate_rps: types.float64 = 0.0
    accel_mps2: types.float64 = 0.0
    climb_rate_mps: types.float64 = 0.0


@dataclass
@annotate.final
@annotate.autoid("sequential")
class PerfSample(idl.IdlStruct, typename="mcc.PerfSample"):
    writer_id: str = ''
    seq: types.uint64 = 0
    send_ns: types.int64 = 0
    payload: bytes = b''


# Packed little-endian arrays: {struct: {field: (dtype, shape after count)}}.
PACKED_ARRAYS: dict[str, dict[str, tuple[str, tuple[int, ...]]]] = {
    'DetectionBatch': {
        'range_m': ('<f8', ()),
        'azimuth_rad': ('<f8', ()),
        'elevation_rad': ('<f8', ()),
        'radial_velocity_mps': ('<f8', ()),
        'snr_db': ('<f8', ()),
        'x_m': ('<f8', ()),
        'y_m': ('<f8', ()),
        'z_m': ('<f8', ()),
    },
    'Truth': {
        'target_id': ('<u4', ()),
        'target_class': ('u1', ()),
        'x_m': ('<f8', ()),
        'y_m': ('<f8', ()),
        'z_m': ('<f8', ()),
        'vx_mps': ('<f8', ()),
        'vy_mps': ('<f8', ()),
        'vz_mps': ('<f8', ()),
    },
    'AirPicture': {
        'track_id': ('<u4', ()),
        'status': ('u1', ()),
        'classification': ('u1', ()),
        'quality': ('<f8', ()),
        'state': ('<f8', (6,)),
        'covariance': ('<f8', (6, 6)),
    },
}

# Optional packed arrays: `count` items, or none (a writer that predates them).
OPTIONAL_ARRAYS: dict[str, dict[str, tuple[str, tuple[int, ...]]]] = {
    'DetectionBatch': {
        'iff': ('u1', ()),
    },
    'AirPicture': {
        'identity': ('u1', ()),
        'iff': ('u1', ()),
    },
}

__all__ = ["TrackStatus", "TargetClass", "OrderStatus", "WeaponState", "IffAnswer", "Identity", "SystemState", "NDArray", "DetectionBatch", "Truth", "Track", "AirPicture", "Threat", "EngagementOrder", "WeaponStatus", "Heartbeat", "Command", "CommandReply", "SystemEntry", "MissionStatus", "ComputeRequest", "ComputeReply", "WorkItem", "WorkResult", "BulkBlock", "Checkpoint", "PersistRequest", "PersistTopic", "PersistSample", "PersistReply", "PersistAck", "NavSample", "GuidanceCommand", "PerfSample", "PACKED_ARRAYS", "OPTIONAL_ARRAYS"]
