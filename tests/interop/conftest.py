"""Foreign peers: the Fast DDS peer built by ``make interop``, environments without Cyclone's
discovery tag (which other vendors never see), each on a fresh domain id."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcc.bus.qos import default_library
from mcc.bus.qos_export import export_profiles
from mcc.bus.transport import Transport
from tests.conftest import IN_CI, REPO, require_tool

FASTDDS_PEER = REPO / "build" / "interop-fastdds" / "mcc-fastdds-peer"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "rti: needs rticonnextdds-connector (RTI's licence: never installed by MCC); "
        "run with `make interop-rti` after installing it",
    )


@pytest.fixture(scope="session")
def fastdds_peer() -> Path:
    """``make interop``: the Fast DDS peer from idl/mcc.idl (fails in CI, skips elsewhere)."""
    for tool in ("cmake", "c++", "fastddsgen"):
        require_tool(tool)
    if not Path("/usr/include/fastdds/dds/domain/DomainParticipant.hpp").exists():
        message = "Fast DDS headers missing (apt-get install libfastrtps-dev)"
        pytest.fail(message) if IN_CI else pytest.skip(message)
    build = subprocess.run(
        ["make", "interop"], cwd=REPO, capture_output=True, text=True, timeout=600, check=False
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    assert os.access(FASTDDS_PEER, os.X_OK)
    return FASTDDS_PEER


@pytest.fixture(scope="session")
def fastdds_qos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The QoS profiles as Fast DDS XML (`mcc qos export --vendor fastdds`)."""
    path = tmp_path_factory.mktemp("fastdds") / "mcc-fastdds.xml"
    path.write_text(export_profiles(default_library(), "fastdds"), encoding="utf-8")
    return path


@pytest.fixture
def foreign_env(
    domain_id: int, fastdds_qos: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    """Environment for a mission with foreign peers: loopback unicast with no discovery tag, on
    this test's fresh domain; the Fast DDS peer talks unicast to Cyclone's ports on 127.0.0.1.
    Buses the test opens itself get the same (``MCC_TRANSPORT``/``CYCLONEDDS_URI``)."""
    env = {k: v for k, v in os.environ.items() if k != "MCC_DISCOVERY_TAG"}
    env = Transport.loopback(None).apply_to_env(env)
    env.update(
        MCC_DOMAIN=str(domain_id),
        MCC_FASTDDS_PEERS="127.0.0.1",
        MCC_FASTDDS_QOS=str(fastdds_qos),
    )
    monkeypatch.delenv("MCC_DISCOVERY_TAG", raising=False)
    for key in ("MCC_TRANSPORT", "CYCLONEDDS_URI", "MCC_DOMAIN"):
        if key in env:
            monkeypatch.setenv(key, env[key])
    yield env


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """RTI tests are opt-in (RTI's licence): deselected, and said so, unless ``-m`` names rti."""
    if "rti" in (config.getoption("markexpr", "") or ""):
        return
    rti = [item for item in items if item.get_closest_marker("rti")]
    if rti:
        config.hook.pytest_deselected(items=rti)
        items[:] = [item for item in items if not item.get_closest_marker("rti")]
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"tests/interop: {len(rti)} RTI Connext tests deselected (opt-in: make interop-rti)"
            )
