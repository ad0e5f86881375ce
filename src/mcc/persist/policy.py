"""Who may read, store and dispose what in the persistence service: one hook, one default.

The service calls ``authorize(principal, action, topic, partition) -> bool`` before every
store and dispose of a sample (once per partition of its writer; all must pass) and before
every history reply (``read``: once per stored partition a reply would include, a denied one
is left out; ``align``, a request for every topic and partition, once with ``"*"``, ``"*"``).
A denied store or dispose is refused like a sample over a limit (counted, logged once per
writer, reported in the writer's ``PersistAck``); a denied alignment is answered ``ok=False``.

``principal`` says who the writer of the sample or request is: its DDS participant and writer
GUIDs, the authenticated identity when the security layer told it (``identity``), and whether
that participant runs a persistence replica. Plug a real policy in with
``open_service(..., authorize=my_policy, identify=my_identities)``.

>>> policy = DefaultPolicy(secured=False)
>>> policy(Principal(participant="p", writer="w"), Action.DISPOSE, "Checkpoint", "vc1")
True
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Action", "Authorize", "DefaultPolicy", "Principal"]


class Action(enum.StrEnum):
    """What a principal asks of the service."""

    READ = "read"  # the history of one topic, for a late joiner
    ALIGN = "align"  # every topic and partition (topic "*", partition "*"), for a replica
    STORE = "store"  # keep a sample
    DISPOSE = "dispose"  # remove an instance


@dataclass(frozen=True)
class Principal:
    """The writer of a sample or of a history request, as the service knows it."""

    participant: str  # GUID of the writer's DDS participant
    writer: str  # GUID of the writer
    identity: str = ""  # the authenticated subject (DDS Security), "" while unknown
    replica: bool = False  # the participant runs a persistence replica (reads PersistRequest)
    #: Topics the participant has readers of (discovery). In a secured mission access control
    #: let it create them only if its signed permissions grant them.
    reads: frozenset[str] = frozenset()


class Authorize(Protocol):
    """The authorization hook: True allows ``action`` on ``topic`` in ``partition``
    (``""`` = the default partition, ``"*"`` = every one, with ``Action.ALIGN``)."""

    def __call__(self, principal: Principal, action: Action, topic: str, partition: str) -> bool:
        """Whether ``principal`` may do ``action``."""


class DefaultPolicy:
    """The policy when none is given.

    Unsecured mission (``secured=False``): everything is allowed: anyone who reaches the
    domain can write and read it anyway. Secured mission: DDS access control already decides
    who may publish a topic in a partition, so ``store`` and ``dispose`` are allowed; ``read``
    of a topic only to a participant that has a reader of it (which its permissions had to
    grant: asking for history is no way round them); ``align`` (every topic and partition at
    once) only to persistence replicas. Per-identity rules (only the identity that wrote a
    checkpoint may overwrite or dispose it) need ``Principal.identity``: plug in a policy that
    uses it.
    """

    def __init__(self, *, secured: bool) -> None:
        self.secured = secured

    def __call__(self, principal: Principal, action: Action, topic: str, partition: str) -> bool:
        if not self.secured:
            return True
        if action is Action.ALIGN:
            return principal.replica
        if action is Action.READ:
            return topic in principal.reads
        return True

    def __repr__(self) -> str:
        return f"DefaultPolicy(secured={self.secured})"
