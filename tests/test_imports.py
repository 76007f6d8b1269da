"""The pipeline's module graph goes one way. Every import between pipeline modules counts, at
module level or inside a function: no cycle, and no import running up the layers:

0. ``errors``, ``root``, ``timing_policy``: what everything may use;
1. the toolkit no model owns: ``registry``, ``timing``, ``results``, ``headline``, ``gpu/*``, ``data/*``;
2. the harness: ``config`` (the core schemas and checks: it knows a model only through its
   registry and its validator), ``context``, ``bench``, ``train``;
3. the models: ``models/base`` and ``models/<m>/*``; a model imports another model's package only
   where :data:`MODEL_USES` says why;
4. the drivers: ``models`` (which registers every model), ``runner``, ``tracking``, ``app``, ...
"""
from __future__ import annotations

import ast
import functools
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


def _all_imports(body):
    """Every import statement of a module, wherever it sits."""
    for node in body:
        for sub in ast.walk(node):
            if isinstance(sub, (ast.Import, ast.ImportFrom)):
                yield sub


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


def _graph(mods: Dict[str, Path], walk=_all_imports) -> Dict[str, Set[str]]:
    graph: Dict[str, Set[str]] = {}
    for name, f in mods.items():
        is_pkg = f.name == "__init__.py"
        edges: Set[str] = set()
        for node in walk(ast.parse(f.read_text()).body):
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


@functools.lru_cache(maxsize=None)
def _full_graph() -> Dict[str, Set[str]]:
    return _graph(_modules())


LAYER0 = {"pipeline.errors", "pipeline.root", "pipeline.timing_policy"}
LAYER1 = {"pipeline.registry", "pipeline.timing", "pipeline.results", "pipeline.headline"}
LAYER2 = {"pipeline.config", "pipeline.config.xc", "pipeline.context", "pipeline.bench", "pipeline.train"}
# a model package that builds on another's code: (user, used) -> why
MODEL_USES = {
    ("bcm_cnn", "bcm"): "the network's BCM layers are model=bcm's kernels and reference",
    ("slide", "argueta"): "the output layer's top-k is the softmax + top-N kernel",
}


def layer(mod: str) -> int:
    if mod in LAYER0:
        return 0
    if mod in LAYER1 or mod.startswith(("pipeline.gpu", "pipeline.data")):
        return 1
    if mod in LAYER2:
        return 2
    if mod.startswith("pipeline.models."):
        return 3
    return 4


def _model_of(mod: str) -> str:
    parts = mod.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["pipeline", "models"] and parts[2] != "base" else ""


def test_graph_sees_the_imports():
    """The walker finds what it should (so that the checks below can fail)."""
    g = _graph(_modules())
    assert "pipeline.timing" in g["pipeline.bench"] and "pipeline.errors" in g["pipeline.config"]
    assert "pipeline.gpu.timer" in g["pipeline.timing"]                     # inside a function
    assert "pipeline.gpu.timer" not in _graph(_modules(), _module_level)["pipeline.timing"]
    assert "pipeline.models.bcm.variants" in g["pipeline.models.bcm_cnn.variants"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    assert layer("pipeline.config") == 2 and layer("pipeline.models.bcm.model") == 3 and layer("pipeline.runner") == 4
    assert _model_of("pipeline.models.bcm_cnn.net") == "bcm_cnn" and _model_of("pipeline.models.base") == ""


def test_no_import_cycle_between_pipeline_modules():
    cycle = _cycle(_full_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_imports_go_down_the_layers():
    g = _full_graph()
    up = [f"{a} (layer {layer(a)}) -> {b} (layer {layer(b)})" for a in sorted(g) for b in sorted(g[a])
          if layer(b) > layer(a)]
    assert not up, "imports running up the layers: " + "; ".join(up)


def test_a_model_uses_another_only_where_declared():
    g = _full_graph()
    bad = [f"{a} -> {b}" for a in sorted(g) for b in sorted(g[a])
           if _model_of(a) and _model_of(b) and _model_of(a) != _model_of(b)
           and (_model_of(a), _model_of(b)) not in MODEL_USES]
    assert not bad, "a model importing another model's code (declare it in MODEL_USES, or move the " \
                    "shared code down a layer): " + "; ".join(bad)


def test_variant_registries_are_leaves():
    """A model's variants.py (read by the config checks, --help and the model) imports only the
    registry and other registries, so the checks never pull in kernels, CuPy or a model's classes."""
    g = _full_graph()
    for mod in sorted(m for m in g if m.endswith(".variants")):
        bad = [b for b in g[mod] if b != "pipeline.registry" and not b.endswith(".variants")]
        assert not bad, f"{mod} imports {bad}"
