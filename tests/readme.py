"""The README's walk-throughs as shell scripts, for the tests that run them."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def walkthrough(title: str) -> str:
    """The bash block under ``### Walk-through: <title>``, its continuation lines joined."""
    match = re.search(rf"### Walk-through: {re.escape(title)}\n.*?```bash\n(.*?)```", README, re.S)
    assert match, f"the README has no walk-through {title!r}"
    return match.group(1).replace("\\\n", " ")


def replace(script: str, old: str, new: str) -> str:
    """``script`` with ``old`` replaced by ``new``; ``old`` must be there (the README changed otherwise)."""
    assert old in script, f"the walk-through no longer has {old!r}:\n{script}"
    return script.replace(old, new)


def python_block(heading: str) -> str:
    """The first python block under ``### <heading>``."""
    match = re.search(rf"### {re.escape(heading)}\n.*?```python\n(.*?)```", README, re.S)
    assert match, f"the README has no python block under {heading!r}"
    return match.group(1)
