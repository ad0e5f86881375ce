"""``mcc track replay``: the tracker run offline on recorded detections, scored against truth.

``mcc track replay DETECTIONS --sensors SENSORS.yaml [--truth TRUTH.csv]
[--config TRACKER.yaml] [--gospa-c M] --json OUT.json [--plot PNG]``

DETECTIONS is a CSV file (below) or an ASTERIX recording (docs/asterix.md): raw concatenated
data blocks, or UDP captured in pcap or pcapng, told apart by their first octets. Its CAT048
plots are grouped into scans by the CAT034 north markers (as the radar gateway does), each data
source (SAC/SIC) going to the sensor of SENSORS.yaml with that ``sac`` and ``sic`` (a lone
sensor without them takes a lone data source); scan times are the ASTERIX time of day in
seconds (continued past midnight), the frame TRUTH.csv must use; plots with a height (3-D
radar or Mode C) make the replay 3-D, elevations taken against the sensor's ``position_m``.
What the recording holds that is not a sound CAT048/CAT034 record is counted in OUT.json's
``asterix`` (per category and cause) and skipped.

* DETECTIONS.csv: ``time_s,sensor_id,range_m,azimuth_rad`` and optionally ``elevation_rad``
  (then 3-D tracking, else 2-D with ``range_m`` the horizontal range), ``range_rate_mps`` and
  ``iff`` (the IFF answer, `IffAnswer` 0..3; empty = 0, not interrogated).
  Azimuth from north, clockwise, radians. One scan = the rows of one ``sensor_id`` at one
  ``time_s``; a row whose ``range_m`` and ``azimuth_rad`` are empty marks a scan with no
  detection (so that the tracker counts its misses).
* SENSORS.yaml: per ``sensor_id``: ``position_m: [x, y, z]``, ``sigma_range_m``,
  ``sigma_azimuth_rad``, optional ``sigma_elevation_rad``, ``sigma_range_rate_mps``, ``pd``,
  ``clutter_per_scan`` (each scan carries them to the tracker; absent, it measures them), and
  for an ASTERIX recording ``sac`` and ``sic`` (0..255).
* TRUTH.csv: ``time_s,target_id,x_m,y_m`` and optionally ``z_m`` (ENU metres, the frame of
  ``position_m``); positions are interpolated linearly to each scan time, within each
  target's first and last rows.
* Without ``--config`` the tracker runs with its defaults (`TrackerConfig`, ``ndim`` from the
  file): what a user gets.

OUT.json: ``ms_per_scan_median``, ``gospa_mean_m`` and its parts ``localisation_m`` (mean of
√(Σ d²) over scans), ``missed`` and ``false`` (mean counts per scan) for GOSPA with p = 2,
α = 2 and c = ``--gospa-c`` (default 500 m) between the confirmed tracks and the truth after
each scan; ``track_ids`` (distinct confirmed ids), ``id_switches`` (times the id following a
truth, by the GOSPA assignment, changed), and one row per scan (with ``iff`` in the input,
each row's ``identity`` maps track ids to their `Identity` names). A bad input is one line,
``file:line: field: what is wrong (got …)``, and exit status 2.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import math
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from mcc.compute.gospa import gospa
from mcc.errors import MccError
from mcc.tracking.config import TrackerConfig, TrackerConfigError
from mcc.tracking.scan import Scan
from mcc.tracking.tracker import MultiTargetTracker
from mcc.types import Identity

__all__ = [
    "GOSPA_C_M",
    "PictureScore",
    "ReplayError",
    "SensorSpec",
    "Truth",
    "add_parser",
    "load_asterix",
    "load_detections",
    "load_sensors",
    "load_truth",
    "replay",
]

F64 = npt.NDArray[np.float64]
GOSPA_C_M = 500.0
GOSPA_P = 2.0
GOSPA_ALPHA = 2.0
_DETECTION_COLUMNS = ("time_s", "sensor_id", "range_m", "azimuth_rad")
_OPTIONAL_DETECTION_COLUMNS = ("elevation_rad", "range_rate_mps", "iff")
_TRUTH_COLUMNS = ("time_s", "target_id", "x_m", "y_m")


class ReplayError(MccError, ValueError):
    """A replay input is missing or wrong; the message is ``file:line: field: why (got …)``."""


# ---------------------------------------------------------------------------------------------
# Inputs


@dataclass(frozen=True)
class SensorSpec:
    """One radar of SENSORS.yaml (metres, radians, m/s)."""

    position_m: tuple[float, float, float]
    sigma_range_m: float
    sigma_azimuth_rad: float
    sigma_elevation_rad: float = 0.0
    sigma_range_rate_mps: float = 1.0
    pd: float | None = None  # None: not said; the tracker measures it
    clutter_per_scan: float | None = None  # None: not said; the tracker measures it
    sac: int | None = None  # the ASTERIX data source of its plots in a recording
    sic: int | None = None


_SENSOR_FIELDS = {
    "position_m": "required",
    "sigma_range_m": "required",
    "sigma_azimuth_rad": "required",
    "sigma_elevation_rad": "optional",
    "sigma_range_rate_mps": "optional",
    "pd": "optional",
    "clutter_per_scan": "optional",
    "sac": "optional",
    "sic": "optional",
}


def load_sensors(path: str | Path) -> dict[str, SensorSpec]:
    """SENSORS.yaml as `SensorSpec` by ``sensor_id``; `ReplayError` naming the line otherwise."""
    from mcc.yamlsource import parse_mapping

    text = _read(path, "the sensors file")
    data, lines = parse_mapping(
        text,
        source=str(path),
        error=ReplayError,
        expected="a mapping of sensor_id: {position_m, sigma_range_m, sigma_azimuth_rad, ...}",
    )
    if not data:
        raise ReplayError(f"{path}:1: sensors: no sensor (got an empty mapping)")
    out = {}
    for sid, spec in data.items():
        where = f"{path}:{lines.get((sid,), 1)}"
        if not isinstance(spec, dict):
            raise ReplayError(f"{where}: {sid}: expected a mapping of fields (got {spec!r})")
        for key in spec:
            if key not in _SENSOR_FIELDS:
                raise ReplayError(
                    f"{path}:{lines.get((sid, key), 1)}: {sid}.{key}: unknown field "
                    f"(got {key!r}); fields: {', '.join(_SENSOR_FIELDS)}"
                )
        for key, need in _SENSOR_FIELDS.items():
            if need == "required" and key not in spec:
                raise ReplayError(f"{where}: {sid}.{key}: missing (got {sorted(spec)})")
        values: dict[str, Any] = {}
        for key, value in spec.items():
            at = f"{path}:{lines.get((sid, key), 1)}: {sid}.{key}"
            if key == "position_m":
                ok = (
                    isinstance(value, list)
                    and len(value) in (2, 3)
                    and all(_finite_number(v) for v in value)
                )
                if not ok:
                    raise ReplayError(f"{at}: expected [x, y, z] in metres (got {value!r})")
                xyz = [float(v) for v in value] + [0.0] * (3 - len(value))
                values[key] = (xyz[0], xyz[1], xyz[2])
                continue
            if key in ("sac", "sic"):
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
                    raise ReplayError(
                        f"{at}: an ASTERIX SAC/SIC, an integer 0..255 (got {value!r})"
                    )
                values[key] = value
                continue
            if not _finite_number(value):
                raise ReplayError(f"{at}: expected a finite number (got {value!r})")
            v = float(value)
            if key == "pd" and not 0.0 < v <= 1.0:
                raise ReplayError(f"{at}: a probability in (0, 1] (got {value!r})")
            if key.startswith("sigma") and not v > 0:
                raise ReplayError(f"{at}: a standard deviation > 0 (got {value!r})")
            if key == "clutter_per_scan" and v < 0:
                raise ReplayError(f"{at}: a mean count >= 0 (got {value!r})")
            values[key] = v
        out[str(sid)] = SensorSpec(**values)
    return out


@dataclass(frozen=True, eq=False)
class Detections:
    """DETECTIONS.csv as arrays, one row per detection (NaN range: an empty scan's marker)."""

    time_s: F64
    sensor_id: list[str]
    range_m: F64
    azimuth_rad: F64
    elevation_rad: F64 | None
    range_rate_mps: F64 | None
    iff: npt.NDArray[np.uint8] | None = None

    @property
    def ndim(self) -> int:
        return 2 if self.elevation_rad is None else 3


def load_detections(path: str | Path, sensors: dict[str, SensorSpec]) -> Detections:
    """DETECTIONS: a CSV file, checked row by row against the columns and ``sensors``, or an
    ASTERIX recording (`load_asterix`)."""
    if _is_recording(path):
        return load_asterix(path, sensors)[0]
    rows = _csv_rows(path, _DETECTION_COLUMNS, _OPTIONAL_DETECTION_COLUMNS, "detections")
    header, body = next(rows), list(rows)
    has_el, has_rr = "elevation_rad" in header, "range_rate_mps" in header
    n = len(body)
    t = np.empty(n)
    r = np.empty(n)
    az = np.empty(n)
    el = np.empty(n) if has_el else None
    rr = np.empty(n) if has_rr else None
    iff = np.zeros(n, np.uint8) if "iff" in header else None
    ids: list[str] = []
    last: dict[str, tuple[float, int]] = {}  # sensor → its latest time and the line of it
    seen: dict[tuple[str, ...], int] = {}  # a detection's values → the line it was on
    for k, (line, row) in enumerate(body):
        at = f"{path}:{line}"
        sid = row["sensor_id"].strip()
        if sid not in sensors:
            known = ", ".join(sorted(sensors))
            raise ReplayError(
                f"{at}: sensor_id: not in the sensors file (got {sid[:80]!r}); known: {known}"
            )
        ids.append(sid)
        t[k] = _number(at, "time_s", row["time_s"])
        before = last.get(sid)
        if before is not None and t[k] < before[0]:
            raise ReplayError(
                f"{at}: time_s: goes back in time for sensor {sid} (got {t[k]:g} after "
                f"{before[0]:g} on line {before[1]}); give each sensor's scans in time order"
            )
        last[sid] = (t[k], line)
        key = tuple(row[c].strip() for c in header)
        if key in seen:
            raise ReplayError(f"{at}: row: the same detection as line {seen[key]} (a duplicate)")
        seen[key] = line
        empty = row["range_m"].strip() == "" and row["azimuth_rad"].strip() == ""
        if empty:
            r[k] = az[k] = np.nan
            if el is not None:
                el[k] = np.nan
            if rr is not None:
                rr[k] = np.nan
            continue
        r[k] = _number(at, "range_m", row["range_m"], low=0.0)
        az[k] = _number(at, "azimuth_rad", row["azimuth_rad"])
        if el is not None:
            el[k] = _number(
                at, "elevation_rad", row["elevation_rad"], low=-math.pi / 2, high=math.pi / 2
            )
        if rr is not None:
            rr[k] = _number(at, "range_rate_mps", row["range_rate_mps"])
        if iff is not None and row["iff"].strip():
            answer = _number(at, "iff", row["iff"], low=0.0, high=3.0)
            if answer != int(answer):
                raise ReplayError(f"{at}: iff: an IffAnswer value 0..3 (got {row['iff']!r})")
            iff[k] = int(answer)
    if n == 0:
        raise ReplayError(f"{path}:2: detections: no row after the header (got an empty file)")
    return Detections(t, ids, r, az, el, rr, iff)


def _is_recording(path: str | Path) -> bool:
    """True when ``path`` is not CSV text: an ASTERIX recording (raw blocks, pcap, pcapng)."""
    try:
        with open(path, "rb") as file:
            head = file.read(4096)
    except OSError as exc:
        raise ReplayError(f"{path}: cannot read the detections file ({exc.strerror})") from None
    if not head:
        return False  # an empty file: the CSV reader says what is missing
    try:
        first = head.decode("utf-8").lstrip("\ufeff").split("\n", 1)[0]
    except UnicodeDecodeError:
        return True
    return not any(column in first for column in _DETECTION_COLUMNS)


def load_asterix(
    path: str | Path, sensors: dict[str, SensorSpec]
) -> tuple[Detections, dict[str, Any]]:
    """The CAT048 plots of an ASTERIX recording as detections, one scan per north marker, and
    what was dropped or skipped reading it (OUT.json's ``asterix``)."""
    from mcc.asterix.recording import radar_scans
    from mcc.asterix.scans import polar_to_enu

    try:
        sources, stats, recording = radar_scans(path)
    except OSError as exc:
        raise ReplayError(f"{path}: cannot read the recording ({exc.strerror})") from None
    report: dict[str, Any] = {"input": stats.as_dict(), "recording": recording.as_dict()}
    found = {k: v for k, v in sources.items() if any(scan.count for scan in v.scans)}
    if not found:
        dropped = stats.summary_text() or "nothing dropped"
        raise ReplayError(
            f"{path}: no CAT048 target report in the recording ({recording.packets} packets, "
            f"{dropped})"
        )
    owner = _sensors_of_sources(path, sorted(found), sensors)
    report["sources"] = {f"{sac}/{sic}": owner[(sac, sic)] for sac, sic in sorted(found)}
    times: list[float] = []
    ids: list[str] = []
    cols: list[list[float]] = []
    iffs: list[int] = []
    with_height = False
    for key in sorted(found):
        sid = owner[key]
        for scan in found[key].scans:
            origin = scan.origin_ns()
            if origin is None:
                continue
            if not scan.count:  # a scan with no plot: the tracker counts its misses
                times.append(origin / 1e9)
                ids.append(sid)
                cols.append([np.nan, np.nan, np.nan])
                iffs.append(0)
                continue
            for plot in scan.plots:
                times.append(origin / 1e9)
                ids.append(sid)
                cols.append([plot.range_m, plot.azimuth_rad, plot.height_m])
                iffs.append(plot.iff)
                with_height = with_height or plot.height_kind != 0
    table = np.array(cols, dtype=np.float64).reshape(-1, 3)
    elevation = None
    if with_height:
        elevation = np.full(len(times), np.nan)
        for sid in set(ids):
            rows = np.array([i for i, s in enumerate(ids) if s == sid])
            el, *_ = polar_to_enu(
                table[rows, 0], table[rows, 1], table[rows, 2], sensors[sid].position_m
            )
            elevation[rows] = np.where(np.isfinite(table[rows, 0]), el, np.nan)
    iff = np.array(iffs, np.uint8)
    detections = Detections(
        np.array(times),
        ids,
        table[:, 0],
        table[:, 1],
        elevation,
        None,
        iff if iff.any() else None,
    )
    return detections, report


def _sensors_of_sources(
    path: str | Path, keys: list[tuple[int, int]], sensors: dict[str, SensorSpec]
) -> dict[tuple[int, int], str]:
    """Which sensor of SENSORS.yaml each data source (SAC, SIC) of the recording is."""
    owner: dict[tuple[int, int], str] = {}
    by_source = {(s.sac, s.sic): sid for sid, s in sensors.items() if s.sac is not None}
    for key in keys:
        if key in by_source:
            owner[key] = by_source[key]
    loose = [k for k in keys if k not in owner]
    free = [sid for sid, s in sensors.items() if s.sac is None or s.sic is None]
    if loose and len(loose) == 1 and len(free) == 1 and len(keys) == 1:
        owner[loose[0]] = free[0]
        loose = []
    if loose:
        heard = ", ".join(f"{sac}/{sic}" for sac, sic in loose)
        raise ReplayError(
            f"{path}: ASTERIX data source (SAC/SIC) {heard} has no sensor in the sensors file; "
            f"give the sensor of each 'sac: N' and 'sic: N' (got sensors {', '.join(sensors)})"
        )
    return owner


@dataclass(frozen=True, eq=False)
class Truth:
    """TRUTH.csv per target: times ``(K,)`` and positions ``(K, d)``, sorted by time."""

    targets: dict[str, tuple[F64, F64]]

    def at(self, time_s: float) -> F64:
        """Positions ``(n, d)`` of the targets alive at ``time_s`` (linear interpolation)."""
        out = []
        d = 2
        for times, pos in self.targets.values():
            d = pos.shape[1]
            if times[0] - 1e-9 <= time_s <= times[-1] + 1e-9:
                out.append([np.interp(time_s, times, pos[:, i]) for i in range(d)])
        return np.array(out, dtype=np.float64).reshape(-1, d)


def load_truth(path: str | Path, ndim: int) -> Truth:
    """TRUTH.csv; ``z_m`` is required for 3-D tracking (detections with elevation)."""
    rows = _csv_rows(path, _TRUTH_COLUMNS, ("z_m",), "truth")
    header = next(rows)
    if ndim == 3 and "z_m" not in header:
        raise ReplayError(
            f"{path}:1: z_m: missing; the detections have elevation_rad (3-D tracking) "
            f"(got columns {','.join(header)})"
        )
    per: dict[str, list[tuple[float, list[float]]]] = {}
    names = ("x_m", "y_m", "z_m")[:ndim]
    for line, row in rows:
        at = f"{path}:{line}"
        tid = row["target_id"].strip()
        if not tid:
            raise ReplayError(f"{at}: target_id: empty (got {row['target_id']!r})")
        per.setdefault(tid, []).append(
            (_number(at, "time_s", row["time_s"]), [_number(at, c, row[c]) for c in names])
        )
    if not per:
        raise ReplayError(f"{path}:2: truth: no row after the header (got an empty file)")
    targets = {}
    for tid, samples in per.items():
        samples.sort(key=lambda s: s[0])
        targets[tid] = (
            np.array([s[0] for s in samples]),
            np.array([s[1] for s in samples], dtype=np.float64),
        )
    return Truth(targets)


def _read(path: str | Path, what: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ReplayError(f"{path}: cannot read {what} ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ReplayError(f"{path}:1: {what}: not UTF-8 text (got binary data)") from None


def _csv_rows(
    path: str | Path, required: tuple[str, ...], optional: tuple[str, ...], what: str
) -> Iterator[Any]:
    """Yields the header, then ``(line, row dict)`` per data row; errors name the line."""
    text = _read(path, f"the {what} file")
    reader = csv.reader(text.splitlines())
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise ReplayError(
            f"{path}:1: header: missing (got an empty file); expected {','.join(required)}"
        ) from None
    except csv.Error as exc:
        raise ReplayError(f"{path}:1: header: not a CSV row ({_clip(str(exc))})") from None
    for column in required:
        if column not in header:
            raise ReplayError(
                f"{path}:1: {column}: missing column (got {_clip(','.join(header))}); expected "
                f"{','.join(required)}[,{','.join(optional)}]"
            )
    for column in header:
        if column not in required + optional:
            raise ReplayError(
                f"{path}:1: {_clip(column, 40)}: unknown column (got {_clip(column)!r}); "
                f"allowed {','.join(required + optional)}"
            )
    yield header
    while True:
        try:
            values = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:  # a field over the csv module's limit (128 KiB), a NUL …
            raise ReplayError(
                f"{path}:{reader.line_num}: row: not a CSV row ({_clip(str(exc))})"
            ) from None
        line = reader.line_num
        if not values or all(not v.strip() for v in values):
            continue
        if len(values) != len(header):
            raise ReplayError(
                f"{path}:{line}: row: {len(values)} values for {len(header)} columns "
                f"(got {','.join(values)[:80]!r})"
            )
        yield line, dict(zip(header, values, strict=True))


def _clip(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters for a one-line message (… and its length)."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def _finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _number(
    at: str, field: str, text: str, *, low: float | None = None, high: float | None = None
) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ReplayError(f"{at}: {field}: not a number (got {_clip(text)!r})") from None
    if not math.isfinite(value):
        raise ReplayError(f"{at}: {field}: not a finite number (got {text!r})")
    if low is not None and value < low:
        raise ReplayError(f"{at}: {field}: must be >= {low:g} (got {text!r})")
    if high is not None and value > high:
        raise ReplayError(f"{at}: {field}: must be <= {high:.6g} (got {text!r})")
    return value


# ---------------------------------------------------------------------------------------------
# The replay


def scans_of(detections: Detections, sensors: dict[str, SensorSpec]) -> list[Scan]:
    """One `Scan` per (time, sensor), in time order (rows of one time keep their file order)."""
    order = np.argsort(detections.time_s, kind="stable")
    t = detections.time_s[order]
    sid = [detections.sensor_id[i] for i in order]
    groups: dict[tuple[float, str], list[int]] = {}
    for k, (tk, s) in enumerate(zip(t.tolist(), sid, strict=True)):
        groups.setdefault((tk, s), []).append(int(order[k]))
    out = []
    for (tk, s), rows in groups.items():
        idx = np.array(rows)
        idx = idx[np.isfinite(detections.range_m[idx])]
        spec = sensors[s]
        el = detections.elevation_rad
        rr = detections.range_rate_mps
        iff = detections.iff
        out.append(
            Scan.from_polar(
                tk,
                detections.range_m[idx],
                detections.azimuth_rad[idx],
                None if el is None else el[idx],
                sigma_range_m=spec.sigma_range_m,
                sigma_azimuth_rad=spec.sigma_azimuth_rad,
                sigma_elevation_rad=spec.sigma_elevation_rad,
                range_rate_mps=None if rr is None else rr[idx],
                sigma_range_rate_mps=spec.sigma_range_rate_mps,
                sensor_position_m=spec.position_m,
                sensor_id=s,
                iff=None if iff is None else iff[idx],
                pd=spec.pd,
                clutter_per_scan=spec.clutter_per_scan,
            )
        )
    return out


class PictureScore:
    """GOSPA (p = 2, α = 2, cut-off ``c_m``), track ids and id switches of a picture over time,
    one `add` per scan: the scoring of `replay`, and of ``mcc bench tracker``'s families for
    every tracker alike."""

    def __init__(self, truth: Truth | None, c_m: float = GOSPA_C_M) -> None:
        self.truth = truth
        self.c_m = c_m
        self.keys = list(truth.targets) if truth is not None else []
        self.rows: list[dict[str, Any]] = []
        self.ids_seen: set[int] = set()
        self.follow: dict[int, int] = {}  # target (index in the truth) -> the id that followed it
        self.switches = 0

    def add(self, time_s: float, ids: Any, positions: F64, **extra: Any) -> dict[str, Any]:
        """Score the confirmed tracks ``ids (n,)`` at ``positions (n, d)`` at ``time_s``."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        self.ids_seen.update(ids.tolist())
        row: dict[str, Any] = {"time_s": time_s, **extra, "tracks": int(ids.size)}
        if self.truth is not None:
            targets = self.truth.targets
            alive = [
                i
                for i, k in enumerate(self.keys)
                if targets[k][0][0] - 1e-9 <= time_s <= targets[k][0][-1] + 1e-9
            ]
            g = gospa(self.truth.at(time_s), positions, c=self.c_m, p=GOSPA_P, alpha=GOSPA_ALPHA)
            for ti, ei in zip(g.truth_idx.tolist(), g.estimate_idx.tolist(), strict=True):
                target, track_id = alive[ti], int(ids[ei])
                if self.follow.get(target, track_id) != track_id:
                    self.switches += 1
                self.follow[target] = track_id
            row.update(
                gospa_m=round(g.distance, 3),
                localisation_m=round(math.sqrt(g.localisation), 3),
                missed=g.n_missed,
                false=g.n_false,
            )
        self.rows.append(row)
        return row

    def summary(self) -> dict[str, Any]:
        """OUT.json's figures (means over scans; None without truth)."""
        rows = self.rows
        ms_all = [r["ms"] for r in rows if "ms" in r]
        out: dict[str, Any] = {
            "scans": len(rows),
            "ms_per_scan_median": round(statistics.median(ms_all), 4) if ms_all else None,
            "ms_per_scan_p99": round(float(np.percentile(ms_all, 99)), 4) if ms_all else None,
            "gospa_mean_m": None,
            "localisation_m": None,
            "missed": None,
            "false": None,
            "gospa_c_m": self.c_m,
            "gospa_p": GOSPA_P,
            "gospa_alpha": GOSPA_ALPHA,
            "track_ids": len(self.ids_seen),
            "id_switches": self.switches if self.truth is not None else None,
            "tracks_final": rows[-1]["tracks"] if rows else 0,
        }
        if self.truth is not None and rows:
            for key, col in (
                ("gospa_mean_m", "gospa_m"),
                ("localisation_m", "localisation_m"),
                ("missed", "missed"),
                ("false", "false"),
            ):
                out[key] = round(float(np.mean([r[col] for r in rows])), 3)
        return out


def replay(
    scans: list[Scan],
    config: TrackerConfig,
    *,
    truth: Truth | None = None,
    gospa_c_m: float = GOSPA_C_M,
    progress: bool = False,
) -> tuple[dict[str, Any], list[tuple[float, F64, F64]]]:
    """Run the tracker on ``scans``; the summary (OUT.json's fields) and, per scan, the time,
    confirmed track ids and positions (for the plot)."""
    tracker = MultiTargetTracker(config)
    score = PictureScore(truth, gospa_c_m)
    history: list[tuple[float, F64, F64]] = []
    with_iff = any(scan.iff is not None for scan in scans)
    for scan in _progress(scans, progress):
        start = time.perf_counter()
        tracker.step(scan)
        ms = (time.perf_counter() - start) * 1e3
        table = tracker.tracks()
        history.append((scan.time_s, table.ids.astype(np.float64), table.positions_m))
        extra: dict[str, Any] = {}
        if with_iff:
            extra["identity"] = {
                str(i): Identity(int(v)).name
                for i, v in zip(table.ids.tolist(), table.identity.tolist(), strict=True)
            }
        score.add(
            scan.time_s,
            table.ids,
            table.positions_m,
            sensor_id=scan.sensor_id,
            detections=scan.count,
            ms=round(ms, 4),
            **extra,
        )
    summary = score.summary()
    summary["detections"] = int(sum(s.count for s in scans))
    summary["rows"] = score.rows
    return summary, history


def _progress(scans: list[Scan], show: bool) -> Iterator[Scan]:
    if not show or len(scans) < 200 or not sys.stderr.isatty():
        yield from scans
        return
    from rich.progress import track

    yield from track(scans, description="replaying", transient=True)


def plot(history: list[tuple[float, F64, F64]], truth: Truth | None, path: str | Path) -> Path:
    """Truth (grey) and confirmed tracks (a colour per id) in the x-y plane, kilometres."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 8))
    if truth is not None:
        for _, pos in truth.targets.values():
            ax.plot(pos[:, 0] / 1e3, pos[:, 1] / 1e3, color="0.7", lw=3, zorder=1)
    tracks: dict[int, list[F64]] = {}
    for _, ids, pos in history:
        for i, p in zip(ids.astype(int).tolist(), pos, strict=True):
            tracks.setdefault(i, []).append(p)
    cmap = plt.get_cmap("tab20")
    for i, points in tracks.items():
        xy = np.array(points)
        ax.plot(xy[:, 0] / 1e3, xy[:, 1] / 1e3, lw=1, color=cmap(i % 20), zorder=2)
    ax.set_xlabel("east, km")
    ax.set_ylabel("north, km")
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_title(f"truth (grey) and {len(tracks)} track ids")
    out = Path(path)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out


# ---------------------------------------------------------------------------------------------
# Command line


def add_parser(subparsers: Any) -> None:
    """``mcc track replay``."""
    track = subparsers.add_parser(
        "track", help="run the tracker offline", description="The tracker, offline."
    )
    tsub = track.add_subparsers(dest="track_command", metavar="COMMAND", required=True)
    p = tsub.add_parser(
        "replay",
        help="run the tracker on recorded detections and score it against truth (GOSPA)",
        description="Run the tracker on DETECTIONS.csv (time_s,sensor_id,range_m,azimuth_rad"
        "[,elevation_rad][,range_rate_mps]) or an ASTERIX recording (CAT048 plots, CAT034 "
        "north markers: raw blocks, pcap or pcapng; sensors by sac/sic) with the radars of "
        "SENSORS.yaml; with --truth, GOSPA (p=2, alpha=2, c=--gospa-c) and track-id switches. "
        "Method: mcc.tracking.replay.",
    )
    p.add_argument(
        "detections",
        metavar="DETECTIONS",
        help="DETECTIONS.csv, or an ASTERIX recording: raw CAT048/CAT034 blocks, pcap, pcapng",
    )
    p.add_argument("--sensors", metavar="SENSORS.yaml", required=True)
    p.add_argument("--truth", metavar="TRUTH.csv")
    p.add_argument("--config", metavar="TRACKER.yaml", help="TrackerConfig fields (default: none)")
    p.add_argument(
        "--gospa-c",
        type=float,
        default=GOSPA_C_M,
        metavar="M",
        help="GOSPA cut-off (%(default)s m)",
    )
    p.add_argument("--json", metavar="OUT.json", required=True)
    p.add_argument("--plot", metavar="PNG", help="truth vs tracks")
    p.set_defaults(func=cmd_replay)


def cmd_replay(args: argparse.Namespace) -> int:
    if not (math.isfinite(args.gospa_c) and args.gospa_c > 0):
        raise ReplayError(f"--gospa-c: a cut-off in metres > 0 (got {args.gospa_c!r})")
    sensors = load_sensors(args.sensors)
    asterix: dict[str, Any] | None = None
    if _is_recording(args.detections):
        detections, asterix = load_asterix(args.detections, sensors)
    else:
        detections = load_detections(args.detections, sensors)
    try:
        config = TrackerConfig.load(args.config) if args.config else TrackerConfig()
        config = replace(config, ndim=detections.ndim)
    except TrackerConfigError as exc:
        raise ReplayError(str(exc)) from None
    truth = load_truth(args.truth, detections.ndim) if args.truth else None
    scans = scans_of(detections, sensors)
    summary, history = replay(scans, config, truth=truth, gospa_c_m=args.gospa_c, progress=True)
    doc = {
        "tool": "mcc track replay",
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "detections_file": str(args.detections),
        "sensors_file": str(args.sensors),
        "truth_file": args.truth,
        "config": config.to_dict(),
        "ndim": detections.ndim,
        **summary,
    }
    if asterix is not None:
        doc["asterix"] = asterix
    out = Path(args.json)
    try:
        out.write_text(json.dumps(doc, indent=1) + "\n")
    except OSError as exc:
        raise ReplayError(f"{out}: cannot write the result ({exc.strerror})") from None
    line = (
        f"{summary['scans']} scans, {summary['detections']} detections, "
        f"{summary['ms_per_scan_median']} ms/scan (median), {summary['track_ids']} track ids"
    )
    if truth is not None:
        line += (
            f"; GOSPA {summary['gospa_mean_m']} m (localisation {summary['localisation_m']} m, "
            f"missed {summary['missed']}, false {summary['false']}), "
            f"{summary['id_switches']} id switches"
        )
    print(line)
    if asterix is not None:
        taken = ", ".join(f"CAT{c} {n}" for c, n in asterix["input"]["records"].items())
        print(f"ASTERIX records: {taken}; {asterix['input']['dropped_total']} dropped")
    print(f"wrote {out}")
    if args.plot:
        print(f"wrote {plot(history, truth, args.plot)}")
    return 0
