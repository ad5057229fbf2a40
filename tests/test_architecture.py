"""The shape docs/ARCHITECTURE.md draws: arrows point down, no circles, no tests imported."""

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.source_scan import imports_of

PACKAGES = ("trainables", "analysis", "search")
MAY_IMPORT = {  # a part -> the project's parts it may import besides itself
    "trainables": set(),
    "analysis": {"trainables"},
    "search": {"trainables", "analysis"},
    "bench": {"trainables", "analysis", "search"},
}


def module_of(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """The project modules a file imports (anywhere in it, lazily too)."""
    parts = (*PACKAGES, "bench", "tests")
    return {name for name in imports_of(path) if name.split(".")[0] in parts}


def files_of(part: str) -> list[Path]:
    return sorted((REPO / part).rglob("*.py"))


@pytest.mark.parametrize("part", sorted(MAY_IMPORT))
def test_each_part_imports_only_the_parts_below_it_and_never_the_tests(part):
    allowed = MAY_IMPORT[part] | {part}
    wrong = {
        f"{path.relative_to(REPO)} imports {name}"
        for path in files_of(part)
        for name in imported(path)
        if name.split(".")[0] not in allowed
    }
    assert wrong == set()


def module_edges(path: Path, modules: set[str]) -> set[str]:
    """The project modules a file's imports run: `from X import Y` runs the module X.Y where
    there is one, else X. The packages above a module are left out: Python runs them first
    for any of their modules, which is no circle of the code's own."""
    own = module_of(path)
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                targets.add(submodule if submodule in modules else node.module)
    return {t for t in targets if t in modules and t != own and not own.startswith(f"{t}.")}


def test_the_modules_of_the_packages_import_each_other_in_no_circle():
    paths = {module_of(path): path for part in PACKAGES for path in files_of(part)}
    graph = {module: module_edges(path, set(paths)) for module, path in paths.items()}
    state: dict[str, str] = {}

    def visit(module: str, trail: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                raise AssertionError("a circle: " + " -> ".join([*trail, module, target]))
            if target not in state:
                visit(target, [*trail, module])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [])


def test_the_map_names_every_module_of_the_packages():
    """docs/ARCHITECTURE.md is where a newcomer looks a module up: none is left off it."""
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    unnamed = [
        path.relative_to(REPO).as_posix()
        for part in PACKAGES
        for path in files_of(part)
        if path.name != "__init__.py" and f"`{path.relative_to(REPO).as_posix()}`" not in text
    ]
    assert unnamed == []
