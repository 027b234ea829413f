"""The layout (ARCHITECTURE.md): imports point one way.

Every module of ``tf_patches`` is read with ``ast`` (nothing is imported to check it, and an
import inside a function counts as much as one at the top; only ``if TYPE_CHECKING:`` blocks
are left out). Core imports nothing of the patches or the tools; a patch imports core and the
patches' own modules; no tool imports another tool's private name, and nothing outside core
reaches one of core's (imported, or read on a core module); nothing inside the package
imports its top level (whose names are lazy re-exports of the modules below it); core has no
import cycle.
"""

from __future__ import annotations

import ast
import importlib
import warnings
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Set

import pytest

from .fresh import ROOT, run_fresh

PACKAGE = "tf_patches"
SOURCE = ROOT / PACKAGE
TOOLS = ("autoapply", "diagnosis", "isolation", "repro", "testing", "demo", "cli")
SESSION = "session"  # what the tools share, below them all: the command session, the supervisor, --malloc
# The only imports of one tool by another, each a use of the other's public API, never a service
# that has no home (those live in the session).
TOOL_USES = {
    ("testing", "repro"): "tf_patches.testing.repro() is tf-patches repro as a function",
    ("demo", "testing"): "the demo shows the public testing API at work",
}


def _modules() -> Dict[str, Path]:
    """Dotted name -> file, for every module of the package."""
    found = {}
    for path in sorted(SOURCE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def layer(module: str) -> str:
    """``core``, ``patches``, a tool's name, or ``package`` (the top level, its shims and stubs)."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("core", "patches", SESSION) + TOOLS:
        return parts[1]
    return "package"


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (getattr(test, "id", None) == "TYPE_CHECKING"
                                         or getattr(test, "attr", None) == "TYPE_CHECKING")


def _nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, ``if TYPE_CHECKING:`` blocks left out."""
    for node in ast.iter_child_nodes(tree):
        if _type_checking(node):
            continue
        yield node
        yield from _nodes(node)


def _base(module: str, level: int) -> str:
    """The package a relative import of ``level`` dots in ``module`` starts from."""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    return package


class Import:
    """One import: the module it loads, and the name taken from it (None for ``import x``)."""

    def __init__(self, source: str, line: int, target: str, name: Optional[str], alias: str):
        self.source, self.line, self.target, self.name, self.alias = source, line, target, name, alias

    def __repr__(self) -> str:
        what = f"from {self.target} import {self.name}" if self.name else f"import {self.target}"
        return f"{self.source}:{self.line}: {what}"


def imports(module: str) -> List[Import]:
    """The package's own modules ``module`` imports (``from pkg import submodule`` names the
    submodule)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found = []
    for node in _nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    found.append(Import(module, node.lineno, alias.name, None, alias.asname or alias.name))
        elif isinstance(node, ast.ImportFrom):
            target = _base(module, node.level) + ("." + node.module if node.module else "") if node.level \
                else node.module or ""
            if target.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                if submodule in MODULES:
                    found.append(Import(module, node.lineno, submodule, None, alias.asname or alias.name))
                else:
                    found.append(Import(module, node.lineno, target, alias.name, alias.asname or alias.name))
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _looked_up(node: ast.AST) -> Optional[str]:
    """The name in ``sys.modules.get("x")``, ``sys.modules["x"]`` or ``importlib.import_module("x")``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args \
            and node.func.attr in ("get", "import_module") and isinstance(node.args[0], ast.Constant):
        return node.args[0].value
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "modules":
        key = node.slice if isinstance(node.slice, ast.Constant) else getattr(node.slice, "value", None)  # 3.8: Index
        return key.value if isinstance(key, ast.Constant) else None
    return None


def _dotted(node: ast.AST, aliases: Dict[str, str]) -> Optional[str]:
    """The package module an expression names: an alias, or ``tf_patches.core.engine`` spelled out."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, aliases)
        return f"{base}.{node.attr}" if base else None
    return None


def _private_uses(module: str, reached: Callable[[str], bool]) -> List[str]:
    """``x._name`` read by ``module`` on a package module for which ``reached`` is true: ``x`` an
    alias it imported (in a function too), one it looked up (``sys.modules.get(...)``), or the
    module's dotted name."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    aliases = {i.alias: i.target for i in imports(module) if i.name is None}
    for node in _nodes(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found = _looked_up(node.value)
            if found in MODULES:
                aliases[node.targets[0].id] = found
    return [f"{module}:{node.lineno}: {target}.{node.attr}" for node in _nodes(tree)
            if isinstance(node, ast.Attribute) and _private(node.attr)
            for target in [_dotted(node.value, aliases)] if target in MODULES and reached(target)]


def test_every_module_is_read():
    assert {"tf_patches.core.engine", "tf_patches.patches.seed_kernel_cache", "tf_patches.diagnosis.sampler",
            "tf_patches.cli"} <= set(MODULES)
    assert all(imports(module) is not None for module in MODULES)


def test_core_imports_neither_patches_nor_tools():
    wrong = [i for module in MODULES if layer(module) == "core" for i in imports(module)
             if layer(i.target) != "core"]
    assert wrong == []


def test_patches_import_only_core_and_the_patches_own_modules():
    wrong = [i for module in MODULES if layer(module) == "patches" for i in imports(module)
             if layer(i.target) not in ("core", "patches")]
    assert wrong == []


def test_the_session_imports_only_core_and_itself():
    wrong = [i for module in MODULES if layer(module) == SESSION for i in imports(module)
             if layer(i.target) not in ("core", SESSION)]
    assert wrong == []


def test_no_tool_imports_another_tool_but_to_use_its_public_api():
    """Issue 38: a service two tools need lives in the session, not in one of them."""
    wrong = [i for module in MODULES if layer(module) in TOOLS and layer(module) != "cli" for i in imports(module)
             if layer(i.target) in TOOLS and layer(i.target) != layer(module)
             and (layer(module), layer(i.target)) not in TOOL_USES]
    assert wrong == []


def _command_modules() -> Set[str]:
    """The modules ``cli`` loads by name (its ``COMMANDS`` table): imports all the same."""
    tree = ast.parse(MODULES[f"{PACKAGE}.cli"].read_text(encoding="utf-8"))
    for node in _nodes(tree):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "COMMANDS":
            return {value.elts[0].value for value in node.value.values}  # name: (module, help)
    raise AssertionError("cli.COMMANDS not found")


def floors() -> Dict[str, int]:
    """Each module of the tools and the session, by floor above core and the patches: 1 for one
    that imports neither; one more than the highest module of another layer it imports (an import
    inside its own layer does not raise it). ``cli``'s commands count as its imports."""
    found: Dict[str, int] = {}

    def floor(module: str, seen: tuple = ()) -> int:
        if layer(module) in ("core", "patches", "package"):
            return 0
        if module in found:
            return found[module]
        targets = {(i.target, layer(i.target) != layer(module)) for i in imports(module)}
        if module == f"{PACKAGE}.cli":
            targets |= {(name, True) for name in _command_modules()}
        # a cycle inside one layer: what is on the path counts as nothing more
        result = max([1] + [floor(target, seen + (module,)) + other for target, other in targets
                            if target not in seen and target != module])
        found[module] = result
        return result

    return {module: floor(module) for module in MODULES if layer(module) not in ("core", "patches", "package")}


def test_the_tools_stand_at_most_four_floors_above_core():
    """Issue 38: the drawing of the import graph has at most four floors of tools (the session
    the first) above core and the patches."""
    levels = floors()
    assert max(levels.values()) <= 4, sorted((level, module) for module, level in levels.items() if level > 4)
    assert levels[f"{PACKAGE}.session.processes"] == 1 and levels[f"{PACKAGE}.cli"] >= 3


def test_no_tool_imports_another_tools_private_name():
    wrong: List[object] = []
    for module in MODULES:
        own = layer(module)
        if own not in TOOLS:
            continue
        for i in imports(module):
            other = layer(i.target)
            if other in TOOLS and other != own and (
                    (i.name is not None and _private(i.name)) or any(map(_private, i.target.split(".")))):
                wrong.append(i)
        wrong.extend(_private_uses(module, lambda target: layer(target) in TOOLS and layer(target) != own))
    assert wrong == []


def test_nothing_outside_core_reaches_a_private_name_of_core():
    """The engine's services are public functions of core (``engine.current_report()``), not its
    ``_private`` names: neither imported (``from ..core.engine import _report``) nor read on a core
    module (``engine._report()``, also where ``engine`` came from ``sys.modules``)."""
    wrong: List[object] = []
    for module in MODULES:
        if layer(module) == "core":
            continue
        wrong.extend(i for i in imports(module) if layer(i.target) == "core" and (
            (i.name is not None and _private(i.name)) or any(map(_private, i.target.split(".")))))
        wrong.extend(_private_uses(module, lambda target: layer(target) == "core"))
    assert wrong == []


def test_nothing_inside_the_package_imports_its_top_level():
    wrong = [i for module in MODULES if module != PACKAGE for i in imports(module) if i.target == PACKAGE]
    assert wrong == []


def _cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """One cycle of ``graph``, as the modules along it, or None."""
    state: Dict[str, int] = {}  # 1: on the current path, 2: done
    path: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_core_has_no_import_cycle():
    graph = {module: {i.target for i in imports(module) if layer(i.target) == "core" and i.target != module}
             for module in MODULES if layer(module) == "core"}
    graph = {module: targets - {"tf_patches.core"} for module, targets in graph.items()}  # the package's docstring
    assert _cycle(graph) is None
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]  # the search finds one


# -- the public surface ------------------------------------------------------------------------
def test_public_names_still_resolve():
    import tf_patches
    import tf_patches.ray
    import tf_patches.testing

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert tf_patches.ray is importlib.import_module("tf_patches.isolation.ray")
        assert tf_patches.testing.measure_growth is importlib.import_module("tf_patches.core.memory").measure_growth


def test_the_02_aliases_are_gone():
    """0.2.0 was never published; its module paths (and ``_moved.py``, which aliased them) went in 0.3."""
    for old in ("engine", "registry", "context", "gate", "environment", "options", "errors", "reporting",
                "importhook", "frames", "allocator", "diagnosis_report", "diagnose_command", "signatures",
                "pytest_plugin", "_moved"):
        assert f"{PACKAGE}.{old}" not in MODULES


def test_importing_the_package_imports_neither_tensorflow_nor_packaging():
    loaded = run_fresh("""
        import json, sys
        import tf_patches
        print(json.dumps([name for name in ("tensorflow", "packaging", "numpy") if name in sys.modules]))
    """)
    assert loaded == []


def test_apply_all_before_import_tensorflow_imports_no_logging():
    """Rows pending, nothing logged: the logger is looked up at its first message (issue 31). Who
    imports ``logging`` is recorded (some ``packaging`` releases import it themselves); advisories,
    decided without TF, log their advice and are left out."""
    importers = run_fresh("""
        import json, sys

        class Spy:  # the module whose code imports logging, past the import system's own frames
            def find_spec(self, name, path=None, target=None):
                if name == "logging":
                    frame = sys._getframe(1)
                    while frame.f_code.co_filename.startswith("<frozen"):
                        frame = frame.f_back
                    found.append(frame.f_globals.get("__name__"))

        found = []
        sys.meta_path.insert(0, Spy())
        import tf_patches
        from tf_patches.core import registry
        tf_patches.apply_all(exclude=[spec.name for spec in registry.specs() if spec.advise is not None])
        print(json.dumps(["tensorflow" in sys.modules, found]))
    """)
    assert importers[0] is False and not [name for name in importers[1] if name.startswith("tf_patches")], importers


def test_layers_are_named_from_the_tree():
    names = ("core.engine", "patches._py_funcs", "diagnosis.sampler", "demo", "cli", "ray", "_version")
    assert [layer(f"{PACKAGE}.{name}") for name in names] == [
        "core", "patches", "diagnosis", "demo", "cli", "package", "package"]
