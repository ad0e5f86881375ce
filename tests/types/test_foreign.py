"""Artefacts for other DDS vendors generated from idl/mcc.idl (mcc.types.foreign)."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from mcc import types
from mcc.types import foreign

MODULE = foreign.load_module()
STRUCTS = [name for name in MODULE.order if name in MODULE.structs]


@pytest.mark.parametrize("name", STRUCTS)
def test_pattern_round_trips_through_the_generated_type(name: str) -> None:
    expected = foreign.pattern_sample(MODULE, name, 7)
    sample = foreign.from_plain(getattr(types, name), expected)
    assert foreign.plain(sample) == expected
    # and through both data representations of cyclonedds' own serialiser
    for version_2 in (False, True):
        data = sample.serialize(use_version_2=version_2)
        assert data[1] in ((0x07, 0x09) if version_2 else (0x01,))
        assert foreign.plain(type(sample).deserialize(data)) == expected


def test_pattern_follows_the_documented_rule() -> None:
    track = foreign.pattern_sample(MODULE, "Track", 2)
    assert track["track_id"] == 200  # uint32: 100 * seed + index
    assert track["tracker_id"] == "Track.tracker_id/2"
    assert track["status"] == 202 % 4  # enum: literal b mod n
    assert track["x_m"] == 204.25  # double: b + 0.25
    assert track["covariance"][:2] == [210.25, 211.25]  # array element k: base b + k
    assert track["update_ns"] == -214 * 1_000_000_007  # int64
    batch = foreign.pattern_sample(MODULE, "DetectionBatch", 1)
    assert bytes.fromhex(batch["range_m"]) == bytes(range(108, 108 + 8 * (108 % 5) + 3))
    status = foreign.pattern_sample(MODULE, "MissionStatus", 1)
    assert len(status["systems"]) == 2  # sequences of structs: two elements
    assert status["systems"][1]["system_id"] == "SystemEntry.system_id/106"


def test_fastdds_glue_covers_every_struct() -> None:
    glue = foreign.render_fastdds_glue(MODULE)
    assert glue.startswith("// GENERATED from idl/mcc.idl")
    for name in STRUCTS:
        assert f"inline void fill(mcc::{name}& x, uint64_t seed)\n" in glue
        assert f"inline void to_json(std::ostream& o, const mcc::{name}& x)\n" in glue
        assert f'if (name == "{name}")' in glue


def test_rti_xml_has_every_type_member_and_key() -> None:
    root = ET.fromstring(foreign.render_rti_xml(MODULE))
    module = root.find("types/module")
    assert module is not None and module.get("name") == "mcc"
    structs = {s.get("name"): s for s in module.findall("struct")}
    assert list(structs) == STRUCTS
    assert {e.get("name") for e in module.findall("enum")} == set(MODULE.enums)
    for name, struct in structs.items():
        decl = MODULE.structs[name]
        members = struct.findall("member")
        assert [m.get("name") for m in members] == [f.name for f in decl.fields]
        assert [m.get("name") for m in members if m.get("key") == "true"] == decl.keys
        assert struct.get("extensibility") == decl.extensibility
    track = {m.get("name"): m.attrib for m in structs["Track"].findall("member")}
    assert track["covariance"] == {"name": "covariance", "type": "float64", "arrayDimensions": "36"}
    assert track["status"]["nonBasicTypeName"] == "mcc::TrackStatus"
    picture = {m.get("name"): m.attrib for m in structs["AirPicture"].findall("member")}
    assert picture["state"]["type"] == "octet" and picture["state"]["sequenceMaxLength"] == "-1"


def test_cli_writes_rti_xml(tmp_path: object) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mcc.cli", "types", "--rti-xml"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == foreign.render_rti_xml(MODULE)
