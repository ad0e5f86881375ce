"""The perftest on `--net netns`: a lab of two namespaces made and removed by the bench itself."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from mcc.bench import perftest
from tests.bench.perf_cli import run_mode
from tests.conftest import IN_CI, require_tool

pytestmark = pytest.mark.slow


def require_netns() -> None:
    """Root and network namespaces, or skip (fail in CI) with the reason."""
    from mcc.netlab import netns_available

    reason = netns_available()
    if reason is not None:
        if IN_CI:
            pytest.fail(f"network namespaces unavailable: {reason}")
        pytest.skip(f"network namespaces unavailable: {reason}")


def lab_names(token: str) -> list[str]:
    """Namespaces whose name contains ``token`` (a lab of this process's benches)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return [line.split()[0] for line in out.stdout.splitlines() if token in line]


@pytest.mark.tool
def test_latency_on_host_and_netns_with_efficiency(tmp_path: Path) -> None:
    require_netns()
    require_tool("ddsperf")
    token = f"lat{os.getpid() % 100000}-"
    doc = run_mode(
        tmp_path,
        "latency",
        "--net",
        "host,netns",
        "--impl",
        "mcc,ddsperf",
        "--sizes",
        "64",
        "--intervals",
        "0",
        "--count",
        "500",
        "--duration",
        "1",
    )
    rows = {(r["impl"], r["net"]): r for r in doc["rows"]}
    assert set(rows) == {(i, n) for i in ("mcc", "ddsperf") for n in ("host", "netns")}
    for (impl, net), row in rows.items():
        assert not row.get("error"), row["error"]
        assert row["count"] > 0, row
        if net == "netns":
            host = rows[(impl, "host")]
            assert row["efficiency_vs_host"] == pytest.approx(
                host["p50_us"] / row["p50_us"], abs=1e-3
            )
        else:
            assert row.get("efficiency_vs_host") is None
    assert lab_names(token) == [], "the bench left its lab behind"


def test_lab_is_removed_when_a_row_fails() -> None:
    require_netns()
    token = f"fail{os.getpid() % 100000}-"
    with (
        pytest.raises(RuntimeError, match="row failed"),
        perftest.open_network("netns", 2, name="fail") as nodes,
    ):
        assert {n.netns for n in nodes} == set(lab_names(token))
        assert len({n.address for n in nodes}) == 2
        raise RuntimeError("row failed")
    assert lab_names(token) == []
