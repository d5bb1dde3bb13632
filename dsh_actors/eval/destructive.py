"""What the ``deny-destructive`` policy denies: shell commands that delete recursively,
write to devices, format or wipe disks, stop the machine, or throw work away.

A command is split the way a shell splits it (quotes respected; ``;``, ``&&``, ``||``,
``|``, ``&``, parentheses, ``$(…)`` and backticks end a simple command), and each simple
command is judged after its prefixes (``sudo``, ``env X=1``, ``nohup``, ``timeout 5``,
``xargs``…) are taken off; ``bash -c``, ``sh -c`` and ``eval`` strings are judged as
commands too. Text that is only printed (``echo "rm -rf /"``) is not a command. A command
that does not parse (an unclosed quote) is denied: this policy fails closed.
"""

from __future__ import annotations

import re
import shlex
from pathlib import PurePosixPath

__all__ = ["destructive"]

_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "|&", "(", ")", "{", "}", ";;", "!"})
_PREFIXES = frozenset({"sudo", "doas", "env", "nohup", "time", "nice", "ionice", "command", "builtin", "exec",
                       "xargs", "timeout", "stdbuf", "setsid", "unbuffer", "busybox", "caffeinate"})
_PREFIX_OPTIONS_WITH_VALUE = {"sudo": {"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"},
                              "nice": {"-n"}, "ionice": {"-c", "-n"}, "xargs": {"-I", "-n", "-P", "-L", "-d", "-a"},
                              "timeout": {"-s", "-k"}, "env": {"-u", "-C"}}
_WIPERS = frozenset({"shred", "wipefs", "fdisk", "sfdisk", "cfdisk", "parted", "mkswap", "blkdiscard", "mke2fs",
                     "badblocks", "sgdisk", "gdisk", "zpool", "lvremove", "vgremove", "pvremove", "cryptsetup"})
_STOPPERS = frozenset({"shutdown", "reboot", "halt", "poweroff", "kexec"})
_SYSTEM_DIRS = ("/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/opt", "/proc", "/root",
                "/sbin", "/srv", "/sys", "/usr", "/var")
_EVERYTHING = frozenset({"~", "~/", "~/*", "$HOME", "${HOME}", "$HOME/*", "*", "/*", "./*", ".*"})
_HARMLESS_DEVICES = frozenset({"/dev/null", "/dev/zero", "/dev/stdout", "/dev/stderr", "/dev/tty"})
_FORK_BOMB = re.compile(r"(\w+|:)\s*\(\s*\)\s*\{[^}]*\1\s*\|\s*\1\s*&")
_DEVICE_REDIRECT = re.compile(r">\s*/dev/(?!null\b|zero\b|stdout\b|stderr\b|tty\b)\w+")


def _simple_commands(command: str) -> list[list[str]]:
    lexer = shlex.shlex(command.replace("`", " ; ").replace("$(", " ( "), posix=True, punctuation_chars=";&|(){}!")
    lexer.whitespace_split = True
    lexer.commenters = ""
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in _SEPARATORS or set(token) <= set(";&|(){}!"):
            commands.append([])
        elif token == "\n":
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def _unwrap(words: list[str]) -> list[str]:
    """The command behind its prefixes and variable assignments."""
    while words:
        head = PurePosixPath(words[0]).name
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
            words = words[1:]
        elif head in _PREFIXES:
            rest, valued = words[1:], _PREFIX_OPTIONS_WITH_VALUE.get(head, set())
            while rest and (rest[0].startswith("-") or (head in ("timeout", "nice") and rest[0][:1].isdigit())
                            or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", rest[0])):
                rest = rest[2:] if rest[0] in valued else rest[1:]
            words = rest
        else:
            return words
    return words


def _short_flags(words: list[str]) -> set[str]:
    return {ch for w in words if w.startswith("-") and not w.startswith("--") for ch in w[1:]}


def _is_system_target(word: str) -> bool:
    """A whole home, everything here, or a system directory (or everything in one)."""
    if word in _EVERYTHING:
        return True
    path = word.rstrip("/") or "/"
    return path in _SYSTEM_DIRS or any(path == d.rstrip("/") + "/*" for d in _SYSTEM_DIRS)


def _judge(words: list[str], depth: int) -> str | None:
    words = _unwrap(words)
    if not words:
        return None
    name, args = PurePosixPath(words[0]).name, words[1:]
    flags, operands = _short_flags(args), [a for a in args if not a.startswith("-")]
    if name in ("bash", "sh", "zsh", "dash", "ksh") and "-c" in args and depth < 4:
        inner = args[args.index("-c") + 1:]
        return destructive(inner[0], depth + 1) if inner else None
    if name == "eval" and depth < 4:
        return destructive(" ".join(args), depth + 1)
    if name == "rm":
        if flags & {"r", "R"} or "--recursive" in args:
            return "a recursive delete"
        if any(_is_system_target(o) for o in operands):
            return "a delete of system or home paths"
    if name == "dd" and any(a.startswith("of=/dev/") and a[3:] not in _HARMLESS_DEVICES for a in args):
        return "a raw write to a device"
    if name in _WIPERS or name.startswith("mkfs"):
        return "formatting or wiping a disk"
    if name in _STOPPERS or (name in ("init", "telinit") and operands[:1] in (["0"], ["6"])) or (
            name == "systemctl" and operands[:1] and operands[0] in ("poweroff", "reboot", "halt", "kexec")):
        return "stopping the machine"
    if name == "find" and ("-delete" in args or any(a in ("-exec", "-execdir", "-ok") and i + 1 < len(args)
                                                    and PurePosixPath(args[i + 1]).name in ("rm", "shred")
                                                    for i, a in enumerate(args))):
        return "deleting what find finds"
    if name in ("chmod", "chown", "chgrp") and (flags & {"R"} or "--recursive" in args) and any(
            _is_system_target(o) for o in operands):
        return "changing the permissions of system paths"
    if name == "mv" and operands[-1:] == ["/dev/null"]:
        return "moving files to /dev/null"
    if name == "git" and operands[:1]:
        sub = operands[0]
        if sub == "reset" and "--hard" in args:
            return "throwing away uncommitted work (git reset --hard)"
        if sub == "clean" and ("f" in flags or "--force" in args):
            return "deleting untracked files (git clean -f)"
        if sub == "push" and ("f" in flags or any(a.startswith("--force") for a in args)):
            return "overwriting remote history (git push --force)"
    return None


def destructive(command: str, depth: int = 0) -> str | None:
    """Why ``command`` is destructive (a short phrase), or ``None`` when it is not."""
    if _FORK_BOMB.search(command):
        return "a fork bomb"
    if _DEVICE_REDIRECT.search(command):
        return "a raw write to a device"
    try:
        commands = _simple_commands(command)
    except ValueError:
        return "a command that does not parse (unbalanced quotes)"
    for words in commands:
        reason = _judge(words, depth)
        if reason is not None:
            return reason
    return None
