"""A lean CDR codec for flat hot-path types (``PerfSample``, ``DetectionBatch``, ``Threat`` …).

cyclonedds-python (de)serialises through a generic per-field machine that costs ~30 µs even for
a 100-byte sample, which dominated MCC's bus latency (measured: 27 µs to serialise and 29 µs to
deserialise a ``PerfSample``, against 3 µs for the native write itself). Types whose fields are
all primitives, enums, strings and ``bytes`` (keys included: a key changes nothing in the data
representation; Cyclone extracts it from the bytes) get an encoder and a decoder generated for
the type: runs of fixed-size fields are one precompiled ``struct`` per alignment residue, so a
sample costs a handful of calls. Both data representations, little-endian: XCDR1 (8-byte
alignment, no delimiter) and XCDR2 (4-byte alignment, a delimiter header for ``@appendable``
types); the decoder picks by the encapsulation header, so a foreign XCDR1 writer of an
appendable type decodes as well as an XCDR2 one. The output is byte-identical to cyclonedds'
own serialiser (``tests/bus/test_codec.py``); other types keep using it. ``FlatCodec.layout``
hands the same field list to the native core, which encodes and decodes in the write and the
take; these Python functions stay the reference and handle whatever the native code declines.
"""

from __future__ import annotations

import enum
import struct
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

_PRIMITIVES = {
    "int8": "b",
    "uint8": "B",
    "byte": "B",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "uint64": "Q",
    "float32": "f",
    "float64": "d",
}
#: Encapsulation identifiers (little-endian): plain CDR (XCDR1), plain and delimited XCDR2.
_CDR_LE, _CDR2_LE, _D_CDR2_LE = 0x01, 0x07, 0x09
_PADS = (b"", b"\0", b"\0\0", b"\0\0\0")
#: A string's or a byte sequence's length, after the padding that aligns it (0–3 bytes).
_LENGTHS = tuple(struct.Struct("<" + "x" * pad + "I") for pad in range(4))


@dataclass(frozen=True)
class _Field:
    name: str
    code: str  # a struct code, or "str" / "bytes" for the variable-length ones
    align: int
    enum: type[enum.Enum] | None = None


@dataclass(frozen=True)
class FlatCodec:
    """Encode/decode one flat type to and from its serialized CDR sample.

    ``decode`` reads XCDR1 and XCDR2 (the encapsulation header says which); big-endian or
    other encodings go to cyclonedds' generic deserialiser. Whatever it cannot read raises.
    ``encode`` writes the type's native representation; ``encoder(version_2)`` picks one.
    """

    type: type
    xcdr2: bool
    encode_xcdr1: Callable[[Any], bytes]
    encode_xcdr2: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]
    #: The same decoding for the native take (``_native.flat_layout``), or None where the
    #: class cannot be filled field by field (its own ``__setattr__``, ``__post_init__``).
    layout: Any = None

    @property
    def encode(self) -> Callable[[Any], bytes]:
        return self.encode_xcdr2 if self.xcdr2 else self.encode_xcdr1

    def writes_xcdr2(self, version_2: bool | None) -> bool:
        """Whether a writer whose data representation is XCDR2 (True), XCDR1 (False) or the
        type's native one (None) writes XCDR2."""
        return self.xcdr2 if version_2 is None else version_2

    def encoder(self, version_2: bool | None) -> Callable[[Any], bytes]:
        """The encoder for such a writer (`writes_xcdr2`)."""
        return self.encode_xcdr2 if self.writes_xcdr2(version_2) else self.encode_xcdr1


def _group_structs(group: list[_Field]) -> tuple[struct.Struct, ...]:
    """One struct per start position modulo 8, with the alignment padding written in."""
    out = []
    for residue in range(8):
        pos, fmt = residue, "<"
        for f in group:
            pad = -pos & (f.align - 1)
            fmt += "x" * pad + f.code
            pos += pad + struct.calcsize("<" + f.code)
        out.append(struct.Struct(fmt))
    return tuple(out)


def _segments(fields: list[_Field]) -> list[_Field | list[_Field]]:
    """Fields with runs of fixed-size ones gathered into lists."""
    out: list[_Field | list[_Field]] = []
    for f in fields:
        if f.code in ("str", "bytes"):
            out.append(f)
        elif out and isinstance(out[-1], list):
            out[-1].append(f)
        else:
            out.append([f])
    return out


