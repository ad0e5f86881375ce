"""Where a value sits in a YAML file, so a validation error can say ``file:line: a.b[2]``.

Shared by the mission manifest and the scenario loaders: compose the YAML once, index every
path to its line, and print pydantic error locations as YAML paths.
"""

from __future__ import annotations

from typing import Any

import yaml


def line_index(node: Any) -> dict[tuple[Any, ...], int]:
    """YAML path → 1-based line, from ``yaml.compose`` (a key's line for a mapping value)."""
    index: dict[tuple[Any, ...], int] = {}

    def walk(n: Any, path: tuple[Any, ...]) -> None:
        index.setdefault(path, n.start_mark.line + 1)
        if isinstance(n, yaml.MappingNode):
            for key, value in n.value:
                index[(*path, key.value)] = key.start_mark.line + 1
                walk(value, (*path, key.value))
        elif isinstance(n, yaml.SequenceNode):
            for i, item in enumerate(n.value):
                walk(item, (*path, i))

    if node is not None:
        walk(node, ())
    return index


def nearest_line(lines: dict[tuple[Any, ...], int], loc: tuple[Any, ...]) -> int | None:
    """The line of ``loc``, or of its closest ancestor present in the file."""
    for end in range(len(loc), -1, -1):
        line = lines.get(tuple(loc[:end]))
        if line is not None:
            return line
    return None


def yaml_path(loc: tuple[Any, ...]) -> str:
    """``("systems", "radar", "after", 0)`` → ``systems.radar.after[0]``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def lookup(data: Any, loc: tuple[Any, ...], default: Any = None) -> Any:
    """The value at ``loc`` as written in the file (``default`` if it is not there)."""
    for part in loc:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return default
    return data


#: Bounds on a YAML document: its size, and how many values it holds once its aliases are
#: expanded (an alias bomb, "billion laughs", expands a few lines into billions of values).
MAX_BYTES = 1 << 20
MAX_VALUES = 100_000


def _check_graph(node: Any, *, source: str, error: type[Exception]) -> None:
    """Refuse duplicate keys and documents whose aliases expand past ``MAX_VALUES``; counts
    each node once per path (as loading expands it), stopping at the bound."""
    count = 0
    stack = [node] if node is not None else []
    while stack:
        n = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise error(
                f"{source}: the document expands to more than {MAX_VALUES} values through "
                "its aliases (&anchor/*alias): refused; write the values out"
            )
        if isinstance(n, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key, value in n.value:
                if isinstance(key, yaml.ScalarNode):
                    line = key.start_mark.line + 1
                    if key.value in seen and key.value != "<<":
                        raise error(
                            f"{source}:{line}: {key.value}: duplicate key, first at line "
                            f"{seen[key.value]} (got a second {key.value!r})"
                        )
                    seen[key.value] = line
                stack.append(key)
                stack.append(value)
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)


def parse_mapping(
    text: str, *, source: str, error: type[Exception], expected: str
) -> tuple[dict[Any, Any], dict[tuple[Any, ...], int]]:
    """Parse YAML ``text`` that must be a mapping; the data and its line index.

    Raises ``error`` with ``source:line: not valid YAML: …``, ``source:line: key: duplicate
    key …``, ``source: … aliases …`` (a document that would expand past ``MAX_VALUES``, or is
    larger than ``MAX_BYTES``), or ``source: <expected>`` when the document is not a mapping.
    """
    if len(text) > MAX_BYTES:
        raise error(f"{source}: {len(text)} bytes, more than {MAX_BYTES}: not a manifest")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        _check_graph(node, source=source, error=error)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise error(f"{where}: not valid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise error(f"{source}: {expected}")
    return data, line_index(node)
