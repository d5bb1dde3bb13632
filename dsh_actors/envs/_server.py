"""The environment's init, serving: its clients' requests.

A top-level module of the init (PID 1 of the environment's PID namespace), which by now
holds every wall it gives its commands (:mod:`_confine`). One thread, one ``epoll``:

- **clients** connect to the environment's socket (inherited, listening), say its secret,
  then send requests (:mod:`_wire`); a client that goes away takes its running commands
  with it;
- **commands** (``run``) are :mod:`_commands`';
- **files** are read and written here, beneath the workspace (:mod:`_files`);
- **end** kills every other process of the namespace, reaps them, answers, and exits.

As PID 1 it also reaps every orphan, and no signal from inside reaches it but ``SIGCHLD``
(the kernel delivers a namespace's signals to its init only for signals it handles).
"""

import hmac
import os
import select
import signal

import _children
import _wire
from _commands import CLIENT, REAP, Commands
from _files import PathRefused

HELLO_BYTES = 4096
"""What a connection may send before it has said the secret."""

READ_BYTES = 1 << 16

WARDEN_TIMEOUT_S = 30.0
"""How long the init waits for its warden to move it into its cgroup home: asked once the
environment is ready, so the first cgroup move (after an idle spell it waits for an RCU
grace period, ~8 ms here) is never on a start's path; past it, the environment ends."""


class _DiskFull(PathRefused):
    """A write over the disk bound (answered ``ENV_DISK``)."""