def _generate(
    cls: type, fields: list[_Field], *, xcdr2: bool, delimited: bool
) -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    """``encode`` and ``decode`` of ``cls`` in one representation, compiled once.

    ``fields`` carry the alignment of that representation (XCDR2 aligns to at most 4);
    ``delimited`` adds XCDR2's delimiter header (appendable types)."""
    header = bytes((0, (_D_CDR2_LE if delimited else _CDR2_LE) if xcdr2 else _CDR_LE, 0, 0))
    env: dict[str, Any] = {
        "CLS": cls,
        "PADS": _PADS,
        "LENGTHS": _LENGTHS,
        "U32": struct.Struct("<I"),
        "HEADER": header,
    }
    start = 4 if delimited else 0  # the delimiter header counts for alignment
    enc = ["def encode(s):", f"    pos = {start}", "    parts = []"]
    dec = ["def decode(data):", f"    pos = {4 + start}"]
    args = []
    for k, seg in enumerate(_segments(fields)):
        if isinstance(seg, _Field):
            value = f"s.{seg.name}.encode() + b'\\0'" if seg.code == "str" else f"s.{seg.name}"
            enc += [
                f"    d = {value}",
                "    n = len(d)",
                "    p = -pos & 3",
                "    parts.append(LENGTHS[p].pack(n))",
                "    parts.append(d)",
                "    pos += p + 4 + n",
            ]
            end = "pos + n - 1].decode()" if seg.code == "str" else "pos + n]"
            dec += [
                "    pos += -(pos - 4) & 3",
                "    n = U32.unpack_from(data, pos)[0]",
                "    pos += 4",
                "    if pos + n > len(data):",
                f"        raise ValueError('{cls.__name__}.{seg.name}: length ' + str(n) + "
                "' runs past the end of the sample')",
                f"    v_{seg.name} = data[pos:{end}",
                "    pos += n",
            ]
            args.append(f"{seg.name}=v_{seg.name}")
            continue
        env[f"G{k}"] = _group_structs(seg)
        values = ", ".join(f"s.{f.name}.value" if f.enum else f"s.{f.name}" for f in seg)
        names = ", ".join(f"v_{f.name}" for f in seg)
        enc += [
            f"    st = G{k}[pos & 7]",
            f"    parts.append(st.pack({values}))",
            "    pos += st.size",
        ]
        dec += [
            f"    st = G{k}[(pos - 4) & 7]",
            f"    {names}, = st.unpack_from(data, pos)",
            "    pos += st.size",
        ]
        for f in seg:
            if f.enum is not None:
                env[f"E_{f.name}"] = f.enum
                args.append(f"{f.name}=E_{f.name}(v_{f.name})")
            else:
                args.append(f"{f.name}=v_{f.name}")
    if delimited:
        enc.append("    return b''.join((HEADER, U32.pack(pos - 4), *parts, PADS[-pos & 3]))")
    else:
        enc.append("    return b''.join((HEADER, *parts, PADS[-pos & 3]))")
    dec.append(f"    return CLS({', '.join(args)})")
    exec(compile("\n".join(enc + dec), f"<mcc codec {cls.__name__}>", "exec"), env)
    return env["encode"], env["decode"]


def _dispatching_decoder(
    cls: type, by_kind: dict[int, Callable[[bytes], Any]]
) -> Callable[[bytes], Any]:
    """A decoder that picks the representation from the encapsulation header."""
    slow = cls.deserialize  # type: ignore[attr-defined]

    def decode(data: bytes) -> Any:
        if len(data) < 4:
            raise ValueError(f"{cls.__name__}: {len(data)} bytes, shorter than a CDR header")
        fast = by_kind.get(data[1]) if data[0] == 0 else None
        if fast is None:  # big-endian, or an encoding this codec does not generate
            return slow(data)
        return fast(data)

    return decode


@cache
def flat_codec(cls: type) -> FlatCodec | None:
    """The lean codec for ``cls``, or None when it has nesting, sequences of non-bytes, or
    mutable extensibility."""
    annotations = getattr(cls, "__idl_annotations__", {})
    extensibility = annotations.get("extensibility", "final")
    if extensibility not in ("final", "appendable"):
        return None
    fields1, fields2 = _fields(cls, max_align=8), _fields(cls, max_align=4)
    if fields1 is None or fields2 is None:
        return None
    appendable = extensibility == "appendable"
    enc1, dec1 = _generate(cls, fields1, xcdr2=False, delimited=False)
    enc2, dec2 = _generate(cls, fields2, xcdr2=True, delimited=appendable)
    kind2 = _D_CDR2_LE if appendable else _CDR2_LE
    decode = _dispatching_decoder(cls, {_CDR_LE: dec1, kind2: dec2})
    return FlatCodec(cls, appendable, enc1, enc2, decode, _native_layout(cls, fields1, fields2))


def _native_layout(cls: type, fields1: list[_Field], fields2: list[_Field]) -> Any:
    """The native take's decoder for ``cls`` (the rules of ``_generate``'s), or None when the
    class does more than store its fields (a ``__setattr__``, ``__post_init__``, ``__new__``,
    slots)."""
    from mcc.bus import _native

    if (
        cls.__setattr__ is not object.__setattr__
        or cls.__new__ is not object.__new__
        or hasattr(cls, "__post_init__")
        or hasattr(cls, "__slots__")
    ):
        return None
    appendable = getattr(cls, "__idl_annotations__", {}).get("extensibility") == "appendable"
    kind2 = _D_CDR2_LE if appendable else _CDR2_LE
    fields = tuple(
        (f1.name, f1.code, f1.align, f2.align, f1.enum)
        for f1, f2 in zip(fields1, fields2, strict=True)
    )
    return _native.flat_layout(cls, appendable, kind2, fields)


def _fields(cls: type, *, max_align: int) -> list[_Field] | None:
    """The fields of ``cls`` with their alignment under ``max_align``; None if not flat."""
    module = sys.modules[cls.__module__]
    hints = typing.get_type_hints(cls, globalns=vars(module), include_extras=True)
    fields: list[_Field] = []
    for name, hint in hints.items():
        if name == "sample_info":
            continue
        meta = typing.get_args(hint)[1] if typing.get_origin(hint) is typing.Annotated else None
        if hint is str:
            fields.append(_Field(name, "str", 4))
        elif hint is bytes:
            fields.append(_Field(name, "bytes", 4))
        elif hint is bool:
            fields.append(_Field(name, "?", 1))
        elif hint is float:
            fields.append(_Field(name, "d", min(8, max_align)))
        elif isinstance(meta, str) and meta in _PRIMITIVES:
            code = _PRIMITIVES[meta]
            fields.append(_Field(name, code, min(struct.calcsize(code), max_align)))
        elif (
            isinstance(hint, type)
            and issubclass(hint, enum.Enum)
            and not getattr(hint, "__idl_annotations__", {}).get("bit_bound")
        ):
            fields.append(_Field(name, "I", 4, hint))
        else:
            return None
    return fields
