"""--log-format json: one JSON object per record."""

from __future__ import annotations

import io
import json
import logging
import os

import pytest

from mcc.observe.logs import add_log_format_argument, configure_logging


def test_json_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCC_LOG_FORMAT", "text")
    stream = io.StringIO()
    handler = configure_logging("json", stream=stream)
    try:
        logging.getLogger("mcc.test").warning("radar %s lost", "radar-1", extra={"scan_id": 7})
        try:
            raise ValueError("bad")
        except ValueError:
            logging.getLogger("mcc.test").exception("failed")
    finally:
        logging.getLogger().removeHandler(handler)
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "radar radar-1 lost"
    assert (first["level"], first["logger"], first["scan_id"]) == ("warning", "mcc.test", 7)
    assert first["pid"] == os.getpid() and first["time"].endswith("+00:00")
    assert "ValueError: bad" in second["exception"]
    assert os.environ["MCC_LOG_FORMAT"] == "text"  # this process's settings are not changed


def test_the_option_and_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    monkeypatch.setenv("MCC_LOG_FORMAT", "json")
    parser = argparse.ArgumentParser()
    add_log_format_argument(parser)
    assert parser.parse_args([]).log_format == "json"
    assert parser.parse_args(["--log-format", "text"]).log_format == "text"
    with pytest.raises(ValueError, match="log format 'xml'"):
        configure_logging("xml")


def test_an_instance_logs_json_lines_when_its_mission_asks(
    bus_env: dict[str, str], domain_id: int
) -> None:
    """`MCC_LOG_FORMAT=json` in a mission's environment reaches every instance's runtime."""
    import subprocess
    import sys

    env = {
        **bus_env,
        "MCC_LOG_FORMAT": "json",
        "MCC_MISSION": "logs",
        "MCC_SYSTEM": "probe",
        "MCC_DOMAIN": str(domain_id),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "mcc.orchestrate.runtime", "mcc.orchestrate.probe:idle"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        record = json.loads(proc.stderr.readline())
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert record["logger"] == "mcc.runtime" and record["message"].startswith(
        "logs/probe/0 started"
    )
    assert record["pid"] == proc.pid


def test_a_huge_message_is_clipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a line quotes may come from the bus: 1 MiB of sensor id is not 1 MiB of log."""
    monkeypatch.setenv("MCC_LOG_FORMAT", "text")
    stream = io.StringIO()
    handler = configure_logging("text", stream=stream)
    try:
        logging.getLogger("mcc.test").warning("sensor %s refused", "S" * 2**20)
        logging.getLogger("mcc.test").warning("sensor %s refused", "radar-1")
    finally:
        logging.getLogger().removeHandler(handler)
    huge, small = stream.getvalue().splitlines()
    assert len(huge) < 2200 and f"({2**20 + 15} characters, clipped)" in huge
    assert small.endswith("sensor radar-1 refused")


def test_the_mcc_command_clips_without_a_configured_handler() -> None:
    """Without a handler Python prints warnings through ``logging.lastResort``: clipped too."""
    import subprocess
    import sys

    code = (
        "import logging\n"
        "from mcc.observe.logs import clip_log_messages\n"
        "clip_log_messages()\n"
        "logging.getLogger('mcc.test').warning('id %s', 'x' * 10**6)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert 2000 < len(done.stderr) < 2200 and "clipped" in done.stderr
