"""What the mission apps' ``config:`` blocks share: shipped-file paths, the scenario file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from mcc.orchestrate.appconfig import loaded_by
from mcc.resources import shipped

__all__ = ["DEFAULT_SCENARIO", "ScenarioFile", "shipped_path"]

DEFAULT_SCENARIO = "scenarios/sam-toc.yaml"


def _load_scenario(path: Path) -> object:
    from mcc.apps.scenario import load_scenario  # it imports this module

    return load_scenario(path)


#: A scenario file: loaded when the block is checked, so `mcc validate` names its own file:line.
ScenarioFile = Annotated[Path, loaded_by(_load_scenario)]


def shipped_path(name: str | Path) -> Path:
    """``name`` resolved against the working directory (an instance's is the supervisor's),
    else the shipped file of that name: `scenarios/sam-toc.yaml` works from any folder."""
    return shipped(name)
