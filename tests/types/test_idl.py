"""The Python topic types match idl/mcc.idl: not stale, and equal to what the C idlc sees."""

from __future__ import annotations

import re
import subprocess
import typing
from pathlib import Path

import pytest
from cyclonedds.idl import IdlStruct

from mcc import types
from mcc.errors import IdlError
from mcc.types import generate
from tests.conftest import REPO, require_tool

C_TYPES = {
    "uint8": "uint8_t",
    "byte": "uint8_t",  # an octet (XTypes TK_BYTE)
    "int16": "int16_t",
    "uint16": "uint16_t",
    "int32": "int32_t",
    "uint32": "uint32_t",
    "int64": "int64_t",
    "uint64": "uint64_t",
    "float32": "float",
    "float64": "double",
}


def test_generated_types_are_not_stale() -> None:
    generated = (REPO / "src/mcc/types/_mcc.py").read_text()
    assert generated == generate.generate(), "run `make types` after editing idl/mcc.idl"


def test_every_idl_declaration_is_exported() -> None:
    module = generate.idlc_module(REPO / "idl/mcc.idl")
    assert set(module.order) <= set(types.__all__)
    assert generate.read_module((REPO / "src/mcc/types/_mcc.py").read_text()) == module
    required = {
        "DetectionBatch",
        "Truth",
        "Track",
        "AirPicture",
        "Threat",
        "EngagementOrder",
        "WeaponStatus",
        "Heartbeat",
        "Command",
        "CommandReply",
        "MissionStatus",
        "ComputeRequest",
        "ComputeReply",
        "WorkItem",
        "WorkResult",
        "Checkpoint",
        "PerfSample",
    }
    assert required <= set(module.structs)


def test_optional_packed_arrays_are_listed_apart() -> None:
    """A packed array whose comment says ``; empty = …`` holds ``count`` items or none (a
    writer that predates it): listed in OPTIONAL_ARRAYS, which the bus's exact-count rule for
    PACKED_ARRAYS does not apply to; readers check it with `arrays.optional_field`."""
    from mcc.bus.validate import validate_sample
    from mcc.types.arrays import optional_field, packed_field

    text = (
        "module m { struct S { uint32 count;\n"
        "  sequence<octet> a;  // <f8[count]\n"
        "  sequence<octet> b;  // u1[count], codes; empty = not measured\n"
        "}; };"
    )
    assert generate.parse_packed_arrays(text) == {"S": {"a": ("<f8", ())}}
    assert generate.parse_packed_arrays(text, optional=True) == {"S": {"b": ("u1", ())}}
    assert types.OPTIONAL_ARRAYS == {
        "DetectionBatch": {"iff": ("u1", ())},
        "AirPicture": {"identity": ("u1", ()), "iff": ("u1", ())},
    }
    old = types.DetectionBatch(count=0)  # from a writer that predates iff
    validate_sample(old)
    assert optional_field(old, "iff") is None and packed_field(old, "iff").shape == (0,)
    f8 = bytes(16)
    batch = types.DetectionBatch(count=2, **{f: f8 for f in types.PACKED_ARRAYS["DetectionBatch"]})
    validate_sample(batch)  # empty iff: not interrogated
    batch.iff = bytes([2, 1])
    assert optional_field(batch, "iff").tolist() == [2, 1]
    batch.iff = bytes([2])
    with pytest.raises(
        ValueError, match=r"DetectionBatch.iff: 1 bytes but count=2 needs 2 or none"
    ):
        optional_field(batch, "iff")


def test_idlc_rejects_an_unknown_type_naming_the_file_line_and_type(tmp_path: Path) -> None:
    bad = tmp_path / "bad.idl"
    bad.write_text("module m {\n  struct Foo { Widget bar; };\n};\n")
    with pytest.raises(IdlError, match=rf"{bad}: idlc: {bad}:2:\d+: .*'Widget'"):
        generate.generate(bad)


