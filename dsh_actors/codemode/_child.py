"""The sandbox child: runs one model-written program and talks to its host in frames.

Imported by the fork server before the operating-system walls go up and run after they
are up (the walls are the boundary: nothing in this file tries to contain the program,
and the host checks everything it sends). It uses only the standard library and msgpack.

Frames are a 4-byte big-endian length and a msgpack map. The host sends ``start`` and
``reply`` frames on stdin; the child sends ``log`` (printed text, in chunks of at most
64 KiB), ``call`` (a binding's arguments as JSON text, or only their size when they are
over the run's cap, so the host refuses the call alone) and ``done`` frames on the file
descriptor it is given.
"""

import ast
import asyncio
import io
import json
import os
import struct
import sys
import threading
import traceback

import msgpack

_out = [-1]
_write_lock = threading.Lock()
MAX_FRAME = 64 * 2**20
CHUNK = 64 * 1024


def _send(message):
    payload = msgpack.packb(message, use_bin_type=True, unicode_errors="surrogatepass")
    data = struct.pack(">I", len(payload)) + payload
    with _write_lock:
        while data:
            data = data[os.write(_out[0], data):]


def _read_exact(stream, size):
    # The host reads frames with its own non-blocking decoder; this file may import only
    # the standard library and msgpack (it runs inside the sandbox), so it keeps this one.
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
    size = struct.unpack(">I", head)[0]
    if size > MAX_FRAME:
        return None
    body = _read_exact(stream, size)
    return None if body is None else msgpack.unpackb(body, raw=False, unicode_errors="surrogatepass")


class _Capture(io.TextIOBase):
    """print() and sys.stdout/err writes become log frames in order: whole lines are sent
    as they complete, in chunks of at most CHUNK characters, and nothing is sent once the
    run's log budget is passed (the host keeps its own count and writes the truncation
    line; this only saves the traffic, so the piece that passes the budget is still sent)."""

    def __init__(self, budget):
        self._pending = []
        self._size = 0
        self._budget = budget

    def writable(self):
        return True

    def write(self, text):
        text = str(text)
        if self._budget < 0:
            return len(text)
        self._pending.append(text)
        self._size += len(text)
        if self._size >= CHUNK or "\n" in text:
            self._send(self._size >= CHUNK)
        return len(text)

    def _send(self, everything):
        joined = "".join(self._pending)
        cut = len(joined) if everything else joined.rfind("\n") + 1
        head, rest = joined[:cut], joined[cut:]
        self._pending, self._size = ([rest], len(rest)) if rest else ([], 0)
        for start in range(0, len(head), CHUNK):
            piece = head[start:start + CHUNK]
            # What the host's ledger charges for it: a line's bytes plus its newline, which
            # is already one of these bytes. Never more, or the child would stop sending
            # before the host's budget is reached and the host would never write its
            # truncation line.
            self._budget -= len(piece.encode("utf-8", "surrogatepass"))
            _send({"t": "log", "text": piece})
            if self._budget < 0:
                self._pending, self._size = [], 0
                return

    def flush(self):
        if self._pending and self._budget >= 0:
            self._send(True)


