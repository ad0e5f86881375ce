"""Fixtures of the multi-host tests: labs of network namespaces, always torn down."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from mcc.netlab import NetLab, netns_available
from tests.conftest import IN_CI


def require_netns() -> None:
    """Network namespaces or bust: fail in CI, skip elsewhere, with the reason."""
    reason = netns_available()
    if reason is not None:
        message = f"network namespaces unavailable: {reason}"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    for tool in ("ip", "nft"):
        if subprocess.run(["which", tool], capture_output=True, check=False).returncode != 0:
            message = f"{tool} is not installed (.ci/run installs iproute2 and nftables)"
            if IN_CI:
                pytest.fail(message)
            pytest.skip(message)


def lab_leftovers(token: str) -> list[str]:
    """Namespaces and links whose name contains ``token`` (what a lab may leave behind)."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = [line.split()[0] for line in netns.splitlines()]
    names += [line.split(":")[1].strip().split("@")[0] for line in links.splitlines()]
    return [n for n in names if token in n]


@pytest.fixture
def lab(request: pytest.FixtureRequest) -> Iterator[NetLab]:
    """A two-host lab ``a``, ``b``; removed after the test whatever happened."""
    require_netns()
    hosts = getattr(request, "param", ("a", "b"))
    netlab = NetLab(list(hosts), name=f"t{os.getpid() % 10000}")
    request.addfinalizer(netlab.down)
    netlab.up()
    yield netlab
    netlab.down()
    assert lab_leftovers(netlab.bridge.removeprefix("mcc-").removesuffix("b")) == []
