"""What the environment tests watch from outside: the host's side of every attempt.

Each test asserts on the host, never on what a command says about itself: canary files
(content and mtime), a sentinel process (alive), listeners on the host's loopback (no
connection, no datagram), and the host's process table (``/proc``).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import threading
import time
from pathlib import Path


class LoopThread:
    """An event loop on a thread of its own: a module's backend lives on it, and each test
    runs its coroutines there (a backend belongs to the loop it was first used from)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="envs-test-loop", daemon=True)
        self.thread.start()

    def run(self, coroutine, timeout_s: float = 60.0):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class Canary:
    """A host file whose content and modification time must never change."""

    def __init__(self, path: Path, content: bytes = b"canary: untouched\n", mode: int = 0o644) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        path.chmod(mode)
        self.path, self.content = path, content
        self.mtime_ns = path.stat().st_mtime_ns

    def intact(self) -> bool:
        try:
            return self.path.read_bytes() == self.content and self.path.stat().st_mtime_ns == self.mtime_ns
        except OSError:
            return False

    def __str__(self) -> str:
        return str(self.path)


class Sentinel:
    """A host process that must stay alive (and unseen)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(["sleep", "600"])

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


class Listener:
    """A TCP (or UDP) listener on the host's loopback, counting what reaches it."""

    def __init__(self, kind: int = socket.SOCK_STREAM, address: str | bytes = "127.0.0.1") -> None:
        family = socket.AF_UNIX if isinstance(address, bytes) else socket.AF_INET
        self.sock = socket.socket(family, kind)
        self.sock.bind(address if family == socket.AF_UNIX else (address, 0))
        if kind == socket.SOCK_STREAM:
            self.sock.listen(16)
        self.port = self.sock.getsockname()[1] if family == socket.AF_INET else None
        self.received: list[bytes] = []
        self.connections = 0
        self.sock.settimeout(0.2)
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                if self.sock.type == socket.SOCK_STREAM:
                    conn, _ = self.sock.accept()
                    self.connections += 1
                    conn.settimeout(2)
                    try:
                        data = conn.recv(1024)
                        self.received.append(data)
                        conn.sendall(b"hello from the host\n")
                    except OSError:
                        pass
                    conn.close()
                else:
                    self.received.append(self.sock.recv(4096))
            except (socket.timeout, OSError):
                continue

    def reached(self) -> bool:
        return self.connections > 0 or bool(self.received)

    def close(self) -> None:
        self._stop = True
        self._thread.join(2)
        self.sock.close()


def processes_of(uid: int) -> list[int]:
    """Host pids of every live process running as ``uid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid and (entry / "stat").read_text().split(") ")[1][0] != "Z":
                    found.append(int(entry.name))
            except (OSError, IndexError):
                pass
    return found


def processes_with(marker: bytes) -> list[int]:
    """Host pids of every live process whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in entry.joinpath("cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def wait_until(predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def cgroup_dirs_named(fragment: str) -> list[str]:
    """Every cgroup directory on the host whose path holds ``fragment``."""
    found = []
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        for name in dirs:
            if fragment in os.path.join(root, name):
                found.append(os.path.join(root, name))
    return found
