"""Who may write the farm master's journal in a secured mission: the masters, not the workers.

The journal decides the job: a lease of a higher epoch makes the leading master step down, and
a successor counts every result it finds there. A worker's identity, copied from its host, must
therefore not reach it. The identities are those the supervisor issues for
``missions/hpc-primes.yaml`` (its systems' declared topics), on a real secured DDS domain.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mcc.bus import Bus, Transport
from mcc.errors import MccError
from mcc.hpc.jobs import PRIMES_MISSION
from mcc.hpc.journal import JOURNAL_TOPIC
from mcc.orchestrate.manifest import load_manifest
from mcc.orchestrate.services import system_topics
from mcc.security import Identity
from mcc.security.mission import instance_identity, mission_identities

MISSION = "journal-access"


def _as(identity: Identity) -> Transport:
    base = Transport.from_env()
    return dataclasses.replace(base, extra_xml=base.extra_xml + identity.security_xml())


def test_a_worker_identity_cannot_write_the_journal_and_a_master_can(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    topics = system_topics(load_manifest(PRIMES_MISSION))
    keystore = tmp_path / "keystore"
    mission_identities(keystore, mission=MISSION, domain=domain_id)

    def identity(system: str) -> Identity:
        return instance_identity(
            keystore, mission=MISSION, domain=domain_id, system=system, index=0,
            topics=topics[system],
        )  # fmt: skip

    with Bus(domain_id, transport=_as(identity("worker")), name="stolen worker") as bus:
        bus.writer("Checkpoint")  # its own checkpoints, as ever
        for make in (bus.writer, bus.reader):
            with pytest.raises(MccError, match=f"DDS Security refused .* {JOURNAL_TOPIC!r}"):
                make(JOURNAL_TOPIC)
    with Bus(domain_id, transport=_as(identity("master")), name="master") as bus:
        bus.writer(JOURNAL_TOPIC)
        bus.reader(JOURNAL_TOPIC, history=False)
        with pytest.raises(MccError, match="DDS Security refused .* 'Checkpoint'"):
            bus.writer("Checkpoint")  # nor does a master write a worker's checkpoint
