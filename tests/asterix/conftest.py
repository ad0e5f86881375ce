"""The independent ASTERIX decoder the tests check MCC against, and shared helpers.

The oracle is CroatiaControl's ``asterix-decoder`` (C++, GPL): never a dependency of MCC, it is
installed by the first test that needs it into ``.venv/asterix-oracle-VERSION`` (``pip install
--target``) and run in its own interpreter (``python -S`` with ``PYTHONPATH`` on that folder), so
its ``asterix`` package never meets libasterix's, which has the same name. A failed install
fails the tests that need it: they are never skipped.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from mcc.bench.asterix import ORACLE_VERSION
from tests.conftest import REPO

ORACLE_DIR = REPO / ".venv" / f"asterix-oracle-{ORACLE_VERSION}"

_PARSE = r"""
import json, sys
import asterix
out = []
for text in json.load(sys.stdin):
    out.append(asterix.parse(bytes.fromhex(text), verbose=False))
json.dump(out, sys.stdout, default=str)
"""


class Oracle:
    """asterix-decoder in a subprocess."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def parse(self, datagrams: Sequence[bytes]) -> list[list[dict[str, Any]]]:
        """The oracle's records of each datagram (one process for all of them)."""
        proc = subprocess.run(
            [sys.executable, "-S", "-c", _PARSE],
            input=json.dumps([d.hex() for d in datagrams]),
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(self.folder)},
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        result: list[list[dict[str, Any]]] = json.loads(proc.stdout)
        return result

    def sample(self, name: str) -> bytes:
        """A sample recording shipped with the oracle (real radar data)."""
        return (self.folder / "asterix" / "sample_data" / name).read_bytes()


def install_oracle(folder: Path = ORACLE_DIR) -> Path:
    """Install asterix-decoder into ``folder`` unless it is there (a lock keeps two test
    processes from installing at once)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    lock = folder.parent / f".{folder.name}.lock"
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        if not (folder / "asterix" / "__init__.py").exists():
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                 "--no-compile", "--target", str(folder), f"asterix-decoder=={ORACLE_VERSION}"],
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )  # fmt: skip
            if proc.returncode != 0:
                pytest.fail(
                    f"cannot install the test oracle asterix-decoder=={ORACLE_VERSION} into "
                    f"{folder} (pip needs the network and a C++ compiler):\n{proc.stderr[-3000:]}"
                )
    return folder


@pytest.fixture(scope="session")
def oracle() -> Oracle:
    return Oracle(install_oracle())
