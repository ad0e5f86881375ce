"""deploy/: the systemd units pass `systemd-analyze verify`, the Containerfiles pass hadolint and
are multi-stage and non-root, the sbatch script passes shellcheck, every `mcc` command line in
them parses with the real `mcc` parser, and the Grafana dashboard asks only for metrics that
MCC exports."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from mcc.bus import BusStatistics
from mcc.cli import build_parser
from mcc.console import metrics as console_metrics
from mcc.observe.metrics import BusStatsCollector, HeartbeatCollector, StatusCollector
from mcc.observe.trace import ChainTracer
from mcc.observer import TopicCounter
from mcc.resources import data_root
from tests.conftest import REPO, require_tool

DEPLOY = REPO / "deploy"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
CONTAINERFILES = sorted(DEPLOY.glob("Containerfile.*"))
BIN = Path(sys.executable).parent  # where the dev tools of this venv are


def tool(name: str) -> str:
    """A linter from the dev extra (this venv's bin), else a system tool."""
    local = BIN / name
    return str(local) if local.exists() else require_tool(name)


def run(cmd: Sequence[str], *, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{cmd} timed out after {timeout_s} s\n{exc.stdout}\n{exc.stderr}")


def parses(argv: list[str]) -> None:
    """``mcc ARGV`` is a valid command line of this mcc (argparse exits 2 otherwise)."""
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"mcc {shlex.join(argv)}: not a valid command line (exit {exc.code})")


def test_there_is_a_unit_for_the_agent_the_supervisor_the_console_and_the_observer() -> None:
    names = {u.name for u in UNITS}
    assert names == {
        "mcc-agent@.service",
        "mcc-supervisor@.service",
        "mcc-console@.service",
        "mcc-observe@.service",
    }


def test_units_verify(tmp_path: Path) -> None:
    """As installed: /opt/mcc/bin is this venv's bin, a template instantiated for sam-toc."""
    analyze = require_tool("systemd-analyze")
    installed = []
    for unit in UNITS:
        text = unit.read_text().replace("/opt/mcc/bin/", f"{BIN}/")
        name = unit.name.replace("@.", "@sam-toc.")
        (tmp_path / name).write_text(text)
        installed.append(str(tmp_path / name))
    proc = run([analyze, "verify", "--man=no", *installed])
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stdout + proc.stderr


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_units_notify_and_have_a_watchdog(unit: Path) -> None:
    service = unit.read_text().split("[Service]", 1)[1].split("[Install]")[0]
    settings = dict(
        line.split("=", 1) for line in service.splitlines() if "=" in line and line[0] != "#"
    )
    assert settings["Type"] == "notify" and settings["NotifyAccess"] == "main"
    assert int(settings["WatchdogSec"]) > 0
    assert settings["User"] == "mcc" and settings["NoNewPrivileges"] == "yes"
    instance = "sam-toc-d10" if unit.name.startswith("mcc-agent@") else "sam-toc"
    exec_start = shlex.split(settings["ExecStart"].replace("%i", instance))
    if exec_start[0].endswith("/mcc"):
        parses(exec_start[1:])
    elif exec_start[1:3] in (["-m", "mcc.observer"], ["-m", "mcc.observe"]):  # the latter execs
        from mcc.observer._observer import _parser  # the former

        _parser().parse_args(exec_start[3:])
    else:
        from mcc.orchestrate.agent import AgentPaths

        assert exec_start[1:3] == ["-m", "mcc.orchestrate.agent"], exec_start
        # where a supervisor of sam-toc on domain 10 looks for its agent (MCC_HOME=/var/lib/mcc)
        paths = AgentPaths.for_mission(Path("/var/lib/mcc"), "sam-toc", 10)
        options = dict(zip(exec_start[3::2], exec_start[4::2], strict=True))
        assert options == {
            "--key": paths.key,
            "--socket": str(paths.socket),
            "--state": str(paths.state),
            "--lock": str(paths.lock),
        }


@pytest.mark.parametrize("containerfile", CONTAINERFILES, ids=lambda c: c.name)
def test_containerfiles(containerfile: Path) -> None:
    proc = run([tool("hadolint"), "--no-color", str(containerfile)])
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr
    text = containerfile.read_text()
    stages = re.findall(r"^FROM (\S+) AS (\w+)$", text, re.M)
    assert len(stages) >= 2, "multi-stage: a build stage and a runtime stage"
    runtime = text.split(f"AS {stages[-1][1]}", 1)[1]
    assert "COPY --from=build" in runtime
    users = re.findall(r"^USER (\S+)$", runtime, re.M)
    assert users and users[-1] not in ("root", "0"), "the runtime runs as a non-root user"
    # MCC from the wheels of `make wheels`, whose cyclonedds carries the Cyclone it needs
    assert "COPY dist/mcc-*.whl dist/cyclonedds-*.whl /wheels/" in text
    assert "CYCLONEDDS_HOME" not in text
    assert re.search(r"^FROM localhost/mcc-base:bookworm AS build$", text, re.M)  # make images
    assert (REPO / ".containerignore").read_text().count(".venv") == 1


def test_containerfile_commands_parse() -> None:
    core = (DEPLOY / "Containerfile.core").read_text()
    entry = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", core, re.M)[1])
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", core, re.M)[1])
    assert entry == ["mcc"]
    parses(cmd)
    site_data = "/opt/mcc/lib/python3.11/site-packages/mcc/data/"
    assert cmd[1].startswith(site_data) and (data_root() / cmd[1][len(site_data) :]).is_file()
    console = (DEPLOY / "Containerfile.console").read_text()
    entry = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", console, re.M)[1])
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", console, re.M)[1])
    parses([*entry[1:], *cmd])


def test_sbatch_script() -> None:
    script = DEPLOY / "slurm" / "mcc-mission.sbatch"
    proc = run([tool("shellcheck"), str(script)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = script.read_text()
    assert re.search(r"^#SBATCH --nodes=\d+$", text, re.M)
    up = re.search(r'"\$prefix/bin/mcc" (up .*?)(?:\|\||$)', text.replace("\\\n", " "), re.M)
    assert up, "the script runs mcc up"
    parses(
        [w for w in shlex.split(up[1].replace('"$mission"', "m.yaml").replace('"$duration"', "1"))]
    )


def test_kuberay_example() -> None:
    values = yaml.safe_load((DEPLOY / "kuberay" / "values.yaml").read_text())
    job = yaml.safe_load((DEPLOY / "kuberay" / "rayjob.yaml").read_text())
    assert values["head"]["securityContext"]["runAsNonRoot"] is True
    assert (
        values["worker"]["minReplicas"]
        <= values["worker"]["replicas"]
        <= values["worker"]["maxReplicas"]
    )
    assert job["kind"] == "RayJob" and job["apiVersion"] == "ray.io/v1"
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[0] == "mcc" and "--backend" in argv and argv[argv.index("--backend") + 1] == "ray"
    parses(argv[1:])


def exported_metric_names() -> set[str]:
    """Every metric family MCC's processes export (console, supervisor, bus, heartbeats)."""
    snapshot = {
        "mission": {"name": "m", "phase": "p", "state": "running", "backend": "local"},
        "health": [{"id": "m/s/0", "system": "s", "state": "running"}],
        "stats": {},
        "series": {},
    }
    text = console_metrics.render(
        snapshot, {"Track": 1}, console_metrics.ServerFigures(), dropped={("Track", "x"): 1}
    )
    registry = CollectorRegistry()
    registry.register(
        StatusCollector(
            lambda: {"instances": [], "clusters": {"c": {"size": 1, "min": 0, "max": 2}}}
        )
    )
    stats = BusStatistics()
    stats.dropped_by_topic["Track"] = 1
    registry.register(BusStatsCollector(lambda: stats))
    registry.register(HeartbeatCollector())
    registry.register(TopicCounter(ChainTracer(None)))
    text += generate_latest(registry).decode()
    return {f.name for f in text_string_to_metric_families(text)}


def test_the_grafana_dashboard_asks_for_exported_metrics() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "mcc-mission.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 10
    exported = exported_metric_names()
    for expr in exprs:
        for name in re.findall(r"\bmcc_[a-z0-9_]+", expr):
            family = re.sub(r"_(total|sum|count)$", "", name)
            assert family in exported, f"{expr}: {name} is not exported by MCC"
