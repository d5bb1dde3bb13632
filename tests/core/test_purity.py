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
    modules += ["dsh_actors.prompt", "dsh_actors.policies.timeout", "dsh_actors.policies.retry"]
    # the sandbox launcher is a script run in its own process, not a module to import
    modules = [m for m in modules if not m.endswith("._launcher")]
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
