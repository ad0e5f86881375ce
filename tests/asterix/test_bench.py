"""``mcc bench asterix``: its rows, its anchors in the same run, and the throughput target."""

from __future__ import annotations

import json
import os
from pathlib import Path

from mcc.bench.asterix import TARGET_REPORTS_PER_S
from tests.asterix.conftest import Oracle
from tests.conftest import run_cli


def test_the_bench_measures_mcc_beside_its_anchors(tmp_path: Path, oracle: Oracle) -> None:
    out = tmp_path / "asterix.json"
    proc = run_cli(
        ["bench", "asterix", "--quick", "--reports", "3000", "--rounds", "2",
         "--oracle", str(oracle.folder), "--json", str(out)],
        env=dict(os.environ),
        timeout_s=240,
    )  # fmt: skip
    doc = json.loads(out.read_text())
    assert doc["bench"] == "asterix" and doc["host"]["cores"] >= 1
    rows = {(r["impl"], r["what"]): r for r in doc["rows"]}
    assert set(rows) == {
        ("mcc", "decode"),
        ("mcc", "gateway"),
        ("libasterix", "parse"),
        ("asterix-decoder", "parse"),
    }
    for row in rows.values():
        assert row["reports"] == 3000 and row["rounds"] == 2 and row["reports_per_s"] > 0
    gateway = rows[("mcc", "gateway")]
    # The target, with a wide margin on an idle core (about 100 000 reports/s).
    assert gateway["reports_per_s"] >= TARGET_REPORTS_PER_S, doc["rows"]
    assert gateway["vs_libasterix"] > 2.0
    assert "meets the target" in proc.stdout
