"""What other DDS vendors need of ``idl/mcc.idl``, generated from it (docs/interop.md).

- ``render_fastdds_glue``: the C++ header of the Fast DDS peer (``interop/fastdds``) that fills a
  sample of any MCC type with the *pattern* of a seed and prints a sample as JSON, so the interop
  tests compare every field of every type without code written per type.
- ``pattern_sample`` / ``plain``: the same pattern and the same JSON shape in Python.
- ``render_rti_xml``: the types as RTI Connector XML (``mcc types --rti-xml``), so an RTI peer's
  types never drift from the IDL (RTI 6.1 sends no type information Cyclone reads, so Cyclone
  matches its endpoints by type name alone).

The pattern of struct ``S`` for seed ``s``: field ``i`` has base ``b = 100 * s + i``; booleans are
``b`` odd, small integers ``b`` modulo their range, int32/uint32 ``b``, int64 ``-b * 1000000007``,
uint64 ``b * 1000000007``, floats ``b + 0.5`` and doubles ``b + 0.25`` (exact in binary), strings
``"S.field/s"``, enums literal ``b mod n``; ``sequence<octet>`` holds ``8 * (b mod 5) + 3`` bytes
``(b + k) mod 256``, other sequences ``b mod 3 + 1`` elements (structs: 2) and arrays their length,
element ``k`` following the rule of its type with base ``b + k``.
"""

from __future__ import annotations

import enum
import sys
import xml.etree.ElementTree as ET
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

from mcc.types.generate import OUTPUT_PATH, IdlField, IdlModule, IdlStructDecl, read_module

__all__ = [
    "load_module",
    "pattern_sample",
    "plain",
    "render_fastdds_glue",
    "render_rti_xml",
]

# IDL type → (C++ type, pattern kind)
_SCALARS: dict[str, tuple[str, str]] = {
    "boolean": ("bool", "bool"),
    "octet": ("uint8_t", "small"),
    "uint8": ("uint8_t", "small"),
    "int8": ("int8_t", "small"),
    "short": ("int16_t", "short"),
    "int16": ("int16_t", "short"),
    "unsigned short": ("uint16_t", "short"),
    "uint16": ("uint16_t", "short"),
    "long": ("int32_t", "int"),
    "int32": ("int32_t", "int"),
    "unsigned long": ("uint32_t", "int"),
    "uint32": ("uint32_t", "int"),
    "long long": ("int64_t", "int64"),
    "int64": ("int64_t", "int64"),
    "unsigned long long": ("uint64_t", "uint64"),
    "uint64": ("uint64_t", "uint64"),
    "float": ("float", "float"),
    "double": ("double", "double"),
    "string": ("std::string", "string"),
}
_BIG = 1_000_000_007


def load_module(path: Path = OUTPUT_PATH) -> IdlModule:
    """The declarations of ``idl/mcc.idl``, read from the Python types generated from it
    (``mcc.types._mcc``: installed with MCC, where ``idlc`` may not be)."""
    return read_module(path.read_text(encoding="utf-8"), source=str(path))


# -- the pattern, in Python ------------------------------------------------------------------


def _scalar(module: IdlModule, type_name: str, base: int, where: str) -> Any:
    if type_name in module.enums:
        return base % len(module.enums[type_name].literals)
    kind = _SCALARS[type_name][1]
    if kind == "bool":
        return base % 2 == 1
    if kind == "small":
        return base % 128
    if kind == "short":
        return base % 30000
    if kind == "int":
        return base
    if kind == "int64":
        return -base * _BIG
    if kind == "uint64":
        return base * _BIG
    if kind == "float":
        return base + 0.5
    if kind == "double":
        return base + 0.25
    return where


def _value(module: IdlModule, struct: IdlStructDecl, f: IdlField, seed: int, index: int) -> Any:
    base = 100 * seed + index
    where = f"{struct.name}.{f.name}/{seed}"
    if f.kind == "sequence" and f.type_name == "octet":
        return bytes((base + k) % 256 for k in range(8 * (base % 5) + 3)).hex()
    if f.kind in ("sequence", "array"):
        if f.type_name in module.structs:
            count = 2 if f.kind == "sequence" else f.length
            return [pattern_sample(module, f.type_name, base + k) for k in range(count)]
        count = base % 3 + 1 if f.kind == "sequence" else f.length
        return [_scalar(module, f.type_name, base + k, where) for k in range(count)]
    if f.type_name in module.structs:
        return pattern_sample(module, f.type_name, base)
    return _scalar(module, f.type_name, base, where)