class Connection:
    def __init__(self, server, sock):
        self.server, self.sock = server, sock
        self.frames = _wire.FrameBuffer()
        self.authenticated = False
        self.outbox = bytearray()
        self.commands = {}
        sock.setblocking(False)

    def readable(self):
        try:
            data = self.sock.recv(READ_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data or (not self.authenticated and len(self.frames) + len(data) > HELLO_BYTES):
            self.server.drop(self)
            return
        try:
            frames = self.frames.feed(data)
        except ValueError:
            self.server.drop(self)
            return
        for frame in frames:
            if self.sock is None:
                return
            self.server.request(self, frame)

    def send(self, message):
        if self.sock is None:
            return
        self.outbox += _wire.encode(message)
        self.flush()

    def flush(self):
        try:
            while self.outbox:
                del self.outbox[:self.sock.send(self.outbox)]
        except BlockingIOError:
            self.server.watch_writes(self, True)
            return
        except OSError:
            self.server.drop(self)
            return
        self.server.watch_writes(self, False)


class Server:
    """PID 1's loop (see the module docs)."""

    def __init__(self, *, listener, secret, env_id, workspace, cgroups, meter, env, warden, spawner_idle_s):
        self.listener, self.secret, self.env_id, self.warden = listener, secret, env_id, warden
        self.workspace, self.cgroups, self.meter = workspace, cgroups, meter
        self.epoll = select.epoll()
        self.handlers = {}
        self.writing = set()
        self.wake = _children.watch_children()
        self.commands = Commands(watch=self._watch, forget=self._forget, cgroups=cgroups, meter=meter, env=env,
                                 spawner_idle_s=spawner_idle_s,
                                 workspace=workspace,
                                 inherited=lambda: (listener.fileno(), self.epoll.fileno(), self.wake, *self.handlers))
        self._watch(self.wake, REAP, self._reap)
        listener.setblocking(False)
        self._watch(listener.fileno(), CLIENT, self._accept)

    # --- the loop ------------------------------------------------------------------------

    def _watch(self, fd, priority, handler, events=select.EPOLLIN):
        self.handlers[fd] = (priority, handler)
        self.epoll.register(fd, events)

    def _forget(self, fd):
        self.handlers.pop(fd, None)
        try:
            self.epoll.unregister(fd)
        except (OSError, ValueError):
            pass

    def serve(self):
        if self.cgroups is not None:  # the spawner may enter the cgroups once the init is home
            self.warden.settimeout(WARDEN_TIMEOUT_S)
            try:
                self.warden.send(b"move")
                moved = self.warden.recv(4096)
            except OSError:
                moved = b""
            if moved != b"moved":
                os._exit(1)  # the owner sees the environment end, and releases it
        self.warden.close()
        self.commands.fork_spawner()
        while True:
            events = self.epoll.poll(self.commands.timeout())
            for _, fd, mask in sorted((self.handlers[fd][0], fd, mask) for fd, mask in events if fd in self.handlers):
                entry = self.handlers.get(fd)
                if entry is not None:
                    entry[1](mask)
            self.commands.on_time()

    # --- clients ---------------------------------------------------------------------------

    def _accept(self, _mask):
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        connection = Connection(self, sock)
        self._watch(sock.fileno(), CLIENT, lambda mask, c=connection: self._client_event(c, mask))

    def _client_event(self, connection, mask):
        if mask & select.EPOLLOUT:
            connection.flush()
        if mask & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR) and connection.sock is not None:
            connection.readable()

    def watch_writes(self, connection, on):
        fd = connection.sock.fileno()
        if on != (fd in self.writing):
            (self.writing.add if on else self.writing.discard)(fd)
            self.epoll.modify(fd, select.EPOLLIN | (select.EPOLLOUT if on else 0))

    def drop(self, connection):
        """A client went away (or broke the protocol): its running commands are killed."""
        if connection.sock is None:
            return
        fd = connection.sock.fileno()
        self._forget(fd)
        self.writing.discard(fd)
        connection.sock.close()
        connection.sock = None
        self.commands.abandon(connection)

    def request(self, connection, message):
        op = message.get("op") if isinstance(message, dict) else None
        if not connection.authenticated:
            secret = message.get("secret") if op == "hello" else None
            if not isinstance(secret, str) or not hmac.compare_digest(secret.encode(), self.secret.encode()):
                self.drop(connection)
                return
            connection.authenticated = True
            connection.send(_wire.ok(0, self.env_id))
            return
        request = message.get("id")
        try:
            if op == "run":
                self.commands.start(connection, request, message)
            elif op == "cancel":
                self.commands.cancel(connection, request)
            elif op == "read":
                connection.send(_wire.ok(request, self.read(message)))
            elif op == "write":
                connection.send(_wire.ok(request, self.write(message)))
            elif op == "end":
                self.end(connection, request)
            else:
                connection.send(_wire.error(request, "ENV_REQUEST", f"unknown request {op!r}"))
        except _DiskFull:
            connection.send(_wire.error(request, "ENV_DISK", "the environment's disk bound is spent"))
        except PathRefused as exc:
            connection.send(_wire.error(request, "ENV_PATH", str(exc)))
        except (KeyError, TypeError, ValueError) as exc:
            connection.send(_wire.error(request, "ENV_REQUEST", f"malformed {op} request: {exc}"))

    # --- files -------------------------------------------------------------------------------

    def read(self, message):
        limit = message.get("limit")
        cap = _wire.MAX_DATA if limit is None else min(int(limit), _wire.MAX_DATA)
        data = self.workspace.read(message["path"], cap + (1 if limit is None else 0))
        if len(data) > cap:
            raise PathRefused(f"{message['path']} is larger than {cap} bytes: read it in parts with a command")
        return data

    def write(self, message):
        data = message["data"]
        if not isinstance(data, bytes):
            raise TypeError("data is bytes")
        spent = self.meter.check_life(full=False)
        if spent == "disk" or not self.workspace.write(message["path"], data, self.meter.allowance()):
            raise _DiskFull()
        return None

    def _reap(self, _mask):
        """``SIGCHLD``: reap the spawner, orphans, and commands whose spawner died."""
        for pid, status in _children.ended_children(self.wake):
            self.commands.reaped(pid, status)

    # --- the end -------------------------------------------------------------------------

    def end(self, connection, request):
        """Every other process of the namespace killed and reaped, an answer, the exit."""
        try:
            os.kill(-1, signal.SIGKILL)  # from PID 1: everyone in the namespace but itself
        except ProcessLookupError:
            pass
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break
            except InterruptedError:
                continue
        connection.sock.setblocking(True)
        try:
            connection.sock.sendall(connection.outbox + _wire.encode(_wire.ok(request, None)))
        except OSError:
            pass
        os._exit(0)
