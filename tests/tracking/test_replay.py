"""`mcc track replay` through the command line: results, and bad inputs as one line, exit 2."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from mcc.bench.tracker_families import FAMILIES, generate, run_mcc, write_files
from mcc.tracking import TrackerConfig
from mcc.tracking.replay import load_detections, load_sensors, replay, scans_of
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    family = replace(FAMILIES["manoeuvre"], duration_s=25.0, targets=6)
    return write_files(generate(family, seed=3), tmp_path_factory.mktemp("rec"))


def test_replay_writes_the_figures_and_a_plot(
    recorded: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    det, sensors, truth = recorded
    out, png = tmp_path / "out.json", tmp_path / "picture.png"
    proc = run_cli(
        ["track", "replay", str(det), "--sensors", str(sensors), "--truth", str(truth),
         "--json", str(out), "--plot", str(png)],
        env=dict(os.environ),
    )  # fmt: skip
    assert "GOSPA" in proc.stdout and f"wrote {out}" in proc.stdout
    doc = json.loads(out.read_text())
    for key in ("ms_per_scan_median", "gospa_mean_m", "localisation_m", "missed", "false",
                "track_ids", "id_switches", "rows"):  # fmt: skip
        assert doc[key] is not None, key
    assert (doc["gospa_c_m"], doc["gospa_p"], doc["gospa_alpha"]) == (500.0, 2.0, 2.0)
    assert doc["ndim"] == 2 and doc["scans"] == 26 and len(doc["rows"]) == 26
    assert doc["config"] == {**TrackerConfig(ndim=2).to_dict()}
    # Six fighters turning at 3-6 g, the defaults: every one tracked, at most one track broken.
    assert 6 <= doc["track_ids"] <= 7 and doc["id_switches"] <= 1
    assert doc["gospa_mean_m"] < 500.0 and doc["rows"][-1]["missed"] == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_replay_scores_as_the_bench_does(recorded: tuple[Path, Path, Path]) -> None:
    """The files hold what the bench tracked (3 decimals): the same figures within rounding."""
    det, sensors, truth_path = recorded
    from mcc.tracking.replay import load_truth

    specs = load_sensors(sensors)
    summary, _ = replay(
        scans_of(load_detections(det, specs), specs),
        TrackerConfig(ndim=2),
        truth=load_truth(truth_path, 2),
    )
    family = replace(FAMILIES["manoeuvre"], duration_s=25.0, targets=6)
    row = run_mcc(generate(family, seed=3))
    assert summary["track_ids"] == row["track_ids"]
    assert summary["gospa_mean_m"] == pytest.approx(row["gospa_m"], abs=5.0)


def test_the_sensors_pd_and_clutter_are_used(recorded: tuple[Path, Path, Path]) -> None:
    """SENSORS.yaml's pd and clutter_per_scan reach the tracker (each scan carries them);
    other values track differently; without them the tracker measures its own."""
    det, sensors, truth_path = recorded
    from mcc.tracking.replay import load_truth

    specs = load_sensors(sensors)
    assert (specs["radar"].pd, specs["radar"].clutter_per_scan) == (0.95, 20.0)
    truth = load_truth(truth_path, 2)
    results = {}
    cases = (("file", 0.95, 20.0), ("other", 0.3, 300.0), ("clean", 0.99, 0.0),
             ("none", None, None))  # fmt: skip
    for name, pd, clutter in cases:
        own = {"radar": replace(specs["radar"], pd=pd, clutter_per_scan=clutter)}
        scans = scans_of(load_detections(det, own), own)
        assert all((s.pd, s.clutter_per_scan) == (pd, clutter) for s in scans)
        results[name], _ = replay(scans, TrackerConfig(ndim=2), truth=truth)
    figures = {k: (r["gospa_mean_m"], r["track_ids"]) for k, r in results.items()}
    assert len({figures[k] for k in ("file", "other", "clean")}) == 3, figures
    # 300 false alarms make a hit worth little: later confirmations; a clean Pd 0.99 radar
    # confirms at its second scan.
    tracks = {k: [row["tracks"] for row in r["rows"]] for k, r in results.items()}
    assert tracks["other"][2] < tracks["file"][2] and tracks["clean"][1] > tracks["file"][1]
    assert results["none"]["gospa_mean_m"] < 500.0


_SENSORS = "radar:\n  position_m: [0, 0, 0]\n  sigma_range_m: 10\n  sigma_azimuth_rad: 0.01\n"


@pytest.mark.parametrize(
    ("detections", "sensors", "message"),
    [
        ("time_s,sensor_id,range_m,azimuth_rad\n0,radar,1000,0.1\n1,radar,abc,0.2\n", _SENSORS,
         "detections.csv:3: range_m: not a number (got 'abc')"),
        ("time_s,sensor_id,range_m\n0,radar,1000\n", _SENSORS,
         "detections.csv:1: azimuth_rad: missing column (got time_s,sensor_id,range_m)"),
        ("time_s,sensor_id,range_m,azimuth_rad\n0,other,1000,0.1\n", _SENSORS,
         "detections.csv:2: sensor_id: not in the sensors file (got 'other'); known: radar"),
        ("time_s,sensor_id,range_m,azimuth_rad\n0,radar,-5,0.1\n", _SENSORS,
         "detections.csv:2: range_m: must be >= 0 (got '-5')"),
        ("time_s,sensor_id,range_m,azimuth_rad\n0,radar,1000,0.1\n", _SENSORS + "  pd: 2\n",
         "sensors.yaml:5: radar.pd: a probability in (0, 1] (got 2)"),
        ("time_s,sensor_id,range_m,azimuth_rad\n0,radar,1000,0.1\n",
         "radar:\n  position_m: [0, 0, 0]\n  sigma_range_m: 10\n",
         "sensors.yaml:1: radar.sigma_azimuth_rad: missing"),
        ("time_s,sensor_id,range_m,azimuth_rad\n0,radar,1000,nan\n", _SENSORS,
         "detections.csv:2: azimuth_rad: not a finite number (got 'nan')"),
        ("time_s,sensor_id,range_m,azimuth_rad,iff\n0,radar,1000,0.1,7\n", _SENSORS,
         "detections.csv:2: iff: must be <= 3 (got '7')"),
        ("time_s,sensor_id,range_m,azimuth_rad,iff\n0,radar,1000,0.1,1.5\n", _SENSORS,
         "detections.csv:2: iff: an IffAnswer value 0..3 (got '1.5')"),
        # times going backwards, a scan given twice, oversized fields and headers
        ("time_s,sensor_id,range_m,azimuth_rad\n2,radar,1000,0.1\n1,radar,1000,0.2\n", _SENSORS,
         "detections.csv:3: time_s: goes back in time for sensor radar (got 1 after 2 on line 2)"),
        ("time_s,sensor_id,range_m,azimuth_rad\n1,radar,1000,0.1\n2,radar,900,0.1\n"
         "1,radar,1000,0.1\n", _SENSORS, "detections.csv:4: time_s: goes back in time"),
        ("time_s,sensor_id,range_m,azimuth_rad\n1,radar,1000,0.1\n1,radar,1000,0.1\n", _SENSORS,
         "detections.csv:3: row: the same detection as line 2 (a duplicate)"),
        ("time_s,sensor_id,range_m,azimuth_rad\n1,radar,1000," + "9" * 300_000 + "\n", _SENSORS,
         "detections.csv:2: row: not a CSV row (field larger than field limit"),
        ("time_s,sensor_id,range_m,azimuth_rad," + "h" * 300_000 + "\n", _SENSORS,
         "detections.csv:1: header: not a CSV row (field larger than field limit"),
        ("time_s,sensor_id,range_m,azimuth_rad," + "h" * 100_000 + "\n", _SENSORS,
         "detections.csv:1: hhhhhhhhhh"),
        ("time_s,sensor_id,range_m,azimuth_rad\n1,radar,1000,0.1,2\n", _SENSORS,
         "detections.csv:2: row: 5 values for 4 columns"),
    ],
)  # fmt: skip
def test_a_bad_input_is_one_line_and_status_2(
    tmp_path: Path, detections: str, sensors: str, message: str
) -> None:
    (tmp_path / "detections.csv").write_text(detections)
    (tmp_path / "sensors.yaml").write_text(sensors)
    proc = run_cli(
        ["track", "replay", str(tmp_path / "detections.csv"), "--sensors",
         str(tmp_path / "sensors.yaml"), "--json", str(tmp_path / "out.json")],
        env=dict(os.environ),
        check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert message in line and line.startswith(f"mcc: error: {tmp_path}")
    assert len(line) < 600, len(line)  # bounded, whatever the file holds
    assert not (tmp_path / "out.json").exists()


def test_a_bad_tracker_config_names_the_file_and_field(
    recorded: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    det, sensors, _ = recorded
    config = tmp_path / "tracker.yaml"
    config.write_text("model: kalman\n")
    proc = run_cli(
        ["track", "replay", str(det), "--sensors", str(sensors), "--config", str(config),
         "--json", str(tmp_path / "o.json")],
        env=dict(os.environ),
        check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{config}:1: TrackerConfig.model='kalman' is out of range" in proc.stderr


def test_the_iff_column_gives_each_rows_track_identities(tmp_path: Path) -> None:
    """A friend answering every scan and a silent target: OUT.json rows name their identity."""
    lines = ["time_s,sensor_id,range_m,azimuth_rad,iff"]
    for k in range(8):
        lines.append(f"{k},radar,{10000 + 200 * k},0.5,2")
        lines.append(f"{k},radar,{20000 + 200 * k},2.0,1")
    (tmp_path / "d.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "s.yaml").write_text(_SENSORS)
    specs = load_sensors(tmp_path / "s.yaml")
    summary, _ = replay(
        scans_of(load_detections(tmp_path / "d.csv", specs), specs), TrackerConfig(ndim=2)
    )
    last = summary["rows"][-1]["identity"]
    assert sorted(last.values()) == ["IDENTITY_FRIEND", "IDENTITY_UNKNOWN"]
