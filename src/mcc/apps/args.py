"""What the mission apps' command lines share: shipped-file paths and positive numbers."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from mcc.resources import shipped


def shipped_path(name: str | Path) -> Path:
    """``name`` resolved against the working directory (an instance's is the supervisor's),
    else the shipped file of that name: `scenarios/sam-toc.yaml` works from any folder."""
    return shipped(name)


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    value = float(text)
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return value
