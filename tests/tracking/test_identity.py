"""IFF identity: the fusion rule on explicit answer sequences, and the tracker carrying each
track's evidence through association, deletion and initiation."""

from __future__ import annotations

import numpy as np
import pytest

from mcc.tracking import MultiTargetTracker, Scan, TrackerConfig
from mcc.tracking.identity import IffEvidence, fuse_identity
from mcc.types import Identity, IffAnswer

NOT, NO, FRIEND, INVALID = (int(a.value) for a in IffAnswer)


def _fuse(answers: list[int], *, state: list[float] | None = None) -> Identity:
    ev = IffEvidence(*(np.zeros(1, t) for t in (np.uint8, np.int64, np.int64, np.int64)))
    rows = np.zeros(1, np.int64)
    for a in answers:
        ev.record(rows, np.array([a], np.uint8))
    x = np.array([state or [30e3, 0.0, 0.0, 200.0]])  # tangential: not closing
    out = fuse_identity(ev, rows, x, None, ndim=2, closing_mps=300.0, assumed_misses=2)
    return Identity(int(out[0]))


@pytest.mark.parametrize(
    ("answers", "want"),
    [
        ([], Identity.IDENTITY_PENDING),
        ([NOT, NOT], Identity.IDENTITY_PENDING),
        ([NO], Identity.IDENTITY_PENDING),
        ([NO, NOT, NO], Identity.IDENTITY_UNKNOWN),
        ([FRIEND], Identity.IDENTITY_FRIEND),
        ([FRIEND, NO], Identity.IDENTITY_ASSUMED_FRIEND),
        ([FRIEND, NO, NO], Identity.IDENTITY_ASSUMED_FRIEND),
        ([FRIEND, NO, NO, NO], Identity.IDENTITY_UNKNOWN),
        ([FRIEND, NO, FRIEND], Identity.IDENTITY_FRIEND),
        ([NO, NO, FRIEND], Identity.IDENTITY_FRIEND),
        ([FRIEND, INVALID, FRIEND], Identity.IDENTITY_SUSPECT),
    ],
)
def test_the_fusion_rule(answers: list[int], want: Identity) -> None:
    assert _fuse(answers) == want


def test_unknown_or_suspect_tracks_closing_fast_are_hostile() -> None:
    inbound = [30e3, 0.0, -400.0, 0.0]
    assert _fuse([NO, NO], state=inbound) == Identity.IDENTITY_HOSTILE
    assert _fuse([INVALID], state=inbound) == Identity.IDENTITY_HOSTILE
    assert _fuse([FRIEND], state=inbound) == Identity.IDENTITY_FRIEND
    assert _fuse([NO], state=inbound) == Identity.IDENTITY_PENDING


def test_missile_like_unknown_tracks_are_hostile() -> None:
    ev = IffEvidence(
        np.zeros(2, np.uint8), np.zeros(2, np.int64), np.full(2, 2), np.zeros(2, np.int64)
    )
    x = np.array([[30e3, 0.0, 0.0, 250.0], [30e3, 0.0, 0.0, 250.0]])
    classes = np.array([2, 1], np.uint8)  # cruise missile, aircraft (TargetClass values)
    out = fuse_identity(ev, np.arange(2), x, classes, ndim=2, closing_mps=300.0, assumed_misses=2)
    assert out.tolist() == [Identity.IDENTITY_HOSTILE.value, Identity.IDENTITY_UNKNOWN.value]


