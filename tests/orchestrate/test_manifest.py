"""Manifest validation: good manifests load, bad ones give located, actionable messages."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from mcc.errors import ManifestError
from mcc.orchestrate.appspec import app_problems
from mcc.orchestrate.manifest import Cluster, load_manifest, parse_manifest
from tests.conftest import REPO, run_cli

GOOD = """\
mission: toc
domain: 12
phases: [surveillance, engagement]
systems:
  radar:
    app: mcc.orchestrate.probe:idle
    replicas: 2
    pin: true
    priority: high
    resources: {cpus: 0.5, memory_mb: 256}
  tracker:
    app: mcc.orchestrate.probe:idle
    after: [radar]
    restart: always
  launcher:
    command: ./launcher --fast
    phases: [engagement]
clusters:
  mc:
    app: mcc.orchestrate.probe:idle
    size: 2
    max: 8
    placement: spread
"""


def test_a_good_manifest_loads_with_defaults() -> None:
    mission = parse_manifest(GOOD)
    assert mission.mission == "toc" and mission.domain == 12
    radar = mission.systems["radar"]
    assert (radar.replicas, radar.pin, radar.priority) == (2, True, "high")
    assert radar.resources.cpus == 0.5 and radar.resources.memory_mb == 256
    assert mission.systems["tracker"].restart.policy == "always"  # shorthand
    assert mission.systems["launcher"].command == ["./launcher", "--fast"]
    assert not mission.systems["launcher"].uses_heartbeat  # commands: process liveness only
    assert radar.uses_heartbeat
    assert isinstance(mission.clusters["mc"], Cluster)
    assert mission.start_order() == ["radar", "tracker", "launcher", "mc"]
    assert mission.runs_in("launcher", "engagement")
    assert not mission.runs_in("launcher", "surveillance")


def test_transport_is_udp_unless_the_manifest_says_shm() -> None:
    assert parse_manifest(GOOD).transport.kind == "udp"
    assert parse_manifest(_edit("domain: 12", "domain: 12\ntransport: shm")).transport.kind == "shm"


def test_a_yaml_alias_bomb_is_refused_fast() -> None:
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    text = "\n".join([*lines, "mission: x", "systems: {x: {app: 'a.b:c'}}"]) + "\n"
    start = time.monotonic()
    with pytest.raises(ManifestError, match="expands to more than 100000 values"):
        parse_manifest(text, source="<m>")
    assert time.monotonic() - start < 1.0


def test_validate_imports_apps_and_finds_commands(tmp_path: Path, bus_env: dict[str, str]) -> None:
    path = tmp_path / "m.yaml"
    bad = tmp_path / "weapons.yaml"
    bad.write_text("weapons: {not: a list}\n")
    path.write_text(
        "mission: m\nsystems:\n"
        '  a: {app: "mcc.apps.nothere:main"}\n'
        '  b: {app: "mcc.orchestrate.probe:nosuch"}\n'
        "  c: {command: [no-such-binary-xyz]}\n"
        '  d: {app: "mcc.orchestrate.probe:idle"}\n'
        '  e: {app: "mcc.apps.tracker:tracker", config: {scenario: nowhere.yaml}}\n'
        "  f:\n"
        '    app: "mcc.apps.tewa:tewa"\n'
        f"    config: {{scenario: {REPO / 'scenarios/small.yaml'}, weapons: {bad}}}\n"
        '  g: {app: "mcc.apps.launcher:launcher", args: [--weapons, x.yaml]}\n'
    )
    proc = run_cli(["validate", str(path)], env=bus_env, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{path}:3: systems.a.app: module 'mcc.apps.nothere' does not import" in proc.stderr
    assert f"{path}:4: systems.b.app: mcc.orchestrate.probe has no function 'nosuch'" in (
        proc.stderr
    )
    assert f"{path}:5: systems.c.command: executable 'no-such-binary-xyz' not found" in (
        proc.stderr
    )
    # Files named in a config: block must exist and parse (the fields' `loaded_by` loaders),
    # each with the loader's own words.
    assert (
        f"{path}:7: systems.e.config.scenario: nowhere.yaml: cannot read the scenario"
        in proc.stderr
    )
    assert "(got 'nowhere.yaml')" in proc.stderr
    assert f"{path}:10: systems.f.config.weapons: {bad}: weapons: " in proc.stderr
    assert f"(got '{bad}')" in proc.stderr
    assert "systems.f.config.scenario" not in proc.stderr  # that one is fine
    # An app with a config model takes no args: the fix is named, with the fields.
    assert (
        f"{path}:11: systems.g.args: mcc.apps.launcher:launcher takes a config: block, not args "
        "(fields: weapons, weapon, seed, status_period_s, max_order_age_s, track_wait_s, state) "
        "(got ['--weapons', 'x.yaml'])"
    ) in proc.stderr.splitlines()
    up = run_cli(["up", str(path), "--duration", "1"], env=bus_env, check=False)
    assert up.returncode == 2 and f"{path}:11: systems.g.args: " in up.stderr, up.stderr


def test_shipped_missions_validate() -> None:
    files = sorted((REPO / "missions").glob("*.yaml"))
    assert files, "missions/*.yaml should ship"
    for file in files:
        load_manifest(file)
        assert app_problems(file) == []


def _edit(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, 1)


BAD = [
    (
        _edit("domain: 12", "domain: 300"),
        "<m>:2: domain: must be <= 232 (got 300)",
    ),
    (
        _edit("restart: always", "restart: sometimes"),
        "<m>:14: systems.tracker.restart.policy: must be one of 'always', 'on-failure' or "
        "'never' (got 'sometimes')",
    ),
    (
        _edit("    resources: {cpus", "    resourcs: {cpus"),
        "<m>:10: systems.radar.resourcs: unknown field; allowed here: app, command, args, config, "
        "replicas, resources, priority, pin, restart, phases, after, env, node, health, "
        "description, publish, subscribe; did you mean 'resources'? "
        "(got {'cpus': 0.5, 'memory_mb': 256})",
    ),
    (
        _edit("{cpus: 0.5,", "{cpus: 0,"),
        "<m>:10: systems.radar.resources.cpus: must be > 0 (got 0)",
    ),
    (
        _edit("app: mcc.orchestrate.probe:idle\n    after", "app: mcc.apps.tracker\n    after"),
        "<m>:12: systems.tracker.app: expected a Python entry point 'package.module:function' "
        "(got 'mcc.apps.tracker')",
    ),
    (
        _edit("    command: ./launcher --fast", "    app: a.b:c\n    command: ./launcher"),
        "<m>:15: systems.launcher: give exactly one of 'app' (module:function) or 'command' "
        "(argv) (got {'app': 'a.b:c', 'command': './launcher', 'phases': ['eng...)",
    ),
    (
        _edit("size: 2", "size: 9"),
        "<m>:19: clusters.mc: size 9 must lie in [min, max] = [0, 8] (got {'app': "
        "'mcc.orchestrate.probe:idle', 'size': 9, 'max': 8...)",
    ),
    (
        _edit("placement: spread", "placement: scatter"),
        "<m>:23: clusters.mc.placement: must be one of 'pack' or 'spread' (got 'scatter')",
    ),
    (
        _edit("after: [radar]", "after: [radr]"),
        "<m>:13: systems.tracker.after[0]: not a system of this mission; known: radar, "
        "tracker, launcher, mc (did you mean 'radar'?) (got 'radr')",
    ),
    (
        _edit("phases: [engagement]", "phases: [engagment]"),
        "<m>:17: systems.launcher.phases[0]: not a phase of this mission; known: "
        "surveillance, engagement (did you mean 'engagement'?) (got 'engagment')",
    ),
    (
        _edit("    pin: true", "    after: [tracker]\n    pin: true"),
        "<m>:8: systems.radar.after: start order loops: radar -> tracker -> radar "
        "(got ['tracker'])",
    ),
    (
        _edit("mission: toc", "mission: TOC!"),
        "<m>:1: mission: a name is lower-case letters, digits, '-' and '_', starting with a "
        "letter, at most 48 (got 'TOC!')",
    ),
    (
        GOOD.replace("mission: toc\n", ""),
        "<m>:1: mission: required field is missing",
    ),
    (
        _edit("domain: 12", "domain: 12\ntransport: tcp"),
        "<m>:3: transport.kind: tcp is not offered for missions: Cyclone DDS 11.0.1's TCP "
        "crashes the listening process when a peer disconnects (docs/transport.md); use udp or "
        "shm (got 'tcp')",
    ),
    (
        _edit("domain: 12", "domain: 12\ntransport: {kind: ipc}"),
        "<m>:3: transport.kind: must be one of 'udp' or 'shm' (got 'ipc')",
    ),
    (
        _edit("domain: 12", "domain: 12\ndomain: 13"),
        "<m>:3: domain: duplicate key, first at line 2 (got a second 'domain')",
    ),
    (
        "mission: m\nsystems: {}\n",
        "<m>:2: systems: a mission needs at least one system (or cluster) to run (got {})",
    ),
    (
        _edit("    restart: always", "    restart: always\n    env: {A: {nested: 1}}"),
        "<m>:15: systems.tracker.env.A: an environment value is a string or a number "
        "(got {'nested': 1})",
    ),
    ("systems: [radar", "<m>:1: not valid YAML: expected ',' or ']', but got '<stream end>'"),
    (
        "- just\n- a list\n",
        "<m>: a manifest is a YAML mapping with at least 'mission:' and 'systems:'",
    ),
]


@pytest.mark.parametrize(("text", "expected"), BAD, ids=[e.split(": ", 1)[1][:40] for _, e in BAD])
def test_bad_manifests_give_exact_messages(text: str, expected: str) -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, source="<m>")
    assert expected in info.value.problems, info.value.problems


def test_every_problem_is_reported_at_once() -> None:
    text = _edit("domain: 12", "domain: -1").replace("replicas: 2", "replicas: many")
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, source="<m>")
    assert len(info.value.problems) == 2
    assert info.value.problems[1].startswith("<m>:7: systems.radar.replicas: ")


def test_mcc_validate_exits_2_with_messages_and_no_traceback(
    tmp_path: Path, bus_env: dict[str, str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(_edit("domain: 12", "domain: 300"))
    good = tmp_path / "good.yaml"
    good.write_text(GOOD.replace("./launcher --fast", "sleep 1"))
    proc = run_cli(["validate", str(good), str(bad)], env=bus_env, check=False)
    assert proc.returncode == 2
    assert f"{bad}:2: domain: must be <= 232 (got 300)" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{good}: ok: mission 'toc' on domain 12, 3 systems, 1 clusters, 6 instances" in (
        proc.stdout
    )
    missing = run_cli(["validate", str(tmp_path / "nope.yaml")], env=bus_env, check=False)
    assert missing.returncode == 2
    assert "nope.yaml: cannot read the manifest (No such file or directory)" in missing.stderr


def test_manifest_text_is_dedented_yaml() -> None:
    mission = parse_manifest(
        textwrap.dedent(
            """
            mission: one
            systems:
              a: {command: [sleep, "1"]}
            """
        )
    )
    assert mission.phases == ["default"] and mission.systems["a"].command == ["sleep", "1"]


#: Every MCC app with a config model, as docs/manifest.md lists them.
CONFIG_APPS = [
    "mcc.apps.radar:truth",
    "mcc.apps.radar:radar",
    "mcc.apps.asterix:gateway",
    "mcc.apps.asterix:track_output",
    "mcc.apps.tracker:tracker",
    "mcc.apps.tewa:tewa",
    "mcc.apps.launcher:launcher",
    "mcc.apps.assess:assessor",
    "mcc.apps.c2loop:plant",
    "mcc.apps.c2loop:elaborator",
    "mcc.hpc.farm:master",
    "mcc.hpc.farm:worker",
    "mcc.hpc.stream:source",
    "mcc.hpc.stream:echo",
]


def test_docs_list_every_apps_config_fields_as_the_models_say() -> None:
    """docs/manifest.md's field lists are generated from the models: a field added, renamed,
    re-defaulted or re-bounded without regenerating them fails here, with the text to paste."""
    from mcc.orchestrate.appspec import config_markdown

    text = (REPO / "docs" / "manifest.md").read_text()
    begin, end = "<!-- config fields: begin -->\n", "<!-- config fields: end -->"
    listed = text[text.index(begin) + len(begin) : text.index(end)]
    expected = config_markdown(CONFIG_APPS)
    assert listed.strip() == expected.strip(), f"paste between the markers:\n{expected}"
    # Every app of a shipped mission that declares a model is listed.
    for file in sorted((REPO / "missions").glob("*.yaml")):
        for _, name, system in load_manifest(file)._each():
            if system.app is not None and system.config is not None:
                assert system.app.strip('"') in CONFIG_APPS, f"{file}: {name}: {system.app}"