def pattern_sample(module: IdlModule, type_name: str, seed: int) -> dict[str, Any]:
    """The pattern of ``type_name`` for ``seed`` as plain JSON data (what ``plain`` gives)."""
    struct = module.structs[type_name]
    return {f.name: _value(module, struct, f, seed, i) for i, f in enumerate(struct.fields)}


def plain(sample: Any) -> Any:
    """A sample of a generated type as JSON data: bytes as hex, enums as their values."""
    if is_dataclass(sample) and not isinstance(sample, type):
        return {
            f.name: plain(_array_as_list(f.type, getattr(sample, f.name))) for f in fields(sample)
        }
    if isinstance(sample, bytes | bytearray):
        return bytes(sample).hex()
    if isinstance(sample, enum.Enum):
        return sample.value
    if isinstance(sample, list | tuple):
        return [plain(x) for x in sample]
    return sample


def _array_as_list(hint: Any, value: Any) -> Any:
    """An array of octets as its list of values: cyclonedds decodes it to bytes."""
    import typing

    if isinstance(value, bytes | bytearray) and typing.get_origin(hint) is typing.Annotated:
        return list(value)
    return value


def from_plain(cls: type, data: dict[str, Any]) -> Any:
    """A sample of generated type ``cls`` from JSON data (the inverse of ``plain``)."""
    import typing

    module = sys.modules[cls.__module__]
    hints = typing.get_type_hints(cls, globalns=vars(module), include_extras=False)
    values: dict[str, Any] = {}
    for name, value in data.items():
        values[name] = _from_plain_value(hints[name], value)
    return cls(**values)


