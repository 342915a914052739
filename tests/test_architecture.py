"""The package's layers, read from its own imports (docs/ARCHITECTURE.md, "Layers").

A chapter's module imports only the shared layer and earlier chapters' modules; an
experiment imports its chapter's module and earlier ones; nothing imports an experiment
or the top layer (grading, command line); no chapter or shared module hides an import of
the package inside a function. Part II plugs into Part I through the protocols of
chapters 5 and 6 instead (positions, caches).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "attention_course"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"

# the shared layer: imports only itself (and nothing later)
SHARED = ("device", "i18n", "training", "data", "plotting", "claims", "metrics")
# each chapter's modules, by chapter number
CHAPTERS = {"kernel_regression": 1, "scoring": 2, "masking": 3, "seq2seq": 4,
            "multihead": 5, "transformer_layers": 6, "transformer": 6,
            "channel_spatial": 7, "positions": 8,
            "decoding": 9, "efficient": 10, "linear_attention": 10,
            "gpt": 11}
# may import anything of the package; nothing below imports them
TOP = ("grading", "cli", "__init__")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def course_imports(tree: ast.AST) -> list[tuple[str, bool, int]]:
    """``(imported module, inside a function, line)`` for every import of the package
    (which imports itself absolutely: a relative import is an error)."""
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                found.extend((alias.name.removeprefix("attention_course."), inner,
                              child.lineno) for alias in child.names
                             if alias.name.startswith("attention_course."))
            elif isinstance(child, ast.ImportFrom):
                target = child.module or ""
                assert not child.level, f"line {child.lineno}: a relative import"
                if target.startswith("attention_course."):
                    found.append((target.removeprefix("attention_course."), inner,
                                  child.lineno))
                elif target == "attention_course":
                    found.extend((alias.name, inner, child.lineno) for alias in child.names)
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                continue  # annotations only
            visit(child, inner)

    visit(tree, False)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def layer(module: str) -> tuple[str, int]:
    """``(kind, rank)``: shared (0), a chapter or its experiment (1..11), top (99)."""
    head = module.split(".")[0]
    if head in TOP:
        return "top", 99
    if head in SHARED:
        return "shared", 0
    if head == "experiments":
        chapter = module.split(".")[1] if "." in module else None
        if chapter is None:
            return "experiments", 0
        if chapter not in CHAPTERS:
            raise AssertionError(f"experiments.{chapter} is named after no chapter module: "
                                 f"add the chapter to the layer table of {ARCHITECTURE.name}")
        return "experiment", CHAPTERS[chapter]
    if head in CHAPTERS:
        return "chapter", CHAPTERS[head]
    raise AssertionError(f"attention_course.{module} is in no layer: add it to the table of "
                         f"{ARCHITECTURE.name} and to this test")


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_import_goes_one_direction(path: Path) -> None:
    name = module_name(path)
    kind, rank = layer(name)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    wrong = []
    for target, in_function, line in course_imports(tree):
        target_kind, target_rank = layer(target)
        if kind == "top":
            continue
        if in_function:
            wrong.append(f"line {line}: imports attention_course.{target} inside a function")
        elif target_kind in ("top", "experiment", "experiments") and not (
                kind in ("experiment", "experiments") and target_kind == "experiments"):
            wrong.append(f"line {line}: imports attention_course.{target} ({target_kind})")
        elif kind == "shared" and target_kind != "shared":
            wrong.append(f"line {line}: the shared layer imports chapter module "
                         f"attention_course.{target}")
        elif kind == "chapter" and target_kind == "chapter" and target_rank > rank:
            wrong.append(f"line {line}: chapter {rank} imports chapter {target_rank}'s "
                         f"attention_course.{target}")
        elif kind == "experiment" and target_kind == "chapter" and target_rank > rank:
            wrong.append(f"line {line}: chapter {rank}'s experiment imports chapter "
                         f"{target_rank}'s attention_course.{target}")
    assert not wrong, f"attention_course.{name} ({kind}):\n" + "\n".join(wrong)


def test_the_imports_have_no_circle() -> None:
    """Within a layer (the shared modules, a chapter's modules) the imports form no
    circle either."""
    graph: dict[str, set[str]] = {}
    for path in MODULES:
        name = module_name(path)
        if layer(name)[0] != "top":
            tree = ast.parse(path.read_text(encoding="utf-8"))
            graph[name] = {t for t, in_function, _ in course_imports(tree)
                           if not in_function and t != name}
    state: dict[str, str] = {}

    def walk(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            nxt = nxt if nxt in graph else nxt.split(".")[0]
            assert state.get(nxt) != "open", "circle: " + " -> ".join([*trail, node, nxt])
            if nxt in graph and nxt not in state:
                walk(nxt, [*trail, node])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            walk(node, [])


def test_the_architecture_document_lists_every_layer() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    for name in (*SHARED, *CHAPTERS, *TOP[:2]):
        assert re.search(rf"`{re.escape(name)}`", text), f"{ARCHITECTURE.name} omits `{name}`"
    rows = re.findall(r"^\| (\d+) \| [^|]+\| ([^|]+)\|", text, flags=re.M)
    listed = {module: int(number) for number, cell in rows
              for module in re.findall(r"`(\w+)`", cell)}
    assert listed == CHAPTERS, listed
