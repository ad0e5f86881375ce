"""Generate the Python topic types from ``idl/mcc.idl``.

Cyclone's ``idlc`` (the one the bus runs on, ``make`` builds it) reads the IDL with the Python
back end of the cyclonedds wheel (``idlc -l py``); its output is read back with Python's
parser (``read_module``: enums, structs, @key, extensibility, scalars, strings, sequences,
arrays) and written again as the same dataclasses with two deliberate differences: every field
has a default, so samples can be built with keywords only, and ``sequence<octet>`` becomes
``bytes`` (the one-block fast path). ``read_module`` also reads the module written here, which
is how ``mcc.types.foreign`` learns the types without ``idlc``.

Run ``python -m mcc.types.generate`` (``make types``) after editing the IDL;
``tests/types/test_idl.py`` fails while the generated module is stale and proves, with the
XTypes type hashes computed by the C ``idlc``, that both describe the same types.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tempfile
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


def idlc_python(idl_path: Path = IDL_PATH) -> str:
    """What Cyclone's ``idlc`` writes for ``idl_path`` with the Python back end of the
    cyclonedds wheel (``idlc -l py``): MCC reads IDL through Cyclone's own front end only."""
    from cyclonedds.__idlc__ import idlpy_path

    from mcc import cyclone_tool

    idlc = cyclone_tool("idlc")
    with tempfile.TemporaryDirectory(prefix="mcc-idlc-") as out:
        try:
            proc = subprocess.run(  # the Python back end writes into the working folder
                [str(idlc), "-l", str(idlpy_path), str(Path(idl_path).resolve())],
                cwd=out,
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise IdlError(f"{idl_path}: cannot run {idlc} (build Cyclone: `make`): {exc}") from exc
        if proc.returncode != 0:
            said = (proc.stderr + proc.stdout).strip() or f"exit {proc.returncode}"
            raise IdlError(f"{idl_path}: idlc: {said}")
        written = sorted(Path(out).glob("*/_[!_]*.py"))
        if len(written) != 1:
            raise IdlError(f"{idl_path}: one module expected, idlc wrote {len(written)}")
        return written[0].read_text()


# The Python types of idlc's back end (and of the module written here) → an IDL name that
# PRIMITIVES knows; synonyms (``long``, ``int32``) render alike.
_SCALAR_NAMES = {python: name for name, (python, _) in PRIMITIVES.items()} | {"types.byte": "octet"}


def read_module(python: str, *, source: str = "idl/mcc.idl") -> IdlModule:
    """The enums and structs of a module in the shape ``idlc -l py`` writes (idlc's own
    output, or the module this file writes from it), read with Python's parser."""
    tree = ast.parse(python)
    module: IdlModule | None = None
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        typename = next((k.value for k in node.keywords if k.arg == "typename"), None)
        if not isinstance(typename, ast.Constant) or "." not in str(typename.value):
            raise IdlError(f"{source}: {node.name}: no module-scoped typename")
        if module is None:
            module = IdlModule(str(typename.value).rsplit(".", 1)[0])
        base = ast.unparse(node.bases[0]) if node.bases else ""
        if base == "idl.IdlEnum":
            literals = [
                t.id
                for a in node.body
                if isinstance(a, ast.Assign)
                for t in a.targets
                if isinstance(t, ast.Name)
            ]
            module.enums[node.name] = IdlEnumDecl(node.name, literals)
        elif base == "idl.IdlStruct":
            module.structs[node.name] = _struct(node, source)
        else:
            raise IdlError(f"{source}: {node.name}: unsupported declaration ({base or 'no base'})")
        module.order.append(node.name)
    if module is None:
        raise IdlError(f"{source}: no enum or struct")
    return module


def _struct(node: ast.ClassDef, source: str) -> IdlStructDecl:
    kinds = [ast.unparse(d).removeprefix("annotate.") for d in node.decorator_list]
    ext = next((k for k in kinds if k in ("final", "appendable", "mutable")), "appendable")
    keys: set[str] = set()
    members: list[tuple[str, ast.expr]] = []
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            members.append((stmt.target.id, stmt.annotation))
        elif (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and ast.unparse(stmt.value.func) == "annotate.key"
        ):
            keys.update(str(a.value) for a in stmt.value.args if isinstance(a, ast.Constant))
        elif not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            raise IdlError(f"{source}: {node.name}: unsupported member {ast.unparse(stmt)!r}")
    decl = IdlStructDecl(node.name, ext)
    for name, annotation in members:
        where = f"{source}: {node.name}.{name}"
        if isinstance(annotation, ast.Subscript):
            outer, inner = ast.unparse(annotation.value), annotation.slice
            if outer == "types.sequence":
                elem = _type(inner, where)
                decl.fields.append(IdlField(name, elem, "sequence", key=name in keys))
                continue
            if (
                outer == "types.array"
                and isinstance(inner, ast.Tuple)
                and len(inner.elts) == 2
                and isinstance(length := inner.elts[1], ast.Constant)
                and isinstance(length.value, int)
            ):
                elem = _type(inner.elts[0], where)
                decl.fields.append(IdlField(name, elem, "array", length.value, name in keys))
                continue
            raise IdlError(f"{where}: unsupported type {ast.unparse(annotation)!r}")
        if ast.unparse(annotation) == "bytes":  # sequence<octet>, as this file writes it
            decl.fields.append(IdlField(name, "octet", "sequence", key=name in keys))
            continue
        decl.fields.append(IdlField(name, _type(annotation, where), "plain", key=name in keys))
    return decl


def _type(annotation: ast.expr, where: str) -> str:
    """An element or member type: a scalar's IDL name, or an enum's or struct's name."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.rsplit(".", 1)[-1]  # 'mcc.Track' (idlc) or 'Track' (ours)
    text = ast.unparse(annotation)
    if text not in _SCALAR_NAMES:
        raise IdlError(f"{where}: unsupported type {text!r}")
    return _SCALAR_NAMES[text]


def idlc_module(idl_path: Path = IDL_PATH) -> IdlModule:
    """``idl_path`` as Cyclone's idlc reads it."""
    return read_module(idlc_python(idl_path), source=str(idl_path))


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
    """The module ``_mcc.py`` for ``idl_path``: its declarations as idlc reads them, its
    packed arrays from the IDL's comments (which idlc does not keep)."""
    text = idl_path.read_text()
    return render_python(
        idlc_module(idl_path),
        parse_packed_arrays(text),
        optional=parse_packed_arrays(text, optional=True),
    )


def main() -> int:
    try:
        text = generate()
    except IdlError as exc:  # idlc's file:line message, not a traceback
        print(f"mcc.types.generate: error: {exc}", file=sys.stderr)
        return 2
    OUTPUT_PATH.write_text(text)
    print(f"wrote {OUTPUT_PATH} from {IDL_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
