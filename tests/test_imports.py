"""The pipeline's module graph goes one way: no import cycle between pipeline modules (imports at
module level, those that run when a module is imported), and the config layer (pipeline.config)
never pulls in a model's code: of pipeline.models it may reach only the variant registries
(``pipeline/models/<pkg>/variants.py``) and the package ``__init__`` files they sit in."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Optional, Set

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "pipeline"


def _modules() -> Dict[str, Path]:
    out = {}
    for f in PKG.rglob("*.py"):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _module_level(body):
    """Import statements that run at import time: the module's own statements and those nested in
    its if/try/with blocks, not those inside functions or classes, nor under ``if TYPE_CHECKING``."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            test = node.test
            if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" or \
                    isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING":
                yield from _module_level(node.orelse)
                continue
            yield from _module_level(node.body)
            yield from _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *[h.body for h in node.handlers]):
                yield from _module_level(block)
        elif isinstance(node, (ast.With,)):
            yield from _module_level(node.body)


def _graph(mods: Dict[str, Path]) -> Dict[str, Set[str]]:
    graph: Dict[str, Set[str]] = {}
    for name, f in mods.items():
        is_pkg = f.name == "__init__.py"
        edges: Set[str] = set()
        for node in _module_level(ast.parse(f.read_text()).body):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = name.split(".")
                    anchor = anchor[:len(anchor) - node.level + (1 if is_pkg else 0)]
                    base = ".".join(anchor + ([base] if base else []))
                # "from pkg import sub" imports the module pkg.sub; "from mod import name" the module mod
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                while t and t not in mods and "." in t:      # "import pipeline.a.b" -> the module named so
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != name:
                    edges.add(t)
        graph[name] = edges
    return graph


def _cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """One import cycle (a path that returns to its start), or None."""
    state: Dict[str, int] = {}
    stack: List[str] = []

    def visit(n: str) -> Optional[List[str]]:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def _reach(graph: Dict[str, Set[str]], start: str) -> Dict[str, str]:
    """Every module reachable from ``start`` -> the module that imports it on the way."""
    seen = {start: ""}
    todo = [start]
    while todo:
        n = todo.pop()
        for m in graph[n]:
            if m not in seen:
                seen[m] = n
                todo.append(m)
    return seen


def _allowed_from_config(mod: str) -> bool:
    parts = mod.split(".")
    return parts[:2] != ["pipeline", "models"] or len(parts) <= 3 or parts[3:] == ["variants"]


def test_graph_sees_the_imports():
    """The walker finds what it should (so that the two checks below can fail)."""
    g = _graph(_modules())
    assert "pipeline.timing" in g["pipeline.bench"] and "pipeline.errors" in g["pipeline.config"]
    assert "pipeline.models.bcm_cnn.variants" in g["pipeline.config.bcm_cnn"]
    assert "pipeline.gpu.timer" not in g["pipeline.timing"]        # imported inside functions only
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    assert not _allowed_from_config("pipeline.models.bcm.model")
    assert _allowed_from_config("pipeline.models.bcm.variants") and _allowed_from_config("pipeline.models.bcm")


def test_no_import_cycle_between_pipeline_modules():
    cycle = _cycle(_graph(_modules()))
    assert cycle is None, "import cycle at module level: " + " -> ".join(cycle)


def test_config_reaches_no_model_code():
    mods = _modules()
    g = _graph(mods)
    for start in sorted(m for m in mods if m == "pipeline.config" or m.startswith("pipeline.config.")):
        via = _reach(g, start)
        bad = sorted(m for m in via if not _allowed_from_config(m))
        if bad:
            chain = [bad[0]]
            while via[chain[-1]]:
                chain.append(via[chain[-1]])
            raise AssertionError(f"{start} imports model code: {' -> '.join(reversed(chain))}")
