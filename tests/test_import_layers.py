"""The import graph of ``verlog`` and ``envs``: no circles, and every import points down the layers of docs/design.md.

The graph is read from the source with ``ast`` (nothing is imported): every ``import x`` and ``from x import y`` at
any depth, inside functions and ``if TYPE_CHECKING:`` blocks too, and ``importlib.import_module("literal")``;
relative imports resolved. Module granularity: ``from pkg import name`` imports the module ``pkg.name`` when there
is one, else ``pkg`` (its ``__init__``). An edge ``B -> A`` means that B imports A somewhere; a lazy import inside a
function is an edge like any other, so a circle cannot hide in one.
"""

from __future__ import annotations

import ast
import itertools
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("verlog", "envs")

# The layers, lowest first (docs/design.md, "Layout"). An import may point to its own layer or a lower one, never up.
# "pkg.*" is a package and everything in it; a plain name is that module alone and wins over a package entry.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("envs", ("envs.*",)),  # the games and their plumbing: nothing from verlog
    (
        "plain",  # no engine, no model, no trainer: what the config's checks may use
        (
            "verlog",
            "verlog.version",
            "verlog.errors",
            "verlog.algorithms.*",  # the estimators' maths and the curriculum (their registry: the config layer)
            "verlog.run.*",
            "verlog.tapes.*",
            "verlog.prompting.*",
            "verlog.models",
            "verlog.console",
            "verlog.models.folder",
            "verlog.models.vision",
            "verlog.eval.protocol",
            "verlog.eval.training",
        ),
    ),
    # the typed training config and its checks: envs and plain modules only; the estimators' and the async modes'
    # registries (each entry declares its config checks, which the checks ask it for): algorithms/estimators.py
    # sits in the folder of the maths it registers, config/async_modes.py beside the checks
    ("config", ("verlog.config.*", "verlog.algorithms.estimators")),
    (
        "library",  # rollout, evaluation, demos, SFT, viewer, the CPU platform: never the config or the trainer
        (
            "verlog.rollout.*",
            "verlog.eval.*",
            "verlog.platform.*",
            "verlog.sft.*",
            "verlog.viewer.*",
            "verlog.models.*",  # the tiny models' builders
        ),
    ),
    # the recipes' results pages (docs/results/): read run folders, evaluations and the library's statistics
    ("reports", ("verlog.reports.*",)),
    ("trainer", ("verlog.trainer.*",)),  # everything that touches verl's PPO trainer
    # hyperparameter sweeps: verlog train's checks (and its dry-run report) before Ray Tune runs it as subprocesses
    ("sweep", ("verlog.sweep.*",)),
    ("commands", ("verlog.commands.*",)),  # argument parsing of each subcommand; may import anything below
    ("entry points", ("verlog.cli", "verlog.train", "verlog.__main__")),  # the only importers of verlog.commands
)

VERL_IMPORTERS = ("verlog.trainer.*", "verlog.platform.*")
"""Where ``import verl`` may appear."""
VERL_EXCEPTIONS = {
    # verlog.sft runs verl's SFT trainer as its own process (`python -m verlog.sft`, launched by verlog/sft/launch.py)
    # and hands it a dataset class by name (verlog.sft.data.LastTurnSFTDataset, docs/sft.md): moving them under
    # verlog/trainer would rename the entry point and the class path the SFT config and recipes name. Both import
    # verl only inside functions.
    "verlog.sft.__main__",
    "verlog.sft.data",
}


@dataclass
class Graph:
    modules: dict[str, Path]
    edges: dict[str, dict[str, int]] = field(default_factory=dict)
    """importer -> {imported module: first line}"""
    external: dict[str, dict[str, int]] = field(default_factory=dict)
    """importer -> {top-level name of a package outside the graph: first line}"""


def module_files(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def build_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> Graph:
    graph = Graph(module_files(root, packages))
    for name, path in graph.modules.items():
        graph.edges[name], graph.external[name] = {}, {}
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            for target in _imported(node, package):
                _add(graph, name, target, node.lineno)
    return graph


def _imported(node: ast.AST, package: str) -> list[str]:
    """Dotted names ``node`` imports: a module, or ``module.name`` for ``from module import name``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1])
            module = f"{base}.{node.module}" if node.module else base
        else:
            module = node.module or ""
        return [f"{module}.{alias.name}" for alias in node.names if alias.name != "*"] or [module]
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
            return [node.args[0].value]
    return []


def _add(graph: Graph, importer: str, dotted: str, line: int) -> None:
    target = dotted
    while target and target not in graph.modules:
        target = target.rpartition(".")[0]
    into, key = (graph.edges[importer], target) if target else (graph.external[importer], dotted.split(".")[0])
    if key != importer:
        into[key] = min(line, into.get(key, line))


def cycles(graph: Graph) -> list[list[str]]:
    """One circle through each strongly connected group of modules (Tarjan), each as [a, b, ..., a]."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph.edges):
        if v not in index:
            visit(v)
    return [_circle(graph, group) for group in groups]


def _circle(graph: Graph, group: list[str]) -> list[str]:
    """The shortest path from the group's first module back to it, inside the group."""
    start, members = group[0], set(group)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph.edges[v]):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if w in members and w not in came_from:
                came_from[w] = v
                queue.append(w)
    raise AssertionError(f"no circle found in the group {group}")


