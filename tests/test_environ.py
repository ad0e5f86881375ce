"""The process environment is read in one place, `mcc.settings`, and importing MCC changes none
of it.

Code asks `mcc.settings.current()` (``MCC_*``), `mcc.settings.external()` (the variables of
other programs) or `mcc.settings.environ()` (a copy, for a child process or a report); a new
``os.environ`` or ``os.getenv`` anywhere else fails here. The one exception is the fork server's
child, which takes its instance's environment after the fork (a write, never a read).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "mcc"

#: What of ``os`` reads or changes the environment.
ENVIRONMENT = frozenset({"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"})
#: The module that reads the environment for everyone.
SETTINGS = "mcc/settings.py"
#: The uses allowed elsewhere, each with why.
ALLOWED = {
    ("mcc/orchestrate/zygote.py", "environ.clear"): "the forked instance takes its environment",
    ("mcc/orchestrate/zygote.py", "environ.update"): "the forked instance takes its environment",
}
#: (file, line text) of the uses that remain, each with the change that removes it (none now).
#: A new one fails the test; a fixed one must be removed from here.
PENDING: dict[tuple[str, str], str] = {}


def _uses(path: Path) -> list[tuple[int, str]]:
    """(line, what) of each use of the environment through ``os`` in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [(node.lineno, a.name) for a in node.names if a.name in ENVIRONMENT]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in ENVIRONMENT
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ):
            found.append((node.lineno, node.attr))
    for node in ast.walk(tree):  # os.environ.clear(): the method, for ALLOWED
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "environ"
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id == "os"
        ):
            found.remove((node.lineno, "environ"))
            found.append((node.lineno, f"environ.{node.attr}"))
    return sorted(found)


def _all_uses() -> list[tuple[str, int, str, str]]:
    """(file, line, what, line text) of each use outside `mcc.settings`."""
    out = []
    for path in sorted(SRC.rglob("*.py")):
        name = path.relative_to(SRC.parent).as_posix()
        if name == SETTINGS:
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        out += [(name, n, what, lines[n - 1].strip()) for n, what in _uses(path)]
    return out


def test_only_the_settings_read_the_environment() -> None:
    wrong = [
        f"{name}:{line}: {text}"
        for name, line, what, text in _all_uses()
        if (name, what) not in ALLOWED and (name, text) not in PENDING
    ]
    assert not wrong, (
        "the environment read outside mcc.settings: use current() (MCC_*), external() "
        "(declare another program's variable in mcc.settings.External) or environ() (a copy "
        "for a child process):\n" + "\n".join(wrong)
    )


def test_pending_uses_still_exist() -> None:
    remaining = {(name, text) for name, _, _, text in _all_uses()}
    stale = [key for key in PENDING if key not in remaining]
    assert not stale, f"fixed, remove from PENDING: {stale}"


def test_the_scan_sees_every_form(tmp_path: Path) -> None:
    sample = textwrap.dedent(
        """
        import os
        from os import environ, getenv
        a = os.environ["X"]
        b = os.getenv("X")
        os.environ.clear()
        """
    )
    path = tmp_path / "sample.py"
    path.write_text(sample)
    assert _uses(path) == [
        (3, "environ"),
        (3, "getenv"),
        (4, "environ"),
        (5, "getenv"),
        (6, "environ.clear"),
    ]


def test_importing_mcc_changes_no_environment() -> None:
    """Not even ``CYCLONEDDS_HOME``: the checkout's venv sets it when Python starts (its
    ``mcc-cyclone.pth``), a wheel install needs none."""
    script = textwrap.dedent(
        """
        import importlib, os, pkgutil
        home = os.environ.pop("CYCLONEDDS_HOME", None)
        before = dict(os.environ)
        import mcc
        assert dict(os.environ) == before, "import mcc changed the environment"
        if home is not None:
            os.environ["CYCLONEDDS_HOME"] = home  # for cyclonedds-python, as the .pth does
        before = dict(os.environ)
        for module in pkgutil.walk_packages(mcc.__path__, "mcc."):
            if not module.name.endswith("__main__"):
                importlib.import_module(module.name)
        changed = sorted(k for k in {*before, *os.environ} if before.get(k) != os.environ.get(k))
        assert not changed, f"importing MCC's modules changed {changed}"
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
