"""The house's measurable shape (#45): no import circle, no module over 600 lines, no function over 80, and module
docstrings a reader takes in at a glance (at most 3 lines)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TREES = ("clinicode", "app_streamlit", "pipelines")
# sizes are checked in benchmarks/ too; a benchmark script's module docstring is its usage text, so not its length
SIZED = (*TREES, "benchmarks")
MAX_MODULE, MAX_FUNCTION, MAX_DOCSTRING = 600, 80, 3


def _modules(trees: tuple[str, ...] = TREES) -> list[Path]:
    return sorted(p for tree in trees for p in (ROOT / tree).rglob("*.py"))


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_no_module_is_over_600_lines():
    long = {_name(p): n for p in _modules(SIZED) if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE}
    assert not long, f"split these modules along their seams: {long}"


def test_no_function_is_over_80_lines():
    long = {}
    for p in _modules(SIZED):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION:
                    long[f"{_name(p)}:{node.name}"] = n
    assert not long, f"split these functions into named steps: {long}"


def test_every_module_docstring_is_at_most_3_lines():
    long = {}
    for p in _modules():
        doc = ast.get_docstring(ast.parse(p.read_text(encoding="utf-8")), clean=True)
        if doc and len(doc.strip().splitlines()) > MAX_DOCSTRING:
            long[_name(p)] = len(doc.strip().splitlines())
    assert not long, f"say what a reader needs in 3 lines; details go to the functions or docs/: {long}"


def _circles(graph, modules: list[str]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in modules:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.find_modules_directly_imported_by(w)))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _private_reaches(tree: ast.AST, module: str) -> list[str]:
    """The private names (one leading underscore) of clinicode modules that MODULE imports or reaches through an
    imported module, from outside the part of clinicode that owns them (`clinicode.<part>`)."""
    part = ".".join(module.split(".")[:2])
    aliases, out = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("clinicode"):
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    out.append(f"{node.module}.{a.name}")
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            aliases.update({a.asname or a.name: a.name for a in node.names if a.name.startswith("clinicode")})
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            out.append(f"{aliases[node.value.id]}.{node.attr}")
    return [name for name in out if not name.startswith(part + ".")]


def test_no_module_reaches_into_a_private_name_of_another_part():
    found = {}
    for p in _modules(("clinicode",)):
        module = ".".join(p.relative_to(ROOT).with_suffix("").parts)
        if reached := _private_reaches(ast.parse(p.read_text(encoding="utf-8")), module):
            found[_name(p)] = reached
    assert not found, f"ask a public function of the module instead: {found}"


def test_the_private_name_finder_finds_a_planted_reach():
    tree = ast.parse("from clinicode.codes import icd10 as t\nfrom clinicode.codes.icd10 import _cm_module\n"
                     "t._cm_module()\n")
    assert _private_reaches(tree, "clinicode.review.decisions") == ["clinicode.codes.icd10._cm_module"] * 2
    assert _private_reaches(tree, "clinicode.codes.suggest") == []


_KIND_OPTIONS = re.compile(r"^clinicode\.models\.(\w+)\.options$")


def _options_imports(tree: ast.AST, module: str) -> list[str]:
    """The options modules of model kinds (`clinicode.models.<kind>.options`) MODULE imports, lazily or not, from
    outside that kind's folder."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return sorted({m for m in found if (k := _KIND_OPTIONS.match(m)) and
                   not module.startswith(f"clinicode.models.{k.group(1)}.")})


def test_only_a_kinds_own_folder_imports_its_options():
    """Everything else asks the kind (`options_type`, `config_type`, `card`): the checkpoint, the CLI, training, the
    app and the other kinds (the fused kind's LEAM part included) never name a kind's options (#53)."""
    found = {}
    for p in _modules():
        module = ".".join(p.relative_to(ROOT).with_suffix("").parts)
        if reached := _options_imports(ast.parse(p.read_text(encoding="utf-8")), module):
            found[_name(p)] = reached
    assert not found, f"ask the kind the registry gives instead: {found}"


def test_the_options_import_finder_finds_a_planted_import():
    tree = ast.parse("from clinicode.models.leam.options import LEAMConfig\n\ndef f():\n"
                     "    from clinicode.models.leam import options\n")
    assert _options_imports(tree, "clinicode.checkpoint") == ["clinicode.models.leam.options"]
    assert _options_imports(tree, "clinicode.models.fused.kind") == ["clinicode.models.leam.options"]
    assert _options_imports(tree, "clinicode.models.leam.kind") == []


_ROUND = re.compile(r"hostile|round\d|_round|recheck|followup|fifth|sixth")  # names a testing round, not a behaviour
_ROUND_WORDS = re.compile(r"\b(second|third|fourth|fifth|sixth)\b[\w ]{0,10}\bround\b|hostile round", re.I)


def test_test_files_are_named_by_what_they_check_not_by_round():
    by_round = [_name(p) for p in _modules(("tests",)) if _ROUND.search(p.stem)]
    assert not by_round, f"name these test files by the behaviour they check: {by_round}"
    said = [_name(p) for p in _modules(("tests",))
            if _ROUND_WORDS.search(ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) or "")]
    assert not said, f"these test modules' docstrings name a round; say what they check: {said}"


def test_no_import_circle_in_the_package():
    """Lazy imports inside functions count: a circle is a circle whenever it is walked."""
    grimp = pytest.importorskip("grimp")
    sys.path.insert(0, str(ROOT))
    try:
        graph = grimp.build_graph("clinicode", cache_dir=None)
    finally:
        sys.path.remove(str(ROOT))
    assert _circles(graph, sorted(graph.modules)) == []


def test_the_circle_finder_finds_a_planted_circle():
    class Graph:
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

        def find_modules_directly_imported_by(self, m):
            return self.edges.get(m, set())

    assert _circles(Graph(), ["a", "b", "c", "d"]) == [["a", "b", "c"]]
