"""The import graph of `src/mcc` keeps the layer order of docs/architecture.md ("Layers"), and
each package's public names stay what they are.

An import of a package in a higher layer, or of another package in the same layer, fails here;
so does a cycle between packages. Imports inside functions count: a lazy import is still a
dependency.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "mcc"

# Bottom to top; a package imports only packages of lower layers. "mcc" is mcc/__init__.py.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(layer.split())
    for layer in (
        "errors files lifecycle",
        "settings waiting",
        "mcc resources yamlsource _entry netlab lab",
        "types",
        "bus",
        "security",
        "observe",
        "orchestrate",
        "compute persist hpc observer asterix",
        "tracking",
        "apps",
        "console",
        "demo bench",
        "cli",
        "extras",
    )
)

# (importing module, imported package): the edges against the order that remain, each with the
# change that removes it. A new one fails the test.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "mcc"


def _imports(path: Path, *, typing: bool = True) -> set[str]:
    """What ``path`` imports of mcc; ``typing=False`` leaves out the ``if TYPE_CHECKING:``
    blocks (names for annotations, never imported when the code runs)."""
    module = _module_name(path)
    base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {
        id(sub)
        for node in ast.walk(tree)
        if not typing and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for sub in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                target = ".".join(base[: len(base) - node.level + 1] + [node.module or ""])
            else:
                target = node.module or ""
            found.add(target.rstrip("."))
            found.update(f"{target}.{a.name}" for a in node.names)
    return {name for name in found if name == "mcc" or name.startswith("mcc.")}


def _module_graph(*, typing: bool = True) -> dict[str, set[str]]:
    files = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        targets = set()
        for name in _imports(path, typing=typing):
            while name not in files and "." in name:
                name = name.rsplit(".", 1)[0]
            if name in files and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def _layer(package: str) -> int:
    for index, layer in enumerate(LAYERS):
        if package in layer:
            return index
    raise AssertionError(f"package mcc.{package} has no layer: add it to LAYERS and the doc")


def test_every_import_goes_down_the_layers() -> None:
    wrong = []
    for module, targets in sorted(_module_graph().items()):
        here = _package(module)
        for target in sorted(targets):
            there = _package(target)
            if there == here or (module, there) in KNOWN_UPWARD:
                continue
            if _layer(there) >= _layer(here):
                wrong.append(f"{module} imports {target}")
    assert not wrong, "imports against the layer order (docs/architecture.md):\n" + "\n".join(wrong)


def test_known_upward_imports_still_exist() -> None:
    graph = _module_graph()
    stale = [
        edge
        for edge in KNOWN_UPWARD
        if not any(_package(t) == edge[1] for t in graph.get(edge[0], ()))
    ]
    assert not stale, f"fixed, remove from KNOWN_UPWARD: {stale}"


def test_no_cycle_between_packages() -> None:
    packages: dict[str, set[str]] = defaultdict(set)
    for module, targets in _module_graph().items():
        here = _package(module)
        packages[here].update(
            _package(t)
            for t in targets
            if _package(t) != here and (module, _package(t)) not in KNOWN_UPWARD
        )

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                todo.extend(packages.get(node, ()))
        return False

    cycles = sorted(
        f"{a} -> {b} -> ... -> {a}" for a in packages for b in packages[a] if reaches(b, a)
    )
    assert not cycles, "\n".join(cycles)


def test_no_import_cycle_between_modules() -> None:
    """No module imports, directly or not, one that imports it back, when the code runs
    (imports inside functions count; type-only ones do not, nor a module's import of its own
    package, whose ``__init__`` gathers its modules)."""
    graph = {
        module: {t for t in targets if not module.startswith(t + ".")}
        for module, targets in _module_graph(typing=False).items()
    }

    def path_back(start: str, goal: str) -> list[str] | None:
        seen, todo = {start}, [[start]]
        while todo:
            trail = todo.pop()
            for nxt in sorted(graph.get(trail[-1], ())):
                if nxt == goal:
                    return [*trail, nxt]
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append([*trail, nxt])
        return None

    cycles = sorted(
        {" -> ".join([a, *trail]) for a in graph for b in graph[a] if (trail := path_back(b, a))}
    )
    assert not cycles, "import cycles between modules:\n" + "\n".join(cycles[:20])


def test_nothing_imports_the_command_line() -> None:
    users = sorted(
        m for m, targets in _module_graph().items() if "mcc.cli" in targets and m != "mcc.extras"
    )
    assert users == [], "import mcc._entry.main_for instead of mcc.cli"


def test_layers_are_the_documented_ones() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = doc.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if re.match(r"\s*\d+\. ", line)]
    documented = [frozenset(re.findall(r"`(\w+)`", row.split(" — ")[0])) for row in rows]
    assert documented == list(reversed(LAYERS))


PUBLIC = {
    "mcc.bus": "Bus BusStatistics DurableWriter HeartbeatPublisher HistoryReader HistoryStatus "
    "Linger QosEvent QosLibrary Reader ReaderLoop Replier Requester StoreError TOPICS TopicSpec "
    "Transport Writer default_library open_bus topic_spec validate_sample",
    "mcc.orchestrate": "AppContext AppSpec Cluster Identity LocalBackend Mission Node Placement "
    "Planner Supervisor System app load_app load_manifest open_mission parse_manifest",
    "mcc.persist": "Action Authorize DefaultPolicy PersistLimits PersistService Principal "
    "ServiceStatistics Store StoreError StoreReport TopicPolicy inspect_store open_service",
    "mcc.security": "Grant Identity Keystore MAX_SECURE_DOMAIN SecurityError governance_xml "
    "permissions_xml",
    "mcc.settings": "External PREFIX Settings SettingsError child_env current env_name environ "
    "external markdown_table",
}


def test_public_names_are_pinned() -> None:
    for package, names in PUBLIC.items():
        module = importlib.import_module(package)
        assert sorted(module.__all__) == sorted(names.split()), package
        missing = [n for n in module.__all__ if not hasattr(module, n)]
        assert not missing, f"{package}.__all__ names {missing}, which it does not define"


def test_the_code_map_names_every_package_and_the_index_every_page() -> None:
    """docs/README.md is where a newcomer starts: its code map lists every package and module of
    ``src/mcc`` in the layer order of `LAYERS`, its index links every page of docs/."""
    text = (ROOT / "docs" / "README.md").read_text()
    map_rows = text.split("## Code map", 1)[1].splitlines()
    cells = [row.split("|")[2] for row in map_rows if row.startswith("| ") and "`" in row]
    named = [re.findall(r"`(\w+)`", cell) for cell in cells]
    order = [_layer(name) for names in named for name in names]
    assert order == sorted(order), f"the code map's rows are not in the layer order: {named}"
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in SRC.glob("*.py") if p.stem != "__init__"}
    missing = sorted((packages | modules) - {n for names in named for n in names})
    assert not missing, f"docs/README.md's code map does not name: {missing}"
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    unlinked = sorted(p for p in pages if f"]({p}" not in text)
    assert not unlinked, f"docs/README.md does not link: {unlinked}"