def strongly_connected(graph: Graph, module: str) -> set[str]:
    """The modules that ``module`` reaches and that reach it back."""

    def reach(start: str, edges: dict[str, set[str]]) -> set[str]:
        seen, todo = {start}, [start]
        while todo:
            for w in edges[todo.pop()]:
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
        return seen

    forward = {v: set(ts) for v, ts in graph.edges.items()}
    backward: dict[str, set[str]] = {v: set() for v in graph.edges}
    for v, ts in graph.edges.items():
        for w in ts:
            backward[w].add(v)
    return reach(module, forward) & reach(module, backward)


def describe(graph: Graph, circle: list[str]) -> str:
    steps = [f"{a} (line {graph.edges[a][b]}) -> " for a, b in itertools.pairwise(circle)]
    return "".join(steps) + circle[-1]


def _matches(module: str, entry: str) -> bool:
    if entry.endswith(".*"):
        package = entry[:-2]
        return module == package or module.startswith(package + ".")
    return module == entry


def layer_of(module: str) -> int | None:
    exact = [i for i, (_, entries) in enumerate(LAYERS) if module in entries]
    if exact:
        return exact[0]
    best: tuple[int, int] | None = None  # (length of the package prefix, layer)
    for i, (_, entries) in enumerate(LAYERS):
        for entry in entries:
            if entry.endswith(".*") and _matches(module, entry) and (best is None or len(entry) > best[0]):
                best = (len(entry), i)
    return None if best is None else best[1]


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph()


def test_no_import_circles(graph):
    found = []
    for circle in cycles(graph):
        group = strongly_connected(graph, circle[0])
        more = sorted(group - set(circle))
        found.append(describe(graph, circle) + (f" (and, in a circle with them: {', '.join(more)})" if more else ""))
    assert not found, "import circles (B -> A: B imports A; lazy imports count):\n" + "\n".join(found)


def test_every_module_has_a_layer(graph):
    unplaced = sorted(m for m in graph.modules if layer_of(m) is None)
    assert not unplaced, f"place these modules in LAYERS here and in docs/design.md's layer list: {unplaced}"


def test_imports_point_down_the_layers(graph):
    """envs imports nothing of verlog; verlog.config only envs and the plain modules; nothing but the entry points
    imports verlog.commands; the rest as LAYERS orders it."""
    wrong = []
    for importer, targets in sorted(graph.edges.items()):
        here = layer_of(importer)
        for target, line in sorted(targets.items()):
            there = layer_of(target)
            if here is not None and there is not None and there > here:
                wrong.append(
                    f"{importer} (line {line}, layer {LAYERS[here][0]}) imports {target} (layer {LAYERS[there][0]})"
                )
    assert not wrong, "imports that point up the layers (tests/test_import_layers.py LAYERS):\n" + "\n".join(wrong)


def test_only_the_trainer_and_the_platform_import_verl(graph):
    importers = {m for m, names in graph.external.items() if "verl" in names}
    assert importers, "no module imports verl: the graph misses imports"
    outside = {m for m in importers if not any(_matches(m, entry) for entry in VERL_IMPORTERS)}
    new = sorted(outside - VERL_EXCEPTIONS)
    assert not new, f"verl is imported outside verlog/trainer and verlog/platform: {new}"
    stale = sorted(VERL_EXCEPTIONS - outside)
    assert not stale, f"VERL_EXCEPTIONS lists modules that no longer import verl (remove them): {stale}"


def test_the_graph_sees_lazy_relative_and_literal_imports(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("from . import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..c import g\n")
    (pkg / "c.py").write_text(
        "import importlib\nimport verl.x as v\nif False:\n    from .a import x\n"
        "def g():\n    importlib.import_module('pkg.sub.b')\n"
    )
    g = build_graph(tmp_path, ("pkg",))
    assert g.edges["pkg.a"] == {"pkg.sub.b": 1}
    assert g.edges["pkg.sub"] == {"pkg.sub.b": 1}
    assert g.edges["pkg.sub.b"] == {"pkg.c": 2}
    assert g.edges["pkg.c"] == {"pkg.a": 4, "pkg.sub.b": 6}
    assert g.external["pkg.c"] == {"importlib": 1, "verl": 2}
    (circle,) = cycles(g)
    assert circle[0] == circle[-1] and set(circle) == {"pkg.a", "pkg.sub.b", "pkg.c"}
    assert describe(g, circle) == "pkg.a (line 1) -> pkg.sub.b (line 2) -> pkg.c (line 4) -> pkg.a"
