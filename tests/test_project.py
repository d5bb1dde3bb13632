"""The project's promises about itself: README commands, quickstart, public surface."""

import re
import subprocess
import sys
from pathlib import Path

import dsh_actors

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_the_readme_opens_with_the_install_and_run_command_then_the_test_command():
    first, second = [line.strip() for line in README.splitlines()[:2]]
    assert first == "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/python -m dsh_actors eval"
    assert second == "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest"
    assert second in (ROOT / ".ci" / "run").read_text()


def test_the_readme_quickstart_runs_as_written(cluster_env):
    code = re.search(r"## Quickstart\n\n```python\n(.*?)```", README, re.S).group(1)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, cwd=ROOT,
                         env=cluster_env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        '42 | Error: please do not shout | Error: unknown tool "add" | '
        'Error: invalid arguments: "a" input should be a valid integer'
    )


def test_the_public_surface_is_sorted_complete_and_importable():
    names = dsh_actors.__all__
    assert names == sorted(names) and len(set(names)) == len(names)
    for name in names:
        assert getattr(dsh_actors, name) is not None
    public = {n for n, v in vars(dsh_actors).items()
              if not n.startswith("_") and not isinstance(v, type(sys)) and n != "annotations"}
    assert public <= set(names), sorted(public - set(names))


def test_the_package_ships_its_type_marker_and_the_skeleton_exists():
    assert (ROOT / "dsh_actors" / "py.typed").exists()
    for folder in ("deploy", "benchmarks", "tests"):
        assert (ROOT / folder).is_dir()
    assert (ROOT / "ray_cluster.yaml").exists()


def test_the_specifications_public_names_are_importable_from_the_package():
    spec = ["validate_args", "schema_spec_to_json_schema", "assert_supported_output_schema",
            "validate_structured_value", "OutputSchemaError", "ToolNotFoundError", "CodeRunFailedError",
            "define_tool", "ToolArgsError", "HarnessError"]
    missing = [name for name in spec if name not in dsh_actors.__all__ or getattr(dsh_actors, name, None) is None]
    assert missing == []
    assert dsh_actors.validate_args({"n": {"type": "number", "required": True}}, {}) == ['missing required property "n"']
    assert issubclass(dsh_actors.ToolNotFoundError, dsh_actors.HarnessError)
