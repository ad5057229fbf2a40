"""What a source file imports and calls, read from its syntax tree (never run): how the
shape tests see the code."""

from __future__ import annotations

import ast
from pathlib import Path


def imports_of(path: Path) -> set[str]:
    """The modules a file imports (anywhere in it, lazily too), and for `from X import Y`
    also `X.Y`; relative imports left out."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return found


def attribute_calls(path: Path, module: tuple[str, ...]) -> set[str]:
    """The names used as `<module>.<name>` in a file (`torch.cuda.X`: module torch, cuda)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        chain, inner = [], node.value
        while isinstance(inner, ast.Attribute):
            chain.append(inner.attr)
            inner = inner.value
        if isinstance(inner, ast.Name) and (inner.id, *reversed(chain)) == module:
            names.add(node.attr)
    return names
