"""The sandbox child: runs one model-written program and talks to its host in frames.

Started as ``python -I -S _child.py`` in a fresh process with an empty environment, a
private working directory, resource limits and (where the OS allows) no network. Its
import path holds the standard library and msgpack only. Before the program runs, an
audit hook (which cannot be removed) refuses: opening files outside the standard
library and the working directory (writes: the working directory only), sockets,
starting processes or forking, loading native code through ctypes, and importing
``ray`` or ``ctypes``. This file uses nothing beyond the standard library and msgpack.

Frames are a 4-byte big-endian length and a msgpack map. The host sends ``start`` and
``reply`` frames on stdin; the child sends ``log``, ``call`` and ``done`` frames on the
file descriptor given as argv[1]. argv[2] is a directory holding only msgpack.
"""

import asyncio
import io
import json
import linecache
import os
import struct
import sys
import threading
import traceback

_OUT = int(sys.argv[1])
sys.path.insert(0, sys.argv[2])  # the one directory beside the standard library: msgpack alone
import msgpack  # noqa: E402

_write_lock = threading.Lock()


def _send(message):
    payload = msgpack.packb(message, use_bin_type=True)
    with _write_lock:
        os.write(_OUT, struct.pack(">I", len(payload)) + payload)


def _read_exact(stream, size):
    # The host has the same helper; this file may import only the standard library and
    # msgpack (it runs inside the sandbox), so it keeps its own copy.
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _read_frame(stream):
    head = _read_exact(stream, 4)
    if head is None:
        return None
    body = _read_exact(stream, struct.unpack(">I", head)[0])
    return None if body is None else msgpack.unpackb(body, raw=False)


class _Capture(io.TextIOBase):
    """print() and sys.stdout/err writes become log frames, one per line, in order."""

    def __init__(self):
        self._pending = ""

    def writable(self):
        return True

    def write(self, text):
        text = str(text)
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            _send({"t": "log", "text": line})
        return len(text)

    def flush(self):
        if self._pending:
            line, self._pending = self._pending, ""
            _send({"t": "log", "text": line})


def _program_traceback(exc):
    """The failure as the program's author sees it: only frames of the program itself."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<program>"]
    lines = ["Traceback (most recent call last):"] if frames else []
    for frame in frames:
        lines.append(f"  line {frame.lineno - 1}, in program")
        if frame.line:
            lines.append(f"    {frame.line.strip()}")
    lines.extend(line.rstrip("\n") for line in traceback.format_exception_only(exc))
    return "\n".join(lines)


_BLOCKED_EVENTS = (
    "socket.", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
    "os.forkpty", "os.kill", "os.killpg", "ctypes.", "pty.spawn", "os.chroot", "os.setuid", "mmap.__new__",
    "os.startfile", "sys.remote_exec", "webbrowser.open",
)
_BLOCKED_MODULES = ("ray", "ctypes", "_ctypes", "subprocess", "_posixsubprocess", "multiprocessing",
                    "socket", "_socket", "ssl", "_ssl", "urllib.request", "http.client", "pty")


def _guard(read_roots, workdir):
    read_roots = tuple(os.path.realpath(r) + os.sep for r in read_roots)
    workdir = os.path.realpath(workdir) + os.sep

    def inside(path, roots):
        real = os.path.realpath(path) + os.sep
        return any(real.startswith(root) for root in roots)

    def hook(event, args):
        if event == "open":
            path, mode = args[0], args[1]
            if isinstance(path, int) or path is None:
                return
            path = os.fsdecode(path)
            writing = isinstance(mode, str) and any(c in mode for c in "wax+")
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            writing = writing or bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC))
            if inside(path, (workdir,)) or (not writing and inside(path, read_roots)):
                return
            raise PermissionError(f"sandbox: access to {path!r} is not allowed (only the working directory)")
        if event == "import":
            name = args[0] or ""
            if name.split(".")[0] in _BLOCKED_MODULES or name in _BLOCKED_MODULES:
                raise ImportError(f"sandbox: importing {name!r} is not allowed")
            return
        if event.startswith(_BLOCKED_EVENTS):
            raise PermissionError(f"sandbox: {event} is not allowed")

    sys.addaudithook(hook)


class _Tools:
    """The program's ``tools``: one async function per binding (``tools.x`` / ``tools["x"]``)."""

    def __init__(self, names, call):
        object.__setattr__(self, "_names", frozenset(names))
        object.__setattr__(self, "_call", call)

    def __getitem__(self, name):
        if name not in self._names:
            raise AttributeError(f'unknown binding "tools.{name}"')
        call = self._call

        async def binding(*args, **kwargs):
            if args and kwargs or len(args) > 1:
                raise TypeError(f"tools.{name}() takes keyword arguments or one arguments dict")
            value = args[0] if args else kwargs
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"tool arguments must be JSON-serializable: {exc}") from None
            return await call(name, json.loads(json.dumps(value)))

        binding.__name__ = name
        return binding

    def __getattr__(self, name):
        return self[name]

    def __setattr__(self, name, value):
        raise AttributeError("tools is read-only")

    def __dir__(self):
        return sorted(self._names)


def _render(value, limit):
    if isinstance(value, str):
        text = value
    else:
        try:
            import pprint
            text = pprint.pformat(value, depth=4, width=100, compact=True)
        except Exception:
            text = repr(value)
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore") + "… [truncated]"


def main():
    start = _read_frame(sys.stdin.buffer)
    if not start or start.get("t") != "start":
        return
    loop = asyncio.new_event_loop()
    futures = {}
    counter = [0]

    def reader():
        while True:
            frame = _read_frame(sys.stdin.buffer)
            if frame is None:
                return
            if isinstance(frame, dict) and frame.get("t") == "reply":
                future = futures.pop(frame.get("id"), None)
                if future is not None:
                    loop.call_soon_threadsafe(_settle, future, frame)

    def _settle(future, frame):
        if future.done():
            return
        if frame.get("ok"):
            future.set_result(frame.get("value"))
        else:
            future.set_exception(RuntimeError(str(frame.get("error"))))

    async def call(name, args):
        counter[0] += 1
        call_id = counter[0]
        future = loop.create_future()
        futures[call_id] = future
        _send({"t": "call", "id": call_id, "name": name, "args": args})
        return await future

    source = "async def __dsh_program__(tools):\n" + "".join(
        "    " + line + "\n" for line in (start["program"].splitlines() or ["pass"]))
    # compile() sees the program one line down (the def); tracebacks shift it back
    namespace = {"__name__": "__sandbox__"}
    linecache.cache["<program>"] = (len(source), None, source.splitlines(True), "<program>")
    try:
        code = compile(source, "<program>", "exec")
    except SyntaxError as exc:
        _send({"t": "done", "error": {"kind": "exception", "message": f"SyntaxError: {exc}"}})
        return
    threading.Thread(target=reader, daemon=True).start()
    capture = sys.stdout = sys.stderr = _Capture()
    _guard(start["read_roots"], os.getcwd())
    try:
        exec(code, namespace)
        value = loop.run_until_complete(namespace["__dsh_program__"](_Tools(start["names"], call)))
    except BaseException as exc:  # the program's failure, whatever it raised
        capture.flush()
        _send({"t": "done", "error": {"kind": "exception", "message": _program_traceback(exc)}})
        return
    capture.flush()
    if value is None:
        _send({"t": "done"})
    else:
        _send({"t": "done", "value": _render(value, start["max_value_bytes"])})


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)
