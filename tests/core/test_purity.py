"""The pure layer never imports ray: proven in a fresh interpreter where ray cannot load."""

import pkgutil

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


def _package_graph():
    """Every module of the package -> the package's modules it imports, at the top or inside
    a function (``from pkg import name`` is an import of the module ``pkg.name`` where there
    is one, else of ``pkg``)."""
    import ast
    from pathlib import Path

    root = Path(dsh_actors.core.__file__).parents[1]

    def name_of(path):
        parts = ("dsh_actors",) + path.relative_to(root).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    paths = {name_of(p): p for p in root.rglob("*.py")}
    graph = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    kept = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(kept + ([node.module] if node.module else []))
                modules = {f"{base}.{a.name}" for a in node.names} & paths.keys()
                found |= modules | ({base} if len(modules) < len(node.names) else set())
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        graph[module] = {t for t in found if t in paths and t != module}
    return graph


def test_core_is_the_ground_floor_it_imports_nothing_above_it():
    for module, targets in _package_graph().items():
        if module.startswith("dsh_actors.core"):
            above = {t for t in targets if not t.startswith("dsh_actors.core")}
            assert not above, f"{module} imports {sorted(above)}"


def test_there_is_no_import_circle_anywhere_in_the_package():
    graph = _package_graph()
    state = {}

    def visit(module, trail):
        if state.get(module) == "done":
            return
        assert state.get(module) != "open", " -> ".join(trail[trail.index(module):] + [module])
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            visit(target, trail + [module])
        state[module] = "done"

    for module in sorted(graph):
        visit(module, [])


RUNTIME_ROOMS = ("session", "caller", "executor", "registry")
"""The rooms of ``runtime/``, lowest first: each imports only the ground floor and the rooms before it."""
RUNTIME_FACE = {"client", "step", "envhost", "mcp_adapter"}
"""The modules on top of ``runtime/``: they may import any room; nothing in ``runtime/`` imports them."""


def _runtime_place(module):
    """(floor, room) of a ``dsh_actors.runtime`` module: 0 for the ground floor, a room's
    rank, or the face's (the package itself included)."""
    parts = module.split(".")[2:]
    if not parts or parts[0] in RUNTIME_FACE:
        return len(RUNTIME_ROOMS) + 1, "face"
    if parts[0] in RUNTIME_ROOMS:
        return 1 + RUNTIME_ROOMS.index(parts[0]), parts[0]
    return 0, "ground floor"


def test_the_runtime_rooms_keep_their_walls():
    graph = _package_graph()
    broken = []
    for module, targets in graph.items():
        if not module.startswith("dsh_actors.runtime."):
            continue
        floor, room = _runtime_place(module)
        for target in targets:
            if target.startswith("dsh_actors.runtime"):
                their_floor, their_room = _runtime_place(target)
                if their_floor > floor:
                    broken.append(f"{module} ({room}) imports {target} ({their_room})")
    assert broken == [], "\n".join(sorted(broken))


def test_the_readme_map_is_the_runtime_as_it_is():
    from pathlib import Path

    root = Path(dsh_actors.core.__file__).parents[2]
    lines = (root / "README.md").read_text().split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("dsh_actors/runtime/ "))
    mapped, room = set(), None
    for line in lines[start + 1:]:
        if line.startswith("dsh_actors/"):
            break
        if line.startswith("  ") and not line.startswith("    "):
            heading = line.split()[0]
            room = heading.rstrip("/") if heading.endswith("/") else None
        names = line[:26].replace(",", " ").split()
        mapped |= {(room, n[:-3]) for n in names if n.endswith(".py")}
    folder = root / "dsh_actors" / "runtime"
    actual = {(None, p.stem) for p in folder.glob("*.py") if p.stem != "__init__"}
    actual |= {(p.parent.name, p.stem) for p in folder.glob("*/*.py") if p.stem != "__init__"}
    assert mapped == actual, f"missing from the map: {sorted(actual - mapped, key=str)}; " \
                             f"not there: {sorted(mapped - actual, key=str)}"
