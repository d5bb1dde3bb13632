"""Each episode's workspace is a fresh, independent copy of the template: the same folders,
bytes and modes as copytree makes, from memory for a small template, from disk for a large
one or one with links."""

import os
from pathlib import Path

import pytest

from dsh_actors.eval import episode_run

T = 30


def tree(root):
    out = {}
    for folder, names, leaves in os.walk(root):
        for name in names + leaves:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            out[rel] = "dir" if os.path.isdir(path) else (Path(path).read_bytes(), os.stat(path).st_mode & 0o777)
    return out


@pytest.mark.timeout(T)
@pytest.mark.parametrize("kind", ["small", "large", "linked"])
def test_a_copy_is_the_template_exactly_and_changing_it_changes_nothing_else(tmp_path, monkeypatch, kind):
    template = tmp_path / kind
    (template / "src" / "deep").mkdir(parents=True)
    (template / "empty").mkdir()
    (template / "notes.txt").write_text("meeting notes\n")
    (template / "src" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(template / "src" / "run.sh", 0o750)
    (template / "src" / "deep" / "blob.bin").write_bytes(bytes(range(256)) * 40)
    if kind == "large":
        monkeypatch.setattr(episode_run, "_SNAPSHOT_BYTES", 100)
    if kind == "linked":
        os.symlink("notes.txt", template / "alias.txt")
    first, second = tmp_path / "a", tmp_path / "b"
    episode_run._copy_template(template, first)
    episode_run._copy_template(template, second)
    assert tree(first) == tree(second) == tree(template) and tree(first)["src/run.sh"][1] == 0o750
    assert (episode_run._snapshots[template] is None) == (kind != "small")  # held in memory only when small
    (first / "notes.txt").write_text("changed by one episode\n")
    assert (second / "notes.txt").read_text() == (template / "notes.txt").read_text() == "meeting notes\n"
