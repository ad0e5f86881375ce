"""Track identity from IFF answers and kinematics: the STANAG 1241 standard identities.

Each detection may carry the answer of an IFF interrogation (`IffAnswer`: not interrogated, no
reply, a valid friend reply, an invalid reply). The tracker folds the answers of the detections
it assigns to a track into that track's `IffEvidence` (rows move with the track table), and
`fuse_identity` turns the evidence into an `Identity` per track:

==========================================  ==================================================
evidence                                    identity
==========================================  ==================================================
never interrogated, or one no-reply         ``PENDING``
an invalid reply (spoofing), ever           ``SUSPECT`` (``HOSTILE`` if threatening, below)
friend reply, latest answer a friend reply  ``FRIEND``
friend reply, then 1..``assumed_misses``    ``ASSUMED_FRIEND`` (a missed reply does not make a
no-replies in a row                         friend unknown)
no-reply twice or more, no friend reply     ``UNKNOWN`` (``HOSTILE`` if threatening)
(or a friend silent for longer)
==========================================  ==================================================

*Threatening*: the kinematic class (`mcc.tracking.classify.classify`) is missile-like (cruise
missile, ballistic), or the track closes on the origin of the tracker's frame (the defended
point) faster than ``closing_mps``. ``NEUTRAL`` is not decided here (it needs flight-plan
correlation, outside the tracker).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mcc.types import Identity, IffAnswer, TargetClass

__all__ = [
    "IFF_FRIEND",
    "IFF_INVALID",
    "IFF_NOT_INTERROGATED",
    "IFF_NO_REPLY",
    "IffEvidence",
    "fuse_identity",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]

IFF_NOT_INTERROGATED = int(IffAnswer.IFF_NOT_INTERROGATED.value)
IFF_NO_REPLY = int(IffAnswer.IFF_NO_REPLY.value)
IFF_FRIEND = int(IffAnswer.IFF_FRIEND.value)
IFF_INVALID = int(IffAnswer.IFF_INVALID.value)
_PENDING = int(Identity.IDENTITY_PENDING.value)
_UNKNOWN = int(Identity.IDENTITY_UNKNOWN.value)
_ASSUMED_FRIEND = int(Identity.IDENTITY_ASSUMED_FRIEND.value)
_FRIEND = int(Identity.IDENTITY_FRIEND.value)
_SUSPECT = int(Identity.IDENTITY_SUSPECT.value)
_HOSTILE = int(Identity.IDENTITY_HOSTILE.value)
_MISSILE_LIKE = (
    int(TargetClass.CLASS_CRUISE_MISSILE.value),
    int(TargetClass.CLASS_BALLISTIC.value),
)


@dataclass(eq=False)
class IffEvidence:
    """Per-track IFF counters, ``(N,)`` each (views of the tracker's arrays)."""

    last: U8  # latest answer (IffAnswer value), NOT_INTERROGATED until asked
    friend: I64  # valid friend replies since birth
    silent: I64  # no-replies in a row since the last friend reply
    invalid: I64  # invalid replies since birth

    def record(self, rows: I64, answers: U8) -> None:
        """Fold the answers ``(K,)`` of the detections assigned to tracks ``rows``; detections
        that were not interrogated leave their track's evidence as it was."""
        asked = answers != IFF_NOT_INTERROGATED
        rows, a = rows[asked], answers[asked]
        if rows.size == 0:
            return
        self.last[rows] = a
        friend = a == IFF_FRIEND
        self.friend[rows] += friend
        self.invalid[rows] += a == IFF_INVALID
        silent = self.silent[rows]
        self.silent[rows] = np.where(friend, 0, silent + (a == IFF_NO_REPLY))


def fuse_identity(
    evidence: IffEvidence,
    rows: I64,
    x: F64,
    target_class: U8 | None,
    *,
    ndim: int,
    closing_mps: float,
    assumed_misses: int,
) -> U8:
    """The `Identity` value of tracks ``rows`` (module docstring) given their states ``x (K,
    2*ndim)`` and kinematic classes ``target_class (K,)`` (None: not computed; then only the
    closing speed makes a track threatening)."""
    friend = evidence.friend[rows]
    silent = evidence.silent[rows]
    invalid = evidence.invalid[rows]
    out = np.full(rows.size, _PENDING, np.uint8)
    known_friend = friend > 0
    out[known_friend & (silent == 0)] = _FRIEND
    out[known_friend & (silent >= 1) & (silent <= assumed_misses)] = _ASSUMED_FRIEND
    unknown = (~known_friend & (silent >= 2)) | (known_friend & (silent > assumed_misses))
    out[unknown] = _UNKNOWN
    spoofed = invalid > 0
    out[spoofed] = _SUSPECT
    suspect = unknown | spoofed
    if suspect.any():
        out[suspect & threatening(x, target_class, ndim=ndim, closing_mps=closing_mps)] = _HOSTILE
    return out


def threatening(
    x: F64, target_class: U8 | None, *, ndim: int, closing_mps: float
) -> npt.NDArray[np.bool_]:
    """Missile-like class, or closing on the frame's origin faster than ``closing_mps``."""
    pos, vel = x[:, :ndim], x[:, ndim:]
    dist = np.maximum(np.linalg.norm(pos, axis=1), 1e-9)
    closing = -(pos * vel).sum(axis=1) / dist
    out = closing > closing_mps
    if target_class is not None:
        out |= np.isin(target_class, _MISSILE_LIKE)
    return np.asarray(out, dtype=bool)
