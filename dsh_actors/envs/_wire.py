"""The one wire format between an environment's clients and its init, defined once.

Both ends import it: the clients (:mod:`._client`, in any process of the node) as
``dsh_actors.envs._wire``, the init (``_server.py``, in the environment) as a top-level
module; so it imports nothing but the standard library and ``msgpack``. It also has the one
way the trusted processes (and the backend) receive descriptors (:func:`recv_fds`).

A connection carries frames: a 4-byte big-endian length, then a msgpack map. The client
speaks first (``hello`` with the environment's secret); then any number of requests, each
with an ``id`` of the client's choosing, answered in any order by a frame with the same
``id`` and either ``ok`` (the value) or ``error`` (``{"code", "message"}``)::

    {"op": "hello", "secret": str}                          -> {"id": 0, "ok": env_id}
    {"op": "run", "id", "command", "timeout_s", "cwd", "max_output"}
                                                            -> {"id", "ok": {exit_code, output,
                                                                 truncated, signal, bound}}
    {"op": "cancel", "id"}          (no answer: the run it names answers, killed)
    {"op": "read", "id", "path", "limit"}                   -> {"id", "ok": bytes}
    {"op": "write", "id", "path", "data"}                   -> {"id", "ok": None}
    {"op": "end", "id"}                                     -> {"id", "ok": None}, then EOF
"""

import array
import socket
import struct

import msgpack

HEADER = struct.Struct(">I")

MAX_FRAME = 1 << 27
"""The largest frame either end accepts (128 MiB): a file written or read in one request
and a command's output are at most :data:`MAX_DATA`, and the rest of a frame is small."""

MAX_DATA = 1 << 26
"""The most bytes one request may move (64 MiB): a write's data, a read's ``limit``, a
command's ``max_output``. The init holds them in memory, counted against the environment's
own memory bound; a larger file goes through a command (``split``, ``tar``)."""


MAX_COMMAND = (1 << 17) - 1
"""The longest command (bytes of UTF-8): ``bash -c`` takes it as one argument, and the kernel
takes no argument longer than 128 KiB (``MAX_ARG_STRLEN``). A longer script goes into a
file first (``write_file``), then runs."""


def ok(request, value):
    """The answer to request ``request``: ``value``."""
    return {"id": request, "ok": value}


def error(request, code, message):
    """The answer to request ``request``: the error ``code`` (``ENV_PATH``…) and a message."""
    return {"id": request, "error": {"code": code, "message": message}}


def encode(message):
    """One frame holding ``message``."""
    body = msgpack.packb(message, use_bin_type=True)
    if len(body) > MAX_FRAME:
        raise ValueError(f"a frame is at most {MAX_FRAME} bytes; this one is {len(body)}")
    return HEADER.pack(len(body)) + body


def decode(body):
    """The message in a frame's body; ``ValueError`` when it is not one msgpack value."""
    try:
        return msgpack.unpackb(body, raw=False)
    except Exception as exc:  # noqa: BLE001 - msgpack raises several kinds for a bad body
        raise ValueError(f"a frame that is not msgpack: {exc}") from None


class FrameBuffer:
    """Frames out of a byte stream read in pieces (the init's non-blocking reads)."""

    def __init__(self):
        self._data = bytearray()

    def __len__(self):
        """Bytes received and not yet a whole frame."""
        return len(self._data)

    def feed(self, data):
        """The complete frames ``data`` finished, in order. ``ValueError`` for a frame
        over :data:`MAX_FRAME` or that is not msgpack: the connection is then dropped."""
        self._data += data
        frames = []
        while len(self._data) >= HEADER.size:
            (size,) = HEADER.unpack_from(self._data)
            if size > MAX_FRAME:
                raise ValueError(f"a frame of {size} bytes is over the cap ({MAX_FRAME})")
            end = HEADER.size + size
            if len(self._data) < end:
                break
            body = bytes(self._data[HEADER.size:end])
            del self._data[:end]
            frames.append(decode(body))
        return frames


def recv_fds(sock, size, most):
    """``(data, descriptors)`` of one message with descriptors attached, the descriptors
    close-on-exec. Not ``socket.recv_fds``: it drops its ``flags`` (CPython 3.11), so what it
    receives is inheritable, and every command an init or spawner starts would inherit it
    (the environment's sockets, its cgroup folders: the way out of its bounds)."""
    fds = array.array("i")
    data, ancillary, _, _ = sock.recvmsg(size, socket.CMSG_LEN(most * fds.itemsize), socket.MSG_CMSG_CLOEXEC)
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    return data, list(fds)