def _program_traceback(exc):
    """The failure as the program's author sees it: only frames of the program itself."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<program>"]
    lines = ["Traceback (most recent call last):"] if frames else []
    for frame in frames:
        lines.append(f"  line {frame.lineno}, in program")
        if frame.line:
            lines.append(f"    {frame.line.strip()}")
    lines.extend(line.rstrip("\n") for line in traceback.format_exception_only(exc))
    return "\n".join(lines)


def compile_program(source):
    """The program as the body of ``async def __dsh_program__(tools)``, lines unchanged.

    The body is parsed as a module (the parser accepts top-level ``await`` and ``return``)
    and placed into the function's AST, so string literals and line numbers stay exactly
    as the model wrote them.
    """
    tree = ast.parse(source, "<program>")
    arguments = ast.arguments(posonlyargs=[], args=[ast.arg("tools")], kwonlyargs=[], kw_defaults=[], defaults=[])
    function = ast.AsyncFunctionDef(name="__dsh_program__", args=arguments, body=tree.body or [ast.Pass()],
                                    decorator_list=[], returns=None, lineno=1, col_offset=0)
    module = ast.fix_missing_locations(ast.Module(body=[function], type_ignores=[]))
    import linecache

    linecache.cache["<program>"] = (len(source), None, source.splitlines(True), "<program>")
    return compile(module, "<program>", "exec")


def make_tools(names, call):
    """The program's ``tools``: ``tools.name`` and ``tools["name"]`` for every binding name.

    The object has no attributes of its own, so no name (``_private``, ``__init__``,
    ``keys``) collides with anything; a missing name raises ``AttributeError``.
    """
    bindings = {}
    for name in names:
        bindings[name] = _binding(name, call)

    class Tools:
        __slots__ = ()

        def __getattribute__(self, name):
            try:
                return bindings[name]
            except KeyError:
                raise AttributeError(f'unknown binding "tools.{name}"') from None

        def __getitem__(self, name):
            return Tools.__getattribute__(self, name)

        def __setattr__(self, name, value):
            raise AttributeError("tools is read-only")

        def __dir__(self):
            return sorted(bindings)

        def __repr__(self):
            return f"<tools: {', '.join(sorted(bindings))}>"

    return Tools()


def _binding(name, call):
    async def binding(*args, **kwargs):
        if args and kwargs or len(args) > 1:
            raise TypeError(f"tools.{name}() takes keyword arguments or one arguments dict")
        value = args[0] if args else kwargs
        # The texts are the reference's (codemode/transport.py holds them for in-process
        # runtimes; this file may import only the standard library and msgpack).
        if callable(value):
            raise TypeError("tool arguments must be JSON-serializable (got a value JSON cannot represent)")
        try:
            text = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise TypeError(f"tool arguments must be JSON-serializable: {exc}") from None
        return await call(name, text)

    binding.__name__ = binding.__qualname__ = name
    return binding


def render_text(value, limit=None):
    """A returned value as the model reads it: a str as it is; anything else pprint-ed,
    or, for a value too large to pretty-print within ``limit``, its repr written only as
    far as the limit (so a value of millions of items costs the run a bounded rendering)."""
    if isinstance(value, str):
        return value
    if limit is not None and not _small(value, 20_000):
        return _Bounded(limit).render(value)
    try:
        import pprint
        return pprint.pformat(value, depth=4, width=100, compact=True)
    except Exception:
        try:
            return repr(value)
        except Exception as exc:  # e.g. an int past the digits limit, a repr that raises
            return f"<{type(value).__name__} that cannot be shown: {type(exc).__name__}: {exc}>"


def _small(value, budget):
    """Whether ``value`` holds at most ``budget`` items in all (counting stops at the budget)."""
    stack, seen = [value], 0
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple, set, frozenset)):
            seen += len(item)
            if seen > budget:
                return False
            stack.extend(item)
        elif isinstance(item, dict):
            seen += len(item)
            if seen > budget:
                return False
            stack.extend(item.values())
    return True


class _Full(Exception):
    pass


class _Bounded:
    """repr(), written part by part and stopped once ``limit`` characters are out."""

    def __init__(self, limit):
        self.limit, self.parts, self.size = limit, [], 0

    def render(self, value):
        try:
            self._write(value, 0)
        except _Full:
            pass
        except RecursionError:
            self._put("…")
        return "".join(self.parts)

    def _put(self, text):
        self.parts.append(text)
        self.size += len(text)
        if self.size > self.limit:
            raise _Full

    def _write(self, value, depth):
        if depth > 50:
            self._put("...")
            return
        if isinstance(value, (list, tuple)):
            opening, closing = ("[", "]") if isinstance(value, list) else ("(", ")")
            self._put(opening)
            for index, item in enumerate(value):
                if index:
                    self._put(", ")
                self._write(item, depth + 1)
            self._put("," + closing if isinstance(value, tuple) and len(value) == 1 else closing)
        elif isinstance(value, dict):
            self._put("{")
            for index, (key, item) in enumerate(value.items()):
                if index:
                    self._put(", ")
                self._write(key, depth + 1)
                self._put(": ")
                self._write(item, depth + 1)
            self._put("}")
        elif isinstance(value, (set, frozenset)) and value:
            self._put("{" if isinstance(value, set) else "frozenset({")
            for index, item in enumerate(value):
                if index:
                    self._put(", ")
                self._write(item, depth + 1)
            self._put("}" if isinstance(value, set) else "})")
        else:
            try:
                text = repr(value)
            except Exception as exc:
                text = f"<{type(value).__name__} that cannot be shown: {type(exc).__name__}>"
            self._put(text)


def _render(value, limit):
    text = render_text(value, limit)
    if len(text) <= limit // 4:
        return text
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return data.decode("utf-8")
    return data[:limit].decode("utf-8", "ignore") + "… [truncated]"


def main(out_fd):
    """Boot (a loop, the reply reader, one empty program run to fault its code paths in),
    then wait for the run's ``start`` frame and run it. A spare sandbox waits here booted."""
    _out[0] = out_fd
    loop = asyncio.new_event_loop()
    futures = {}
    arrived = loop.create_future()

    def reader():
        first = _read_frame(sys.stdin.buffer)
        loop.call_soon_threadsafe(_begin, first)
        while first is not None:
            frame = _read_frame(sys.stdin.buffer)
            if frame is None:
                return
            if isinstance(frame, dict) and frame.get("t") == "reply":
                future = futures.pop(frame.get("id"), None)
                if future is not None:
                    loop.call_soon_threadsafe(_settle, future, frame)

    def _begin(first):
        if not arrived.done():
            arrived.set_result(first)

    def _settle(future, frame):
        if future.done():
            return
        if frame.get("ok"):
            future.set_result(frame.get("value"))
        else:
            future.set_exception(RuntimeError(str(frame.get("error"))))

    threading.Thread(target=reader, daemon=True).start()
    warm = {}
    exec(compile_program("pass"), warm)
    loop.run_until_complete(warm["__dsh_program__"](None))
    start = loop.run_until_complete(arrived)
    if not isinstance(start, dict) or start.get("t") != "start":
        return

    max_arg = start.get("max_arg_bytes", MAX_FRAME)

    async def call(name, text):
        # A random id, not a count: the program can write frames of its own, and must not
        # be able to take the id of a call before the call is sent.
        call_id = int.from_bytes(os.urandom(8), "big") >> 1
        while call_id in futures:
            call_id = int.from_bytes(os.urandom(8), "big") >> 1
        future = loop.create_future()
        futures[call_id] = future
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > max_arg:  # the host refuses it, alone and with its code
            _send({"t": "call", "id": call_id, "name": name, "size": size})
        else:
            _send({"t": "call", "id": call_id, "name": name, "json": text})
        return await future

    namespace = {"__name__": "__sandbox__"}
    try:
        code = compile_program(start["program"])
    except SyntaxError as exc:
        _send({"t": "done", "error": {"kind": "exception", "message": f"SyntaxError: {exc}"}})
        return
    capture = sys.stdout = sys.stderr = _Capture(start.get("max_log_bytes", MAX_FRAME))
    error_cap = 4 * start["max_value_bytes"]
    try:
        exec(code, namespace)
        value = loop.run_until_complete(namespace["__dsh_program__"](make_tools(start["names"], call)))
    except BaseException as exc:  # the program's failure, whatever it raised
        capture.flush()
        message = _program_traceback(exc)
        if len(message) > error_cap:
            message = message[:error_cap]
        _send({"t": "done", "error": {"kind": "exception", "message": message}})
        return
    capture.flush()
    if value is None:
        _send({"t": "done"})
        return
    try:
        rendered = _render(value, start["max_value_bytes"])
    except BaseException as exc:  # a __repr__ of the program's own that fails in its own way
        rendered = f"<a value that cannot be shown: {type(exc).__name__}>"
    _send({"t": "done", "value": rendered})


def finish():
    try:
        sys.__stdout__.flush()
    finally:
        os._exit(0)
