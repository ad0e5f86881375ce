"""What the mission apps' command lines share: shipped-file paths and positive numbers."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def shipped_path(name: str | Path) -> Path:
    """``name`` as given, else relative to the repository: `scenarios/sam-toc.yaml` works from
    any working directory (an instance's is the supervisor's)."""
    path = Path(name)
    if not path.exists() and not path.is_absolute() and (REPO / path).exists():
        return REPO / path
    return path


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    value = float(text)
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return value
