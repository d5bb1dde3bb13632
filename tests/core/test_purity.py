"""The pure layer never imports ray: proven in a fresh interpreter where ray cannot load."""

import pkgutil

import pytest
import subprocess
import sys

import dsh_actors.codemode
import dsh_actors.core
import dsh_actors.log


def test_every_core_module_imports_with_ray_made_unimportable():
    modules = [m.name for m in pkgutil.walk_packages(dsh_actors.core.__path__, "dsh_actors.core.")]
    for package in (dsh_actors.log, dsh_actors.codemode):
        modules += [package.__name__] + [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
    modules += ["dsh_actors.prompt", "dsh_actors.inmemory", "dsh_actors.policies.timeout", "dsh_actors.policies.retry"]
    # the sandbox's entry points are scripts run in processes of their own, not modules to import
    modules = [m for m in modules if not m.endswith(("._launcher", "._forkserver"))]
    assert "dsh_actors.core.pipeline.dispatch" in modules
    script = (
        "import sys, importlib\n"
        "sys.modules['ray'] = None\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "assert 'ray' not in [m for m in sys.modules if sys.modules[m] is not None and m.split('.')[0] == 'ray']\n"
        "print('pure')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "pure"


def _imports_of(path):
    """Every dsh_actors module ``path`` imports, at the top or inside a function."""
    import ast
    from pathlib import Path

    package = "dsh_actors." + ".".join(Path(path).relative_to(Path(dsh_actors.core.__file__).parents[1])
                                       .with_suffix("").parts)
    if package.endswith(".__init__"):
        package = package[: -len(".__init__")]
    else:
        package = package.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.startswith("dsh_actors"):
                found.add(module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("dsh_actors")}
    return found


def test_core_is_the_ground_floor_it_imports_nothing_above_it():
    from pathlib import Path

    for path in Path(dsh_actors.core.__file__).parent.rglob("*.py"):
        above = {m for m in _imports_of(path) if not m.startswith("dsh_actors.core")}
        assert not above, f"{path.name} imports {sorted(above)}"


@pytest.mark.parametrize("package", ["runtime", "codemode"])
def test_the_runtime_layer_and_code_mode_have_no_import_circle(package):
    import importlib
    from pathlib import Path

    folder = Path(importlib.import_module(f"dsh_actors.{package}").__file__).parent
    prefix = f"dsh_actors.{package}."
    graph = {prefix + p.stem: {m for m in _imports_of(p) if m.startswith(prefix)}
             for p in folder.glob("*.py") if p.stem != "__init__"}
    state = {}

    def visit(module, trail):
        if state.get(module) == "done":
            return
        assert state.get(module) != "open", " -> ".join(trail + [module])
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            visit(target, trail + [module])
        state[module] = "done"

    for module in sorted(graph):
        visit(module, [])
