"""`mcc bench chaos`: its measures on made-up histories, and one real run."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcc.bench.chaos import run_chaos
from mcc.bench.chaos_watch import Watch, id_switches, missing_ids, picture_gap


def test_order_ids_lost_are_counted_within_a_numbering() -> None:
    assert missing_ids([]) == 0
    assert missing_ids([5, 6, 7]) == 0
    assert missing_ids([5, 6, 9]) == 2  # 7 and 8 never heard
    assert missing_ids([5, 6, 90_000, 90_001]) == 0  # a TEWA that started from a new base


def test_picture_gap_is_the_longest_silence_in_the_window() -> None:
    watch = Watch("m")
    watch.pictures = [(t, frozenset()) for t in (10.0, 10.5, 11.0, 13.2, 13.7)]
    assert picture_gap(watch, 10.0, 14.0) == 2.2
    assert picture_gap(watch, 14.0, 20.0) == 6.0  # nothing at all in the window
    assert picture_gap(Watch("m"), 0.0, 5.0) is None  # a mission without a picture


def test_track_id_switches_need_a_lost_id_and_a_new_one() -> None:
    watch = Watch("m")
    watch.pictures = [(1.0, frozenset({1, 2, 3})), (2.0, frozenset({1, 2, 7})), (3.0, frozenset())]
    assert id_switches(watch, 1, recovered=1.5) == 1  # 3 became 7
    resumed = Watch("m")
    resumed.pictures = [(1.0, frozenset({1, 2, 3})), (2.0, frozenset({1, 2, 3}))]
    assert id_switches(resumed, 1, recovered=1.5) == 0
    died = Watch("m")  # a target shot down: its track ends, no new id takes its place
    died.pictures = [(1.0, frozenset({1, 2, 3})), (2.0, frozenset({1, 2}))]
    assert id_switches(died, 1, recovered=1.5) == 0


MANIFEST = """\
mission: chaosb
domain: 0
systems:
  radar: {app: "mcc.orchestrate.probe:idle", resources: {cpus: 0.1}}
  peer: {command: [sleep, "300"], resources: {cpus: 0.1}}
clusters:
  w: {app: "mcc.orchestrate.probe:idle", size: 2, max: 4, resources: {cpus: 0.1}}
"""


@pytest.mark.slow
def test_a_run_kills_the_supervisor_the_agent_and_an_instance_and_loses_nothing(
    tmp_path: Path,
) -> None:
    manifest = tmp_path / "chaosb.yaml"
    manifest.write_text(MANIFEST)
    result = run_chaos(manifest, every_s=0.5, kinds=["radar", "supervisor", "agent"])
    rows = {r["kill"]: r for r in result["kills"]}
    assert set(rows) == {"none (anchor)", "radar", "supervisor", "agent"}
    assert not any(r.get("error") for r in rows.values()), rows
    supervisor = rows["supervisor"]
    assert supervisor["restarted"] == 0  # the standby adopted every instance
    assert supervisor["recover_s"] is not None and supervisor["recover_s"] > 0
    radar = rows["radar"]
    assert 0 < radar["detect_s"] <= radar["recover_s"] and radar["restarted"] == 0
    # the foreign command dies with its node agent and is restarted; the apps are adopted
    assert rows["agent"]["restarted"] == 1
    assert result["run"]["ok"] and result["run"]["orders_issued"] is None


def test_the_lab_summary_is_judged_against_the_host_runs_spread() -> None:
    """`compare`: a lab figure within the host runs' range, widened by their own spread (at
    least one for a count), passes; one outside fails; any friend killed fails."""
    from mcc.bench.chaos_lab import compare

    host = [
        {"orders": 20, "kills": 14, "misses": 6, "targets_killed": 14, "leakers": 2,
         "friends_killed": 0, "gospa_mean_m": 900.0},
        {"orders": 23, "kills": 15, "misses": 8, "targets_killed": 15, "leakers": 1,
         "friends_killed": 0, "gospa_mean_m": 950.0},
    ]  # fmt: skip
    near = [{**host[0], "orders": 26, "leakers": 3, "gospa_mean_m": 1000.0}]
    verdict = compare(near, host)
    assert verdict["ok"] and verdict["orders"]["noise"] == 3, verdict
    far = compare([{**host[0], "orders": 27}], host)
    assert not far["ok"] and far["orders"]["within"] is False and far["kills"]["within"]
    fratricide = compare([{**host[0], "friends_killed": 1}], host)
    assert not fratricide["ok"] and fratricide["friends_killed"]["within"] is False
    missing = compare([{**host[0], "gospa_mean_m": None}], host)
    assert missing["gospa_mean_m"]["within"] is None and not missing["ok"]
