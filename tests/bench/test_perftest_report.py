"""Perftest reporting: README sections replaced in place, targets, options parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcc.bench import report, runner
from mcc.errors import MccError

OTHER = "## tracker — 2026-01-01T00:00:00+00:00\n\n| impl |\n|---|\n| mcc |\n"


def doc(bench: str, created: str, value: float) -> dict[str, object]:
    return {
        "bench": bench,
        "created": created,
        "command": f"mcc bench {bench}",
        "host": {"cpu": "cpu", "cores": 2, "python": "3.11", "versions": {"cyclonedds": "11"}},
        "rows": [{"impl": "mcc", "p50_us": value}],
    }


def test_record_replaces_its_own_section_and_keeps_the_others(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(
        "# MCC benchmarks\n\nTables appended by `mcc bench NAME --record`; the newest run of "
        "each bench is last. Method: docs/benchmarks.md.\n\n" + OTHER
    )
    report.record(doc("latency", "t1", 11.0), ["impl", "p50_us"], notes="first", readme=readme)
    report.record(doc("scale", "t2", 22.0), ["impl", "p50_us"], readme=readme)
    report.record(doc("latency", "t3", 33.0), ["impl", "p50_us"], notes="again", readme=readme)
    text = readme.read_text()
    assert text.count("## latency — ") == 1 and "## latency — t3" in text
    assert "11.00" not in text and "first" not in text and "33.00" in text and "again" in text
    assert OTHER.strip() in text and "## scale — t2" in text
    # order kept: tracker, latency (replaced where it was), scale
    assert text.index("## tracker") < text.index("## latency") < text.index("## scale")
    assert "replaces the section of its bench" in text and "Tables appended" not in text


def test_record_creates_the_readme(tmp_path: Path) -> None:
    readme = tmp_path / "new" / "README.md"
    loaded = doc("load", "t1", 1.5)
    loaded["host"]["load_avg"] = [3.5, 2.25, 1.0]  # type: ignore[index]
    report.record(loaded, ["impl", "p50_us"], readme=readme)
    text = readme.read_text()
    assert text.startswith("# MCC benchmarks") and "| mcc | 1.50 |" in text
    assert "load average 3.5 / 2.25 / 1 (1 / 5 / 15 min)" in text


@pytest.mark.parametrize(
    ("measured", "limit", "at_least", "status"),
    [(2.5, 3.0, False, "met"), (3.5, 3.0, False, "missed"), (0.3, 0.25, True, "met")],
)
def test_target_rows(measured: float, limit: float, at_least: bool, status: str) -> None:
    row = runner.target_row("t", measured, limit, unit="×", at_least=at_least)
    assert row["status"] == status and row["measured"] == f"{measured:.2f}×"
    assert runner.target_row("t", None, limit)["status"] == "not measured"


def test_option_lists_are_parsed_with_units() -> None:
    assert runner.parse_ints("--sizes", "1,64,10KiB,64k") == (1, 64, 10240, 65536)
    assert runner.parse_floats("--intervals", "0,1,0.1") == (0.0, 1.0, 0.1)
    assert runner.parse_pairs("--pairs", "1x1,2-2,4X4") == ((1, 1), (2, 2), (4, 4))
    for parse, text in (
        (runner.parse_ints, "64,big"),
        (runner.parse_floats, "fast"),
        (runner.parse_pairs, "2by2"),
    ):
        with pytest.raises(MccError, match=f"'{text}'"):
            parse("--x", text)
    with pytest.raises(MccError, match="at least one"):
        runner.parse_pairs("--pairs", "0x1")


def test_targets_are_judged_per_network() -> None:
    rows = [
        {"net": "host", "publishers": 4, "subscribers": 4, "ratio_p50_vs_1x1": 1.2},
        {"net": "netns", "publishers": 4, "subscribers": 4, "ratio_p50_vs_1x1": 2.0},
    ]
    from mcc.bench import scale

    judged = runner.per_net(scale.targets, rows)
    assert [(t["target"].rsplit(" ", 1)[-1], t["status"]) for t in judged] == [
        ("[host]", "met"),
        ("[netns]", "missed"),
    ]
    assert runner.per_net(scale.targets, rows[:1]) == scale.targets(rows[:1])
