"""What the bus does not say: the mission's phases and systems, the defended assets, the radars'
coverage and the weapons' specs, read from the manifest, scenario and weapons files.

Everything here is optional: without files the console still shows what the bus carries
(radar positions from ``DetectionBatch``, weapons and their ranges from ``WeaponStatus``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcc.errors import MccError


@dataclass(frozen=True)
class Layout:
    """The static picture of a mission for the console (JSON-able with `to_json`)."""

    mission: str | None = None
    domain: int | None = None
    phases: tuple[str, ...] = ()
    systems: tuple[str, ...] = ()
    clusters: tuple[str, ...] = ()
    assets: tuple[dict[str, Any], ...] = ()
    radars: tuple[dict[str, Any], ...] = ()
    weapons: tuple[dict[str, Any], ...] = ()
    sources: dict[str, str] = field(default_factory=dict)

    def interceptor_speeds(self) -> dict[str, float]:
        return {w["id"]: w["interceptor_speed_mps"] for w in self.weapons}

    def to_json(self) -> dict[str, Any]:
        return {
            "mission": self.mission,
            "phases": list(self.phases),
            "systems": list(self.systems),
            "clusters": list(self.clusters),
            "assets": list(self.assets),
            "radars": list(self.radars),
            "weapons": list(self.weapons),
        }


def load_layout(
    *,
    manifest: str | Path | None = None,
    scenario: str | Path | None = None,
    weapons: str | Path | None = None,
) -> Layout:
    """The layout from a mission manifest and/or scenario and weapons files; a manifest's
    systems' ``scenario``/``weapons`` (their ``config:`` blocks, or ``--scenario``/``--weapons``
    in ``args:``) are used when the files are not given."""
    mission = domain = None
    phases: tuple[str, ...] = ()
    systems: tuple[str, ...] = ()
    clusters: tuple[str, ...] = ()
    sources: dict[str, str] = {}
    if manifest is not None:
        from mcc.orchestrate.manifest import load_manifest

        m = load_manifest(manifest)
        mission, domain, phases = m.mission, m.domain, tuple(m.phases)
        systems = tuple(m.all_systems())
        clusters = tuple(m.clusters)
        sources["manifest"] = str(manifest)
        for spec in m.all_systems().values():
            config = spec.config or {}
            scenario = scenario or config.get("scenario") or _option(spec.args, "--scenario")
            weapons = weapons or config.get("weapons") or _option(spec.args, "--weapons")
    assets: tuple[dict[str, Any], ...] = ()
    radars: tuple[dict[str, Any], ...] = ()
    if scenario is not None:
        from mcc.apps.scenario import load_scenario

        scene = load_scenario(scenario).spec
        sources["scenario"] = str(scenario)
        assets = tuple(
            {"id": a.id, "x": a.position_m[0], "y": a.position_m[1], "value": a.value}
            for a in scene.assets
        )
        radars = tuple(
            {
                "id": r.id,
                "x": r.position_m[0],
                "y": r.position_m[1],
                "z": r.position_m[2],
                "min_range_m": r.coverage.min_range_m,
                "max_range_m": r.coverage.max_range_m,
                "sector_deg": (  # None: all round
                    None
                    if tuple(r.coverage.sector_deg) == (0.0, 360.0)
                    else list(r.coverage.sector_deg)
                ),
                "scan_period_s": r.scan_period_s,
            }
            for r in scene.radars
        )
    weapon_specs: tuple[dict[str, Any], ...] = ()
    if weapons is not None:
        from mcc.apps.launcher import load_weapons

        sources["weapons"] = str(weapons)
        weapon_specs = tuple(
            {
                "id": w.id,
                "x": w.position_m[0],
                "y": w.position_m[1],
                "min_range_m": w.min_range_m,
                "max_range_m": w.max_range_m,
                "rounds": w.rounds,
                "interceptor_speed_mps": w.interceptor_speed_mps,
                "base_pk": w.base_pk,
            }
            for w in load_weapons(weapons).weapons
        )
    for item in (*assets, *radars, *weapon_specs):
        for key, value in item.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise MccError(f"layout: {item.get('id')!r} has {key} = {value}")
    return Layout(
        mission=mission,
        domain=domain,
        phases=phases,
        systems=systems,
        clusters=clusters,
        assets=assets,
        radars=radars,
        weapons=weapon_specs,
        sources=sources,
    )


def _option(args: Any, name: str) -> str | None:
    items = [str(a) for a in (args or [])]
    for i, arg in enumerate(items[:-1]):
        if arg == name:
            return items[i + 1]
    return None
