"""Generate the Python topic types from ``idl/mcc.idl``.

The cyclonedds wheel ships the Python IDL back end but not the ``idlc`` front end, so MCC
parses the IDL subset it uses (modules, enums, structs, @key, @final/@appendable/@mutable,
primitives, strings, sequences, arrays) and writes the same dataclasses ``idlc -l py`` would,
with one deliberate difference: every field has a default, so samples can be built with
keywords only. ``sequence<octet>`` becomes ``bytes`` (the one-block fast path).

Run ``python -m mcc.types.generate`` (``make types``) after editing the IDL;
``tests/types/test_idl.py`` fails while the generated module is stale and proves, with the
XTypes type hashes computed by the C ``idlc``, that both describe the same types.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mcc.errors import IdlError
from mcc.resources import idl_file

IDL_PATH = idl_file()
OUTPUT_PATH = Path(__file__).resolve().parent / "_mcc.py"

PRIMITIVES = {
    "boolean": ("bool", "False"),
    "octet": ("types.uint8", "0"),
    "char": ("types.char", "'\\x00'"),
    "int8": ("types.int8", "0"),
    "uint8": ("types.uint8", "0"),
    "short": ("types.int16", "0"),
    "int16": ("types.int16", "0"),
    "unsigned short": ("types.uint16", "0"),
    "uint16": ("types.uint16", "0"),
    "long": ("types.int32", "0"),
    "int32": ("types.int32", "0"),
    "unsigned long": ("types.uint32", "0"),
    "uint32": ("types.uint32", "0"),
    "long long": ("types.int64", "0"),
    "int64": ("types.int64", "0"),
    "unsigned long long": ("types.uint64", "0"),
    "uint64": ("types.uint64", "0"),
    "float": ("types.float32", "0.0"),
    "double": ("types.float64", "0.0"),
    "string": ("str", "''"),
}


@dataclass(frozen=True)
class IdlField:
    """One struct member as declared in the IDL."""

    name: str
    type_name: str  # element type for sequences and arrays
    kind: str  # "plain" | "sequence" | "array"
    length: int = 0  # array length
    key: bool = False


@dataclass
class IdlStructDecl:
    name: str
    extensibility: str
    fields: list[IdlField] = field(default_factory=list)

    @property
    def keys(self) -> list[str]:
        return [f.name for f in self.fields if f.key]


@dataclass
class IdlEnumDecl:
    name: str
    literals: list[str]


@dataclass
class IdlModule:
    """The parsed IDL: one module of enums and structs, in declaration order."""

    name: str
    enums: dict[str, IdlEnumDecl] = field(default_factory=dict)
    structs: dict[str, IdlStructDecl] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)


_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_TOKENS = re.compile(r"@\w+|[A-Za-z_]\w*|\d+|[{}<>\[\];,]")


def parse_idl(text: str, *, source: str = "idl/mcc.idl") -> IdlModule:
    """Parse the IDL subset MCC uses; raise IdlError naming the file and token on anything else."""
    tokens = _TOKENS.findall(_COMMENTS.sub(" ", text))
    pos = 0

    def peek(offset: int = 0) -> str:
        return tokens[pos + offset] if pos + offset < len(tokens) else ""

    def take(expected: str | None = None) -> str:
        nonlocal pos
        tok = peek()
        if not tok or (expected is not None and tok != expected):
            raise IdlError(
                f"{source}: expected {expected or 'a token'!r}, found {tok or 'end of file'!r}"
            )
        pos += 1
        return tok

    take("module")
    module = IdlModule(take())
    take("{")
    while peek() != "}":
        annotations = []
        while peek().startswith("@"):
            annotations.append(take()[1:])
        kind = take()
        if kind == "enum":
            name = take()
            take("{")
            literals = [take()]
            while peek() == ",":
                take(",")
                literals.append(take())
            take("}")
            take(";")
            module.enums[name] = IdlEnumDecl(name, literals)
        elif kind == "struct":
            name = take()
            ext = next(
                (a for a in annotations if a in ("final", "appendable", "mutable")), "appendable"
            )
            decl = IdlStructDecl(name, ext)
            take("{")
            while peek() != "}":
                is_key = False
                while peek().startswith("@"):
                    ann = take()
                    if ann != "@key":
                        raise IdlError(
                            f"{source}: struct {name}: unsupported member annotation {ann}"
                        )
                    is_key = True
                if peek() == "sequence":
                    take("sequence")
                    take("<")
                    elem = _type_name(take, peek)
                    take(">")
                    fname = take()
                    decl.fields.append(IdlField(fname, elem, "sequence", key=is_key))
                else:
                    tname = _type_name(take, peek)
                    fname = take()
                    if peek() == "[":
                        take("[")
                        length = int(take())
                        take("]")
                        decl.fields.append(IdlField(fname, tname, "array", length, is_key))
                    else:
                        decl.fields.append(IdlField(fname, tname, "plain", key=is_key))
                take(";")
            take("}")
            take(";")
            module.structs[name] = decl
        else:
            raise IdlError(
                f"{source}: unsupported declaration {kind!r} (MCC's IDL uses enum and struct)"
            )
        module.order.append(name)
    take("}")
    for decl in module.structs.values():
        for f in decl.fields:
            known = (
                f.type_name in PRIMITIVES
                or f.type_name in module.enums
                or f.type_name in module.structs
            )
            if not known:
                raise IdlError(f"{source}: {decl.name}.{f.name}: unknown type {f.type_name!r}")
    return module


def _type_name(take: Callable[..., str], peek: Callable[..., str]) -> str:
    words = [take()]
    while words[-1] in ("unsigned", "long") and peek() in ("long", "short"):
        words.append(take())
    return " ".join(words)


def _annotation(module: IdlModule, f: IdlField) -> tuple[str, str]:
    """Python annotation and default value expression for one field."""
    if f.kind == "sequence":
        if f.type_name == "octet":
            return "bytes", "b''"
        return f"types.sequence[{_element(module, f.type_name)}]", "field(default_factory=list)"
    if f.kind == "array":
        # an octet is XTypes' TK_BYTE, as idlc types it (types.uint8 would be TK_UINT8: a type
        # the C type's readers and writers do not match)
        elem = "types.byte" if f.type_name == "octet" else _element(module, f.type_name)
        if f.type_name == "octet":  # cyclonedds decodes it to bytes: the default is bytes too
            return (
                f"types.array[{elem}, {f.length}]",
                f"field(default_factory=lambda: bytes({f.length}))",
            )
        default = PRIMITIVES[f.type_name][1] if f.type_name in PRIMITIVES else "None"
        return (
            f"types.array[{elem}, {f.length}]",
            f"field(default_factory=lambda: [{default}] * {f.length})",
        )
    if f.type_name in PRIMITIVES:
        return PRIMITIVES[f.type_name]
    if f.type_name in module.enums:
        first = module.enums[f.type_name].literals[0]
        return f"'{f.type_name}'", f"{f.type_name}.{first}"
    return f"'{f.type_name}'", f"field(default_factory=lambda: {f.type_name}())"


def _element(module: IdlModule, type_name: str) -> str:
    if type_name in PRIMITIVES:
        return PRIMITIVES[type_name][0]
    return f"'{type_name}'"


_STRUCT_LINE = re.compile(r"\bstruct\s+(\w+)")
_PACKED_LINE = re.compile(
    r"sequence<octet>\s+(\w+)\s*;\s*//\s*([<>|]?[a-z]\d+)\[count((?:\s*,\s*\d+)*)\]"
)


_OPTIONAL_NOTE = re.compile(r";\s*empty\s*=")

PackedSpec = dict[str, dict[str, tuple[str, tuple[int, ...]]]]


def parse_packed_arrays(text: str, *, optional: bool = False) -> PackedSpec:
    """Packed array fields: ``{struct: {field: (dtype, trailing shape)}}`` from the IDL comments.

    A field declared ``sequence<octet> x_m;  // <f8[count, 6]`` holds ``count`` rows of 6
    little-endian float64 values. A field whose comment also says ``; empty = …`` (e.g.
    ``// u1[count], IffAnswer values; empty = not interrogated``) is optional: it holds
    ``count`` items or none, so writers that predate it (appended later to an appendable
    struct) still pass. ``optional=False`` returns the required fields, ``True`` the optional.
    """
    packed: PackedSpec = {}
    struct = ""
    for line in text.splitlines():
        if m := _STRUCT_LINE.search(line.split("//")[0]):
            struct = m.group(1)
        if (m := _PACKED_LINE.search(line)) and bool(_OPTIONAL_NOTE.search(line)) == optional:
            dims = tuple(int(d) for d in re.findall(r"\d+", m.group(3)))
            packed.setdefault(struct, {})[m.group(1)] = (m.group(2), dims)
    return packed


def _render_packed(out: list[str], name: str, packed: PackedSpec) -> None:
    out.append(f"{name}: dict[str, dict[str, tuple[str, tuple[int, ...]]]] = {{")
    for struct, fields in packed.items():
        out.append(f"    {struct!r}: {{")
        out.extend(f"        {field!r}: {spec!r}," for field, spec in fields.items())
        out.append("    },")
    out.append("}")


def render_python(
    module: IdlModule,
    packed: PackedSpec | None = None,
    *,
    optional: PackedSpec | None = None,
    source: str = "idl/mcc.idl",
) -> str:
    """The Python module for ``module``, in the shape ``idlc -l py`` writes."""
    out = [
        f'"""Topic types of module `{module.name}`.',
        "",
        f"GENERATED from {source} by `python -m mcc.types.generate`. Do not edit by hand.",
        '"""',
        "",
        "from dataclasses import dataclass, field",
        "",
        "import cyclonedds.idl as idl",
        "import cyclonedds.idl.annotations as annotate",
        "import cyclonedds.idl.types as types",
        "",
    ]
    for name in module.order:
        out.append("")
        if name in module.enums:
            decl_e = module.enums[name]
            out.append(
                f'class {name}(idl.IdlEnum, typename="{module.name}.{name}", '
                f'default_literal="{decl_e.literals[0]}"):'
            )
            out.extend(f"    {lit} = {i}" for i, lit in enumerate(decl_e.literals))
            out.append("")
            continue
        decl = module.structs[name]
        out.append("@dataclass")
        out.append(f"@annotate.{decl.extensibility}")
        out.append('@annotate.autoid("sequential")')
        out.append(f'class {name}(idl.IdlStruct, typename="{module.name}.{name}"):')
        for f in decl.fields:
            ann, default = _annotation(module, f)
            out.append(f"    {f.name}: {ann} = {default}")
            if f.key:
                out.append(f'    annotate.key("{f.name}")')
        out.append("")
    out.append("")
    out.append("# Packed little-endian arrays: {struct: {field: (dtype, shape after count)}}.")
    _render_packed(out, "PACKED_ARRAYS", packed or {})
    out.append("")
    out.append("# Optional packed arrays: `count` items, or none (a writer that predates them).")
    _render_packed(out, "OPTIONAL_ARRAYS", optional or {})
    out.append("")
    exported = ", ".join(f'"{n}"' for n in [*module.order, "PACKED_ARRAYS", "OPTIONAL_ARRAYS"])
    out.append(f"__all__ = [{exported}]")
    return "\n".join(out) + "\n"


def generate(idl_path: Path = IDL_PATH) -> str:
    text = idl_path.read_text()
    return render_python(
        parse_idl(text),
        parse_packed_arrays(text),
        optional=parse_packed_arrays(text, optional=True),
    )


def main() -> int:
    OUTPUT_PATH.write_text(generate())
    print(f"wrote {OUTPUT_PATH} from {IDL_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