def _from_plain_value(hint: Any, value: Any) -> Any:
    import typing

    origin = typing.get_origin(hint)
    if hint is bytes:
        return bytes.fromhex(value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if isinstance(hint, type) and is_dataclass(hint):
        return from_plain(hint, value)
    if origin in (list, typing.Sequence) or (origin is not None and value.__class__ is list):
        (elem,) = typing.get_args(hint)[:1] or (Any,)
        return [_from_plain_value(elem, v) for v in value]
    return value


# -- the pattern and JSON, in C++ ------------------------------------------------------------


def _cxx_scalar(module: IdlModule, type_name: str, base: str, where: str) -> str:
    if type_name in module.enums:
        n = len(module.enums[type_name].literals)
        return f"static_cast<mcc::{type_name}>(({base}) % {n})"
    ctype, kind = _SCALARS[type_name]
    return {
        "bool": f"(({base}) % 2 == 1)",
        "small": f"static_cast<{ctype}>(({base}) % 128)",
        "short": f"static_cast<{ctype}>(({base}) % 30000)",
        "int": f"static_cast<{ctype}>({base})",
        "int64": f"-static_cast<int64_t>(({base}) * {_BIG}ULL)",
        "uint64": f"static_cast<uint64_t>(({base}) * {_BIG}ULL)",
        "float": f"static_cast<float>({base}) + 0.5f",
        "double": f"static_cast<double>({base}) + 0.25",
        "string": f'std::string("{where}/") + std::to_string(seed)',
    }[kind]


def _cxx_fill(module: IdlModule, struct: IdlStructDecl) -> list[str]:
    out = [f"inline void fill(mcc::{struct.name}& x, uint64_t seed)", "{"]
    for i, f in enumerate(struct.fields):
        b = f"(100 * seed + {i})"
        where = f"{struct.name}.{f.name}"
        if f.kind == "sequence" and f.type_name == "octet":
            out += [
                f"  x.{f.name}().resize(8 * ({b} % 5) + 3);",
                f"  for (size_t k = 0; k < x.{f.name}().size(); k++)",
                f"    x.{f.name}()[k] = static_cast<uint8_t>(({b} + k) % 256);",
            ]
        elif f.kind in ("sequence", "array"):
            if f.kind == "sequence":
                count = "2" if f.type_name in module.structs else f"({b} % 3 + 1)"
                out.append(f"  x.{f.name}().resize({count});")
            out.append(f"  for (size_t k = 0; k < x.{f.name}().size(); k++)")
            if f.type_name in module.structs:
                out.append(f"    fill(x.{f.name}()[k], {b} + k);")
            else:
                value = _cxx_scalar(module, f.type_name, f"{b} + k", where)
                out.append(f"    x.{f.name}()[k] = {value};")
        elif f.type_name in module.structs:
            out.append(f"  fill(x.{f.name}(), {b});")
        else:
            out.append(f"  x.{f.name}({_cxx_scalar(module, f.type_name, b, where)});")
    out.append("}")
    return out


def _cxx_json_value(module: IdlModule, type_name: str, expr: str) -> str:
    if type_name in module.structs:
        return f"to_json(o, {expr})"
    if type_name in module.enums:
        return f"o << static_cast<uint32_t>({expr})"
    kind = _SCALARS[type_name][1]
    if kind == "bool":
        return f'o << (({expr}) ? "true" : "false")'
    if kind == "string":
        return f"json_string(o, {expr})"
    if kind in ("float", "double"):
        return f"json_real(o, {expr})"
    if kind == "small":
        return f"o << static_cast<int>({expr})"
    return f"o << {expr}"


def _cxx_to_json(module: IdlModule, struct: IdlStructDecl) -> list[str]:
    out = [f"inline void to_json(std::ostream& o, const mcc::{struct.name}& x)", "{"]
    for i, f in enumerate(struct.fields):
        sep = "{" if i == 0 else ","
        out.append(f'  o << "{sep}\\"{f.name}\\":";')
        if f.kind == "sequence" and f.type_name == "octet":
            out.append(f"  json_hex(o, x.{f.name}());")
        elif f.kind in ("sequence", "array"):
            elem = _cxx_json_value(module, f.type_name, f"x.{f.name}()[k]")
            out += [
                '  o << "[";',
                f"  for (size_t k = 0; k < x.{f.name}().size(); k++)",
                "  {",
                '    if (k) o << ",";',
                f"    {elem};",
                "  }",
                '  o << "]";',
            ]
        else:
            out.append(f"  {_cxx_json_value(module, f.type_name, f'x.{f.name}()')};")
    if not struct.fields:
        out.append('  o << "{";')
    out += ['  o << "}";', "}"]
    return out


def render_fastdds_glue(module: IdlModule) -> str:
    """``mcc_glue.hpp``: pattern fill, JSON output and a dispatch by type name, for the types
    fastddsgen generated from the same IDL."""
    out = [
        "// GENERATED from idl/mcc.idl by `python -m mcc.types.foreign --fastdds-glue`:",
        "// do not edit. Pattern fill and JSON output of every MCC type (mcc/types/foreign.py).",
        "#pragma once",
        "#include <cstdint>",
        "#include <cstdio>",
        "#include <ostream>",
        "#include <string>",
        "#include <vector>",
        '#include "mcc.h"',
        '#include "mccPubSubTypes.h"',
        "",
        "namespace mcc_glue {",
        "",
        "inline void json_string(std::ostream& o, const std::string& s)",
        "{",
        "  o << '\"';",
        "  for (unsigned char c : s)",
        "  {",
        "    if (c == '\"' || c == '\\\\') o << '\\\\' << c;",
        '    else if (c < 0x20) { char b[8]; std::snprintf(b, sizeof b, "\\\\u%04x", c); o << b; }',
        "    else o << c;",
        "  }",
        "  o << '\"';",
        "}",
        "",
        "inline void json_real(std::ostream& o, double v)",
        "{",
        "  char b[32];",
        '  std::snprintf(b, sizeof b, "%.17g", v);',
        "  o << b;",
        '  if (std::string(b).find_first_of(".eEn") == std::string::npos) o << ".0";',
        "}",
        "",
        "inline void json_hex(std::ostream& o, const std::vector<uint8_t>& v)",
        "{",
        '  static const char digits[] = "0123456789abcdef";',
        "  o << '\"';",
        "  for (uint8_t c : v) o << digits[c >> 4] << digits[c & 15];",
        "  o << '\"';",
        "}",
        "",
    ]
    for name in module.order:
        if name in module.structs:
            out.append(f"inline void to_json(std::ostream& o, const mcc::{name}& x);")
            out.append(f"inline void fill(mcc::{name}& x, uint64_t seed);")
    out.append("")
    for name in module.order:
        if name in module.structs:
            out += _cxx_fill(module, module.structs[name]) + [""]
            out += _cxx_to_json(module, module.structs[name]) + [""]
    out += [
        "template <class T, class P> struct Type",
        "{",
        "  using type = T;",
        "  using support = P;",
        "};",
        "",
        '// Calls f(Type<T, TPubSubType>{}) for the type named `name` ("Track"); false if unknown.',
        "template <class F> bool with_type(const std::string& name, F&& f)",
        "{",
    ]
    for name in module.order:
        if name in module.structs:
            out.append(
                f'  if (name == "{name}") {{ f(Type<mcc::{name}, mcc::{name}PubSubType>{{}}); '
                "return true; }"
            )
    out += ["  return false;", "}", "", "}  // namespace mcc_glue", ""]
    return "\n".join(out)


# -- RTI Connector XML -----------------------------------------------------------------------

_RTI_TYPES = {
    "boolean": "boolean",
    "octet": "octet",
    "uint8": "uint8",
    "int8": "int8",
    "short": "int16",
    "int16": "int16",
    "unsigned short": "uint16",
    "uint16": "uint16",
    "long": "int32",
    "int32": "int32",
    "unsigned long": "uint32",
    "uint32": "uint32",
    "long long": "int64",
    "int64": "int64",
    "unsigned long long": "uint64",
    "uint64": "uint64",
    "float": "float32",
    "double": "float64",
    "string": "string",
}


def render_rti_xml(module: IdlModule) -> str:
    """The types of ``module`` as RTI XML (``<types>``, as rtiddsgen -convertToXml writes it),
    wrapped in a ``<dds>`` document that RTI Connector loads."""
    root = ET.Element("dds")
    root.append(ET.Comment(" GENERATED from idl/mcc.idl by mcc types (RTI XML): do not edit "))
    types = ET.SubElement(root, "types")
    mod = ET.SubElement(types, "module", name=module.name)
    for name in module.order:
        if name in module.enums:
            e = ET.SubElement(mod, "enum", name=name)
            for literal in module.enums[name].literals:
                ET.SubElement(e, "enumerator", name=literal)
            continue
        decl = module.structs[name]
        s = ET.SubElement(mod, "struct", name=name, extensibility=decl.extensibility)
        for f in decl.fields:
            attrs: dict[str, str] = {"name": f.name}
            if f.type_name in module.enums or f.type_name in module.structs:
                attrs["type"] = "nonBasic"
                attrs["nonBasicTypeName"] = f"{module.name}::{f.type_name}"
            else:
                attrs["type"] = _RTI_TYPES[f.type_name]
            if f.type_name == "string":
                attrs["stringMaxLength"] = "-1"
            if f.kind == "sequence":
                attrs["sequenceMaxLength"] = "-1"
            elif f.kind == "array":
                attrs["arrayDimensions"] = str(f.length)
            if f.key:
                attrs["key"] = "true"
            ET.SubElement(s, "member", attrs)
    ET.indent(root, space="  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m mcc.types.foreign --fastdds-glue|--rti-xml [OUT]``: write one artefact."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in ("--fastdds-glue", "--rti-xml") or len(args) > 2:
        print("usage: python -m mcc.types.foreign --fastdds-glue|--rti-xml [OUT]", file=sys.stderr)
        return 2
    module = load_module()
    text = render_fastdds_glue(module) if args[0] == "--fastdds-glue" else render_rti_xml(module)
    if len(args) == 2:
        out = Path(args[1])
        if not out.exists() or out.read_text(encoding="utf-8") != text:
            out.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
