"""The shape of the package: no import cycle, imports flow one way, no oversized file.

Every ``import structqa...`` and ``from structqa... import ...`` counts, wherever it stands:
at module level, inside a function, under ``if TYPE_CHECKING``. A function-level import is still
a dependency (it runs on the first call), so a cycle or an upward import hidden in a function is
as much a knot as one at the top of a file. The rules are the ones docs/architecture.md draws.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "structqa"
MAX_LINES = 600

# The flow, bottom to top: a top-level package (or module) of structqa may import only those in
# a LOWER layer, never one in its own layer or above. Keep in step with docs/architecture.md.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("io", "paths"),  # atomic files; where data, models and the machine's measurements live
    ("runtime", "cpu", "metrics", "attention"),  # devices and bf16; pure functions
    ("data", "text", "provenance", "manifest"),  # readers; annotation; provenance; file hashes
    ("features", "encoders", "scoring"),  # tokens and windows; the BERT encoder; scoring files
    ("config", "heads"),  # the validated recipe; span and answer heads
    ("models", "decoding"),  # encoder + head per task; logits -> answers
    ("runtimes",),  # ways a trained model runs a collated batch (torch, ONNX)
    ("inference",),  # batched prediction over features
    ("evaluation",),  # predictions -> metrics
    ("training",),  # the training scaffold shared by the tasks
    ("pretrain", "ncbert", "calibration"),  # MLM and DROP tasks; answer probabilities
    ("analysis", "experiments", "prediction"),  # reports; grids of runs; the answer path
    ("documents", "reader"),  # document collections; the general reader build
    ("serving",),  # the HTTP service (its page shows analysis' maps)
    ("commands",),  # the larger subcommands (quickstart, evaluate, config)
    ("cli",),  # the `structqa` command
    ("__main__",),
)
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str:
    """The module a dotted name lives in (``structqa.a.b.func`` -> ``structqa.a.b``)."""
    while name not in MODULES:
        name, _, _ = name.rpartition(".")
        assert name, "an import of structqa names no module of it"
    return name


def _imports(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """(imported structqa module, line) for every import statement in ``path``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "structqa":
                    yield _resolve(alias.name), node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x / from ..a import b
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            if base.split(".")[0] != "structqa":
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield (full if full in MODULES else _resolve(base)), node.lineno


GRAPH: dict[str, dict[str, int]] = {
    module: {dep: line for dep, line in _imports(module, path) if dep != module}
    for module, path in MODULES.items()
}


def _top(module: str) -> str:
    """The top-level package or module of structqa a module belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each as a loop
    of imports found inside it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(_loop(graph, set(component)))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def _loop(graph: dict[str, dict[str, int]], component: set[str]) -> list[str]:
    """One import loop through a strongly connected component, for the error message."""
    start = min(component)
    path, seen, v = [start], {start}, start
    while True:
        v = min(w for w in graph[v] if w in component)
        path.append(v)
        if v in seen:
            return path[path.index(v) :]
        seen.add(v)


def test_the_walk_sees_the_package() -> None:
    # guards the walk itself: a broken resolver would find no edges and pass everything
    assert "structqa.commands.experiment" in MODULES
    assert "structqa.experiments.runner" in GRAPH["structqa.commands.experiment"]
    assert "structqa.encoders.bert" in GRAPH["structqa.models.build"]
    assert _cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [
        ["a", "b", "c", "a"]
    ]


def test_no_import_cycle() -> None:
    cycles = _cycles(GRAPH)
    shown = [
        " -> ".join(f"{a} (line {GRAPH[a][b]})" for a, b in zip(loop, loop[1:], strict=False))
        + f" -> {loop[-1]}"
        for loop in cycles
    ]
    assert not cycles, "import cycles (move the shared part below both):\n" + "\n".join(shown)


def test_every_package_has_a_layer() -> None:
    missing = sorted({_top(m) for m in MODULES} - set(RANK) - {"__init__"})
    assert not missing, (
        f"{missing} not in tests/test_architecture.py LAYERS: place each in the layer of "
        "what it may import from (and add it to docs/architecture.md)"
    )


def test_imports_flow_down_the_layers() -> None:
    upward = []
    for module, deps in GRAPH.items():
        here = _top(module)
        for dep, line in deps.items():
            there = _top(dep)
            if here in (there, "__init__") or there not in RANK or here not in RANK:
                continue
            if RANK[there] >= RANK[here]:
                upward.append(
                    f"{MODULES[module].relative_to(SRC)}:{line} imports {dep} "
                    f"(layer {RANK[there]}) from layer {RANK[here]}"
                )
    assert not upward, (
        "imports that do not flow down the layers (move the shared code lower, or pass it "
        "in as an argument):\n" + "\n".join(upward)
    )


def test_the_documented_layers_are_the_tested_ones() -> None:
    doc = (SRC.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \|", doc, flags=re.MULTILINE)
    documented = {int(layer): set(re.findall(r"`(\w+)`", names)) for layer, names in rows}
    tested = {i: set(layer) for i, layer in enumerate(LAYERS)}
    assert documented == tested, "docs/architecture.md's layer table differs from LAYERS here"


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_no_file_over_the_limit(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, (
        f"{path.relative_to(SRC)} has {lines} lines (limit {MAX_LINES}): a file this long "
        "holds two concerns; split it by responsibility"
    )


def test_only_the_serve_command_reaches_the_http_package() -> None:
    """Predicting is the prediction layer's: the CLI, the other subcommands and calibration
    answer through it, never through the HTTP service's package."""
    reaching = sorted(
        f"{module}:{line}"
        for module, deps in GRAPH.items()
        if _top(module) in ("cli", "commands", "calibration")
        and module != "structqa.commands.serve"
        for dep, line in deps.items()
        if _top(dep) == "serving"
    )
    assert not reaching, f"imports of structqa.serving outside the serve command: {reaching}"


def test_the_prediction_layer_is_what_answers() -> None:
    """The Predictor lives in prediction/, and the service's batcher, predict and calibrate
    (the command and the reader build, through prediction.calibrate) use it (so every entry
    point answers through one path)."""
    answering = ("structqa.prediction", "structqa.prediction.predictor")
    for user in (
        "structqa.serving.batcher",
        "structqa.commands.common",
        "structqa.prediction.calibrate",
    ):
        assert any(m in GRAPH[user] for m in answering), user
    for user in ("structqa.commands.calibrate", "structqa.reader.members"):
        assert "structqa.prediction.calibrate" in GRAPH[user], user
    assert not [m for m in MODULES if m.startswith("structqa.serving.predictor")]


def test_every_subcommand_lives_in_commands() -> None:
    """The CLI in one home: the modules that register a subcommand (``add_parser``) are
    structqa.commands' modules, and cli.py holds no command of its own."""
    registering = sorted(
        module
        for module, path in MODULES.items()
        if "\ndef add_parser(" in path.read_text(encoding="utf-8")
    )
    assert registering and all(m.startswith("structqa.commands.") for m in registering), registering
    cli = MODULES["structqa.cli"].read_text(encoding="utf-8")
    assert "\ndef cmd_" not in cli
