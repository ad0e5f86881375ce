"""Discovery introspection under churn: tens of participants join and leave for a minute while
the matched-endpoint calls run flat out. No call raises, and every answer is a set of
participants that were all alive at one instant of the call (cyclonedds-python's own calls read
past their array when a peer appears between their two reads; the bus's do not use them)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field

import pytest

from mcc.bus import Bus
from mcc.bus.rpc import matched_participants
from mcc.types import Track
from tests.conftest import REPO

pytestmark = pytest.mark.slow

CHURN_S = float(os.environ.get("MCC_CHURN_S", "60"))
#: Participants that join and leave at once in the churning child.
CHURNERS = 6
#: How long after a participant's deletion returned its peers may still list it (its
#: "dispose" still in flight on loopback).
LEAVE_GRACE_S = 2.0

_CHURN = """
import random, sys, threading, time
from mcc.bus import Bus
from mcc.types import Track

end = time.monotonic() + float(sys.argv[1])
lock = threading.Lock()

def say(*words):
    with lock:
        print(*words, flush=True)

stable = Bus(int(sys.argv[2]))
stable_writer, stable_reader = stable.writer("Track"), stable.reader("Track")
say("stable", stable.participant.guid)

failed = []

def churn(seed):
    rng = random.Random(seed)
    try:
        while time.monotonic() < end:
            opened = time.monotonic()
            bus = Bus(int(sys.argv[2]))
            guid = str(bus.participant.guid)
            say("join", guid, opened)
            writer, reader = bus.writer("Track"), bus.reader("Track")
            writer.write(Track(track_id=seed))
            time.sleep(rng.uniform(0.02, 0.6))
            bus.close()
            say("leave", guid, time.monotonic())
    except BaseException:
        failed.append(seed)
        raise

threads = [threading.Thread(target=churn, args=(i,)) for i in range(int(sys.argv[3]))]
for t in threads:
    t.start()
for t in threads:
    t.join()
say("done")
sys.stdin.read()  # the stable peer stays until the test has stopped looking (stdin closed)
stable.close()
sys.exit(1 if failed else 0)
"""


@dataclass
class _Lives:
    """Join and leave times (this host's monotonic clock) of the child's participants."""

    joined: dict[str, float] = field(default_factory=dict)
    left: dict[str, float] = field(default_factory=dict)
    stable: str = ""
    done: bool = False

    def read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            words = line.split()
            if words[:1] == ["stable"]:
                self.stable = words[1]
            elif words[:1] == ["join"]:
                self.joined[words[1]] = float(words[2])
            elif words[:1] == ["leave"]:
                self.left[words[1]] = float(words[2])
            elif words[:1] == ["done"]:
                self.done = True


@dataclass
class _Answer:
    what: str
    start: float
    end: float
    participants: frozenset[str]


def _coexisted(answer: _Answer, lives: _Lives, own: str) -> str | None:
    """Why ``answer`` is not a set alive at one instant of its call; None when it is."""
    starts, ends = [], []
    for p in answer.participants - {own, lives.stable}:
        if p not in lives.joined:
            return f"{p} is no participant of this test"
        starts.append(lives.joined[p])
        ends.append(lives.left.get(p, float("inf")) + LEAVE_GRACE_S)
    if not starts:
        return None
    latest_start, earliest_end = max(starts), min(ends)
    if latest_start > answer.end:
        return f"a member joined after the call returned ({latest_start - answer.end:.3f} s)"
    if latest_start > earliest_end:
        return f"its members never lived at one instant (gap {latest_start - earliest_end:.3f} s)"
    if earliest_end < answer.start:
        return f"a member had left {answer.start - earliest_end:.3f} s before the call"
    return None


def test_matched_calls_survive_participants_joining_and_leaving(
    bus_env: dict[str, str], domain_id: int
) -> None:
    lives = _Lives()
    with Bus(domain_id) as bus:
        writer, reader = bus.writer("Track"), bus.reader("Track")
        own = str(bus.participant.guid)
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                textwrap.dedent(_CHURN),
                str(CHURN_S),
                str(domain_id),
                str(CHURNERS),
            ],
            cwd=REPO,
            env=bus_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        listener = threading.Thread(target=lives.read, args=(child,), daemon=True)
        listener.start()
        answers: list[_Answer] = []
        handles_asked = handles_gone = calls = 0
        try:
            deadline = time.monotonic() + CHURN_S + 60
            while not lives.done and time.monotonic() < deadline and child.poll() is None:
                for what, call in (
                    ("writers", lambda: matched_participants(reader)),
                    ("readers", lambda: matched_participants(writer)),
                    ("writer-endpoints", lambda: {e.participant for e in reader.matched_writers()}),
                    ("reader-endpoints", lambda: {e.participant for e in writer.matched_readers()}),
                ):
                    start = time.monotonic()
                    found = call()
                    answers.append(_Answer(what, start, time.monotonic(), frozenset(found)))
                    calls += 1
                # handles of writers that may have left by now: None, never an exception
                for _, info in reader.take_cdr(64):
                    handles_asked += 1
                    endpoint = reader.matched_writer(info.publication_handle)
                    handles_gone += endpoint is None
                    assert reader.writer_partitions(info.publication_handle) in {(), ("",)}
                writer.write(Track(track_id=0))
        finally:
            try:
                _, err = child.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                _, err = child.communicate()
    listener.join(5)
    assert child.returncode == 0, f"the churning child failed:\n{err[-3000:]}"
    joined = len(lives.joined)
    print(
        f"\n{joined} participants joined and left in {CHURN_S:g} s; {calls} matched calls, "
        f"{handles_asked} handle lookups ({handles_gone} of writers gone)"
    )
    assert joined >= 20, f"only {joined} participants churned: the test did not churn"
    assert calls >= 1000, f"only {calls} calls in {CHURN_S:g} s"
    wrong = [(a, why) for a in answers if (why := _coexisted(a, lives, own)) is not None]
    assert not wrong, f"{len(wrong)} of {len(answers)} answers were no snapshot: {wrong[:5]}"
    # the stable peer is seen once discovered, and churners were seen too: the calls looked
    seen_churners = set().union(*(a.participants for a in answers)) - {own, lives.stable}
    assert len(seen_churners) >= joined // 4, f"only {len(seen_churners)} churners ever seen"
    for what in {a.what for a in answers}:
        kind = [a for a in answers if a.what == what]
        first = next((i for i, a in enumerate(kind) if lives.stable in a.participants), None)
        assert first is not None, f"{what}: the stable peer was never matched"
        missing = [a for a in kind[first:] if lives.stable not in a.participants]
        assert not missing, f"{what}: {len(missing)} answers lost the stable peer: {missing[:3]}"


def test_no_code_calls_cyclonedds_python_matched_endpoint_api() -> None:
    """Its count-then-list calls race with discovery; the native core's `matched` does not."""
    offenders = [
        f"{path.relative_to(REPO)}:{n}"
        for path in sorted((REPO / "src").rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "get_matched_publication" in line or "get_matched_subscription" in line
    ]
    assert not offenders, f"cyclonedds-python's matched-endpoint API called at {offenders}"