@pytest.mark.parametrize(
    ("member", "said"),
    [
        ("x: types.array[types.byte]", "S.x: unsupported type 'types.array[types.byte]'"),
        ("x: types.float128", "S.x: unsupported type 'types.float128'"),
        ("annotate.position('x', 3)", "S: unsupported member"),
    ],
)
def test_reading_a_module_back_names_what_it_does_not_understand(member: str, said: str) -> None:
    text = f'class S(idl.IdlStruct, typename="m.S"):\n    {member}\n'
    with pytest.raises(IdlError, match=f"^x.py: {re.escape(said)}"):
        generate.read_module(text, source="x.py")


@pytest.fixture(scope="module")
def c_idl(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """mcc.h and mcc.c as Cyclone's C idlc writes them (an independent reading of the IDL)."""
    idlc = require_tool("idlc")
    out = tmp_path_factory.mktemp("idlc")
    subprocess.run(
        [idlc, "-l", "c", "-o", str(out), str(REPO / "idl/mcc.idl")],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return (out / "mcc.h").read_text(), (out / "mcc.c").read_text()


def _expected_c_type(hint: object) -> str:
    if hint is str:
        return "char *"
    if hint is bool:
        return "bool"
    if hint is bytes:
        return "dds_sequence_octet"
    if isinstance(hint, type):
        return f"mcc_{hint.__name__}"
    meta = typing.get_args(hint)[1]
    if isinstance(meta, str):
        return C_TYPES[meta]
    sub = meta.subtype
    inner = _expected_c_type(getattr(types, sub) if isinstance(sub, str) else sub)
    if type(meta).__name__ == "array":
        return f"{inner}[{meta.length}]"
    return f"dds_sequence_{inner.removesuffix('_t')}"


STRUCTS = [
    n
    for n in types.__all__
    if isinstance(getattr(types, n), type) and issubclass(getattr(types, n), IdlStruct)
]


@pytest.mark.tool
@pytest.mark.parametrize("name", STRUCTS)
def test_python_type_matches_c_idlc(name: str, c_idl: tuple[str, str]) -> None:
    header, source = c_idl
    cls = getattr(types, name)
    body = re.search(rf"typedef struct mcc_{name}\n\{{\n(.*?)\n\}} mcc_{name};", header, re.S)
    assert body, f"idlc wrote no struct mcc_{name}"
    c_fields = []
    for line in body.group(1).splitlines():
        m = re.match(r"\s*(.+?)\s*(\w+)(\[\d+\])?;$", line)
        assert m, line
        ctype = m.group(1) + (m.group(3) or "")
        c_fields.append((m.group(2), ctype.replace(" *", " *").strip()))
    hints = typing.get_type_hints(cls, globalns=vars(types._mcc), include_extras=True)
    py_fields = [(f, _expected_c_type(h)) for f, h in hints.items()]
    assert py_fields == c_fields
    keys = re.search(rf"mcc_{name}_keys\[\d+\] =\n\{{\n(.*?)\n\}};", source, re.S)
    c_keys = re.findall(r'\{ "(\w+)"', keys.group(1)) if keys else []
    py_keys = [f for f, a in cls.__idl_field_annotations__.items() if a.get("key")]
    assert py_keys == c_keys


UNKEYED_PLAIN = ["NDArray", "DetectionBatch", "Truth", "AirPicture", "PerfSample"]


@pytest.mark.tool
@pytest.mark.parametrize("name", UNKEYED_PLAIN)
def test_type_information_is_byte_identical_to_c_idlc(name: str, c_idl: tuple[str, str]) -> None:
    """XTypes TypeInformation (hashes of the type objects) equals the C compiler's.

    Only for types without keys or enums: Cyclone 0.10's C idlc (Debian's) marks key members
    must-understand and 11.0's Python builder does not, which changes those hashes without
    changing the wire format. These types cover the bytes <-> sequence<octet> mapping.
    """
    cls = getattr(types, name)
    m = re.search(
        rf"#define TYPE_INFO_CDR_mcc_{name} \(unsigned char \[\]\)\{{(.*?)\}}", c_idl[1], re.S
    )
    assert m
    c_bytes = bytes(int(x, 16) for x in re.findall(r"0x([0-9a-f]{2})", m.group(1)))
    cls.__idl__.fill_type_data()
    assert cls.__idl__._xt_bytedata[0] == c_bytes
