"""Track identity (STANAG 1241) and IFF on the console: the names the page gets from the air
picture, the tracks and the threats, and what it shows for values it does not know ("?",
counted, never a broken page)."""

from __future__ import annotations

import dataclasses
import json
import logging
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mcc.console import LiveState
from mcc.console.metrics import ServerFigures, render
from mcc.console.state_values import IDENTITY, IFF_ANSWER
from mcc.types import AirPicture, Identity, IffAnswer, Threat, Track, TrackStatus
from mcc.types.arrays import pack
from tests.console.test_state import picture

FRIEND = Identity.IDENTITY_FRIEND.value
HOSTILE = Identity.IDENTITY_HOSTILE.value


def identified(msg: AirPicture, identity: list[int], iff: list[int]) -> AirPicture:
    return dataclasses.replace(msg, identity=pack(identity, "u1"), iff=pack(iff, "u1"))


def by_id(state: LiveState) -> dict[int, tuple[str | None, str | None]]:
    return {t["id"]: (t["identity"], t["iff"]) for t in state.snapshot()["tracks"]}


def test_every_identity_and_iff_answer_has_its_name() -> None:
    assert IDENTITY == {
        0: "pending",
        1: "unknown",
        2: "assumed_friend",
        3: "friend",
        4: "neutral",
        5: "suspect",
        6: "hostile",
    }
    assert IFF_ANSWER == {0: "not_interrogated", 1: "no_reply", 2: "friend", 3: "invalid"}


def test_the_air_picture_names_each_tracks_identity_and_iff() -> None:
    state = LiveState()
    now = time.time_ns()
    msg = picture(now, (901, 9000.0, 12000.0), (5, 20000.0, 20000.0), (6, 100.0, 0.0))
    iff = [IffAnswer.IFF_FRIEND.value, IffAnswer.IFF_NO_REPLY.value, 0]
    state.on_air_pictures([identified(msg, [FRIEND, HOSTILE, 0], iff)])
    assert by_id(state) == {
        5: ("hostile", "no_reply"),
        6: ("pending", "not_interrogated"),
        901: ("friend", "friend"),
    }
    snap = state.snapshot()
    assert snap["stats"]["identities"] == {"friend": 1, "hostile": 1, "pending": 1}
    assert snap["stats"]["identity_errors"] == 0 and snap["identity_errors"] == {}
    # An older tracker (no identity arrays): no identity, not an error.
    state.on_air_pictures([picture(now + 1, (7, 0.0, 0.0), tracker="old")])
    assert by_id(state)[7] == (None, None)
    assert state.snapshot()["stats"]["identities"]["none"] == 1
    assert state.identity_errors == {}


def test_tracks_and_threats_carry_the_identity_name() -> None:
    state = LiveState()
    now = time.time_ns()
    state.on_tracks(
        [
            Track(
                track_id=902,
                status=TrackStatus.TRACK_CONFIRMED,
                update_ns=now,
                identity=Identity.IDENTITY_ASSUMED_FRIEND,
                iff=IffAnswer.IFF_NO_REPLY,
            )
        ]
    )
    state.on_threats([Threat(track_id=3, rank=1, score=0.9, update_ns=now, identity=HOSTILE)])
    snap = state.snapshot()
    assert [(t["id"], t["identity"], t["iff"]) for t in snap["tracks"]] == [
        (902, "assumed_friend", "no_reply")
    ]
    assert [(t["track_id"], t["identity"]) for t in snap["threats"]] == [(3, "hostile")]


def test_unknown_values_and_malformed_arrays_show_a_question_mark_counted_once_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = LiveState()
    now = time.time_ns()
    caplog.set_level(logging.WARNING, logger="mcc.console")
    # Values outside the enums (a newer or a hostile writer): "?" for those, the others named.
    msg = picture(now, (1, 0.0, 0.0), (2, 10.0, 0.0))
    state.on_air_pictures([identified(msg, [200, FRIEND], [2, 77])])
    assert by_id(state) == {1: ("?", "friend"), 2: ("friend", "?")}
    # Arrays of another length than count: every track of the picture is "?", the picture kept.
    bad = dataclasses.replace(msg, identity=pack([FRIEND], "u1"), iff=pack([1, 1, 1], "u1"))
    state.on_air_pictures([bad])
    assert by_id(state) == {1: ("?", "?"), 2: ("?", "?")}
    state.on_air_pictures([bad])
    # A Track or Threat sample with a value outside the enum.
    state.on_tracks([Track(track_id=3, update_ns=now, identity=99, iff=IffAnswer.IFF_FRIEND)])
    state.on_threats([Threat(track_id=3, rank=1, score=0.5, update_ns=now, identity=-1)])
    snap = state.snapshot()
    assert state.identity_errors == {
        ("AirPicture", "unknown_value"): 2,
        ("AirPicture", "malformed"): 4,  # two pictures, each with both arrays wrong
        ("Track", "unknown_value"): 1,
        ("Threat", "unknown_value"): 1,
    }
    assert snap["identity_errors"] == {
        "AirPicture": {"malformed": 4, "unknown_value": 2},
        "Threat": {"unknown_value": 1},
        "Track": {"unknown_value": 1},
    }
    assert snap["stats"]["identity_errors"] == 8
    assert [t["identity"] for t in snap["tracks"]] == ["?", "?", "?"]
    assert snap["threats"][0]["identity"] == "?"
    assert state.dropped == {}  # shown as "?", never dropped
    # Logged once per (topic, reason), naming the reason.
    logged = [r.getMessage() for r in caplog.records if "identity shown as '?'" in r.getMessage()]
    assert len(logged) == 4, logged
    assert any("do not match its count" in m and "tracker 'trk'" in m for m in logged)
    # The JSON for browsers stays strict and parses.
    _, text = state.snapshot_json()
    assert json.loads(text)["tracks"][0]["identity"] == "?"
    # /metrics says how many and why.
    metrics = render(state.snapshot(), state.samples, ServerFigures())
    families = {f.name: f for f in text_string_to_metric_families(metrics)}
    values = {
        (s.labels["topic"], s.labels["reason"]): s.value
        for s in families["mcc_console_identity_errors"].samples
        if s.name.endswith("_total")
    }
    assert values[("AirPicture", "malformed")] == 4 and values[("Track", "unknown_value")] == 1