def test_the_tracker_keeps_each_tracks_evidence_through_deletion_and_birth() -> None:
    """Three targets with different IFF answers; the middle one disappears (its row goes),
    the others keep their own identity, and a new target starts with its first answer."""
    trk = MultiTargetTracker(TrackerConfig(ndim=2, model="cv"))
    R = np.diag([100.0, 100.0])
    y = np.array([0.0, 5000.0, 10000.0])
    for k in range(12):
        x = 200.0 * k + 20e3
        pos = [[x, y[0]], [x, y[2]]] if k >= 5 else [[x, y[0]], [x, y[1]], [x, y[2]]]
        iff = [FRIEND, NO] if k >= 5 else [FRIEND, INVALID, NO]
        if k >= 8:  # a new target, answering as a friend
            pos.append([-20e3, 0.0])
            iff.append(FRIEND)
        trk.step(Scan(float(k), np.array(pos), R, iff=np.array(iff, np.uint8)))
    table = trk.tracks()
    order = np.argsort(table.ids)
    assert table.ids[order].tolist() == [1, 3, 4]  # id 2 (the spoofer) was deleted
    assert table.iff[order].tolist() == [FRIEND, NO, FRIEND]
    assert table.identity[order].tolist() == [
        Identity.IDENTITY_FRIEND.value,
        Identity.IDENTITY_UNKNOWN.value,
        Identity.IDENTITY_FRIEND.value,
    ]
    restored = MultiTargetTracker(trk.config)
    restored.restore(trk.snapshot())
    np.testing.assert_array_equal(restored.tracks().identity, table.identity)


def test_scans_without_iff_give_pending_and_bad_answers_are_counted() -> None:
    trk = MultiTargetTracker(TrackerConfig(ndim=2, model="cv"))
    R = np.diag([100.0, 100.0])
    for k in range(4):
        trk.step(Scan(float(k), np.array([[100.0 * k, 0.0]]), R))
    assert trk.tracks().identity.tolist() == [Identity.IDENTITY_PENDING.value]
    assert trk.tracks().iff.tolist() == [NOT]
    trk.step(Scan(4.0, np.array([[400.0, 0.0]]), R, iff=np.array([9])))
    assert trk.iff_rejected == 1
    assert trk.tracks().iff.tolist() == [NOT]
    with pytest.raises(Exception, match="iff must be"):
        trk.step(Scan(5.0, np.array([[500.0, 0.0]]), R, iff=np.array([1, 2])))


def test_polar_scans_take_iff_too() -> None:
    scan = Scan.from_polar(0.0, [1e4, 2e4], [0.1, 0.2], sigma_range_m=10.0,
                           sigma_azimuth_rad=0.01, iff=[FRIEND, NO])  # fmt: skip
    assert list(scan.iff) == [FRIEND, NO]  # type: ignore[arg-type]


def test_classify_rules_missiles_out_for_friends() -> None:
    from mcc.tracking.classify import classify
    from mcc.types import TargetClass

    x = np.array([[20e3, 0.0, 40.0, 0.0, 250.0, 0.0]] * 2)  # 250 m/s at 40 m: a cruise missile
    ident = np.array([Identity.IDENTITY_UNKNOWN.value, Identity.IDENTITY_FRIEND.value], np.uint8)
    plain, _ = classify(x, ndim=3)
    fused, p = classify(x, ndim=3, identity=ident)
    missile = int(TargetClass.CLASS_CRUISE_MISSILE.value)
    assert plain.tolist() == [missile, missile]
    assert fused[0] == missile and fused[1] != missile
    np.testing.assert_allclose(p.sum(axis=1), 1.0)


def test_a_snapshot_from_before_iff_restores_as_not_interrogated() -> None:
    trk = MultiTargetTracker(TrackerConfig(ndim=2, model="cv"))
    for k in range(4):
        trk.step(Scan(float(k), np.array([[100.0 * k, 0.0]]), np.diag([100.0, 100.0]),
                      iff=np.array([FRIEND])))  # fmt: skip
    doc = trk.snapshot()
    assert doc["iff"] == [FRIEND]
    for key in ("iff", "iff_friend", "iff_silent", "iff_invalid"):
        del doc[key]
    old = MultiTargetTracker(trk.config)
    old.restore(doc)
    assert old.tracks().iff.tolist() == [NOT]
    assert old.tracks().identity.tolist() == [Identity.IDENTITY_PENDING.value]
