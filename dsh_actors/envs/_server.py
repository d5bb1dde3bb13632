"""The environment's init, serving: commands and file requests from its clients.

A top-level module of the init (PID 1 of the environment's PID namespace), which by now
holds every wall it gives its commands (:mod:`_confine`). One thread, one ``epoll``:

- **clients** connect to the environment's socket (inherited, listening), say its secret,
  then send requests (:mod:`_wire`); a client that goes away takes its running commands
  with it;
- **a command** gets a tracking slot (a cgroup: killing it kills all the command started,
  however it forked, detached or renamed itself; the spawner's own slot again whenever
  nothing is left running in it) and one pipe for its stdout and stderr, and goes to the
  spawner (:mod:`_spawner`), which spawns ``bash -c`` in that slot;
- **the end of a command** is its ``bash`` exiting (what it left running keeps running in
  its slot until the environment ends, unless a bound or the wall killed the slot): the pipe
  is drained of what is already written, and the result sent with the bound that stopped
  it, if one did (:mod:`_meter`); the wall (``timeout_s``) and cancellation kill the slot;
- **files** are read and written here, beneath the workspace (:mod:`_files`);
- **end** kills every other process of the namespace, reaps them, answers, and exits.

As PID 1 it also reaps every orphan, and no signal from inside reaches it but ``SIGCHLD``
(the kernel delivers a namespace's signals to its init only for signals it handles).
"""

import errno
import hmac
import os
import select
import signal
import socket
import time

import msgpack

import _walls
import _wire
from _files import PathRefused
from _meter import WATCH_S
from _spawner import Spawner

SPAWN_TIMEOUT_S = 5.0
"""How long the spawner may take to say a command's pid (it takes a millisecond): past it, it
is stopped or wedged, and the init kills it and forks another."""

HELLO_BYTES = 4096
"""What a connection may send before it has said the secret."""

READ_BYTES = 1 << 16

WARDEN_TIMEOUT_S = 30.0
"""How long the init waits for its warden to move it into its cgroup home: asked once the
environment is ready, so the first cgroup move (after an idle spell it waits for an RCU
grace period, ~8 ms here) is never on a start's path; past it, the environment ends."""

# events are handled in this order within one wake-up: finishing commands before starting
# new ones keeps the slowest of 32 concurrent commands close to the median
_REAP, _SPAWNER, _OUTPUT, _CLIENT = 0, 1, 2, 3


def _ok(request, value):
    return {"id": request, "ok": value}


def _error(request, code, message):
    return {"id": request, "error": {"code": code, "message": message}}


def _refused(bound):
    """The result of a command a bound stopped before it started."""
    return {"exit_code": None, "output": b"", "truncated": False, "signal": None, "bound": bound}


class _DiskFull(PathRefused):
    """A write over the disk bound (answered ``ENV_DISK``)."""


class Command:
    __slots__ = ("connection", "request", "number", "slot", "pid", "pipe", "chunks", "size", "limit", "truncated",
                 "sent", "deadline", "before", "status", "bound")

    def __init__(self, connection, request, number, slot, limit, deadline, before):
        self.connection, self.request, self.number, self.slot, self.limit = connection, request, number, slot, limit
        self.sent, self.deadline, self.before = time.monotonic(), deadline, before
        self.pid = self.pipe = self.status = self.bound = None
        self.chunks, self.size, self.truncated = [], 0, False

    def take(self, data):
        room = self.limit - self.size
        if len(data) > room:
            self.truncated = True
            data = data[:max(room, 0)]
        if data:
            self.chunks.append(data)
            self.size += len(data)

    def result(self):
        status = self.status if self.status is not None else signal.SIGKILL
        signal_number = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) and self.bound is None else None
        return {"exit_code": exit_code, "output": b"".join(self.chunks), "truncated": self.truncated,
                "signal": signal_number, "bound": self.bound}


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

    def __init__(self, *, listener, secret, env_id, workspace, cgroups, meter, env, warden):
        self.listener, self.secret, self.env_id, self.warden = listener, secret, env_id, warden
        self.workspace, self.cgroups, self.meter, self.env = workspace, cgroups, meter, env
        self.epoll = select.epoll()
        self.handlers = {}
        self.writing = set()
        self.commands = {}          # spawn number -> Command, until its bash is reaped
        self.by_pid = {}            # bash pid -> Command
        self.numbers = iter(range(1 << 62))
        self.free_slots, self.lingering, self.next_slot = [0], [], 1
        self.spawner_slot = 0  # where the spawner is (the slot of the last command it spawned)
        self.next_watch = 0.0
        self.wake_at = None  # when the loop must look at the time next (None: only events wake it)
        self.spawner = self.spawner_pid = None
        self.wake = _walls.watch_children()
        self._watch(self.wake, _REAP, self._reap)
        listener.setblocking(False)
        self._watch(listener.fileno(), _CLIENT, self._accept)

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
        self._fork_spawner()
        while True:
            events = self.epoll.poll(self._timeout())
            for _, fd, mask in sorted((self.handlers[fd][0], fd, mask) for fd, mask in events if fd in self.handlers):
                entry = self.handlers.get(fd)
                if entry is not None:
                    entry[1](mask)
            self._on_time()

    def _timeout(self):
        return -1 if self.wake_at is None else max(0.0, self.wake_at - time.monotonic())

    def _due(self, when):
        """Wake the loop by ``when`` (the time of a wall, a spawn's timeout, a measure)."""
        self.wake_at = when if self.wake_at is None else min(self.wake_at, when)

    def _next_times(self, command):
        """When ``command`` next needs the loop: its wall, its spawn's timeout, a measure."""
        times = [command.deadline, max(self.next_watch, command.sent + WATCH_S)]
        if command.pid is None:
            times.append(command.sent + SPAWN_TIMEOUT_S)
        return min(times)

    def _on_time(self):
        """What is due: walls, a wedged spawner, the measure of what runs long. Only when
        something is (commands are scanned then, not on every event: with 32 running, a
        scan per event cost a quarter of the init's time)."""
        now = time.monotonic()
        if self.wake_at is None or now < self.wake_at:
            return
        self.wake_at = None
        if any(c.pid is None and now - c.sent > SPAWN_TIMEOUT_S for c in self.commands.values()):
            self._replace_spawner()
        for command in list(self.commands.values()):
            if now >= command.deadline and command.bound is None:
                self.kill(command, "wall")
        if now >= self.next_watch and (self.lingering or any(now - c.sent >= WATCH_S for c in self.commands.values())):
            # only what runs longer than a tick is measured while it runs (a short command is
            # measured at its end): reading /proc each tick would slow the quick ones
            self.next_watch = now + WATCH_S
            self._measure()
        for command in self.commands.values():
            if command.bound is None:
                self._due(self._next_times(command))
        if self.lingering:
            self._due(self.next_watch)

    def _replace_spawner(self):
        """Kill the spawner and fork another: it is stopped or wedged (a command may stop it:
        the same uid); its commands are then the init's to reap."""
        try:
            os.kill(self.spawner_pid, signal.SIGKILL)
        except OSError:
            pass
        self._spawner_lost()

    def _spawner_stopped(self):
        try:
            with open(f"/proc/{self.spawner_pid}/stat") as handle:
                return handle.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
        except (OSError, IndexError):
            return False

    def _measure(self):
        if self.commands and self._spawner_stopped():
            self._replace_spawner()
        spent = self.meter.check_life(full=True)
        if spent is not None or self.meter.new_refusals():
            for slot in self.lingering:  # a fork bomb may have outlived the command that set it off
                self.cgroups.kill_slot(slot, self.spawner_pid)
        if spent is not None:
            for command in list(self.commands.values()):
                self.kill(command, spent)
            return
        for command in list(self.commands.values()):
            bound = self.meter.event_bound(command.before)
            if bound is None and self.meter.too_many_processes():
                bound = "processes"
            if bound is not None and command.bound is None:
                self.kill(command, bound)

    # --- clients ---------------------------------------------------------------------------

    def _accept(self, _mask):
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        connection = Connection(self, sock)
        self._watch(sock.fileno(), _CLIENT, lambda mask, c=connection: self._client_event(c, mask))

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
        for command in list(connection.commands.values()):
            self.kill(command, command.bound)

    def request(self, connection, message):
        op = message.get("op") if isinstance(message, dict) else None
        if not connection.authenticated:
            secret = message.get("secret") if op == "hello" else None
            if not isinstance(secret, str) or not hmac.compare_digest(secret.encode(), self.secret.encode()):
                self.drop(connection)
                return
            connection.authenticated = True
            connection.send(_ok(0, self.env_id))
            return
        request = message.get("id")
        try:
            if op == "run":
                self.start(connection, request, message)
            elif op == "cancel":
                command = connection.commands.get(request)
                if command is not None:
                    self.kill(command, command.bound)
            elif op == "read":
                connection.send(_ok(request, self.read(message)))
            elif op == "write":
                connection.send(_ok(request, self.write(message)))
            elif op == "end":
                self.end(connection, request)
            else:
                connection.send(_error(request, "ENV_REQUEST", f"unknown request {op!r}"))
        except _DiskFull:
            connection.send(_error(request, "ENV_DISK", "the environment's disk bound is spent"))
        except PathRefused as exc:
            connection.send(_error(request, "ENV_PATH", str(exc)))
        except (KeyError, TypeError, ValueError) as exc:
            connection.send(_error(request, "ENV_REQUEST", f"malformed {op} request: {exc}"))

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

    # --- commands ----------------------------------------------------------------------------

    def start(self, connection, request, message):
        text, timeout_s = message["command"], float(message["timeout_s"])
        limit = min(int(message.get("max_output", 65536)), _wire.MAX_DATA)
        if not isinstance(text, str) or len(text.encode()) > _wire.MAX_COMMAND or not timeout_s > 0 or limit < 0:
            raise ValueError("a command is a string of at most 128 KiB, timeout_s positive, max_output at least 0")
        spent = self.meter.check_life(full=False)
        if spent is not None:
            connection.send(_ok(request, _refused(spent)))
            return
        cwd = message.get("cwd")
        folder = self.workspace.directory(cwd) if cwd else os.dup(self.workspace.fd)
        slot = self._take_slot()
        command = Command(connection, request, next(self.numbers), slot, limit, time.monotonic() + timeout_s,
                          self.meter.events())
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        command.pipe = read_end
        connection.commands[request] = command
        self.commands[command.number] = command
        self._due(self._next_times(command))
        self._watch(read_end, _OUTPUT, lambda mask, c=command: self._output(c))
        try:
            socket.send_fds(self.spawner, [msgpack.packb(
                {"n": command.number, "command": text, "slot": slot},
                use_bin_type=True)], [write_end, folder])
        except OSError:
            self._spawner_lost()  # it just died (the OOM killer, or a command): this command ends killed
        finally:
            os.close(write_end)
            os.close(folder)

    def _spawner_event(self, _mask):
        try:
            data = self.spawner.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._spawner_lost()
            return
        message = msgpack.unpackb(data, raw=False)
        if "exit" in message:
            self.meter.spawner_usage(self.spawner_pid, *message["usage"])
            command = self.by_pid.pop(message["exit"], None)
            if command is not None:
                self._finish(command, message["status"])
            return
        command = self.commands.get(message.get("n"))
        if command is None:
            return
        if "pid" in message:
            command.pid = message["pid"]
            self.by_pid[command.pid] = command
            if command.bound is not None:
                self.kill(command, command.bound)  # killed before its pid was known
        else:  # it could not start: EAGAIN is the processes bound
            command.bound = "processes" if message.get("errno") == errno.EAGAIN else None
            if command.bound is None:
                command.connection.send(_error(command.request, "ENV_REQUEST",
                                               f"cannot start bash: {message.get('error')}"))
                self._discard(command)
            else:
                self._finish(command, None)

    def _fork_spawner(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            ours.close()
            for fd in (self.listener.fileno(), self.epoll.fileno(), self.wake, *self.handlers):
                try:
                    os.close(fd)
                except OSError:
                    pass
            try:
                Spawner(theirs, self.cgroups, self.env).run(self.spawner_slot, self.workspace.lib)
            finally:
                os._exit(1)
        theirs.close()
        ours.setblocking(False)
        self.spawner, self.spawner_pid = ours, pid
        self._watch(ours.fileno(), _SPAWNER, self._spawner_event)

    def _spawner_lost(self):
        """The spawner died (a command killed it, or the OOM killer: it is in the bounded
        cgroup, and a fork of the init looks big there): its commands whose pid it never
        told end killed, the rest the init reaps itself; another is forked."""
        if self.spawner.fileno() < 0:
            return
        self._forget(self.spawner.fileno())
        self.spawner.close()
        self.meter.spawner_gone()
        for command in list(self.commands.values()):
            if command.pid is None:
                self.kill(command, command.bound)
                self._finish(command, None)
        self._fork_spawner()

    def _output(self, command):
        try:
            data = os.read(command.pipe, READ_BYTES)
        except BlockingIOError:
            return
        if data:
            command.take(data)
        else:
            self._close_pipe(command)

    def _close_pipe(self, command):
        if command.pipe is not None:
            try:
                while data := os.read(command.pipe, READ_BYTES):  # what is already written
                    command.take(data)
            except BlockingIOError:
                pass
            self._forget(command.pipe)
            os.close(command.pipe)
            command.pipe = None

    def _reap(self, _mask):
        """``SIGCHLD``: reap the spawner, orphans, and commands whose spawner died."""
        for pid, status in _walls.ended_children(self.wake):
            command = self.by_pid.pop(pid, None)
            if command is not None:
                self._finish(command, status)

    def _finish(self, command, status):
        command.status = status
        self._close_pipe(command)
        if command.bound is None:
            command.bound = self.meter.event_bound(command.before) or self.meter.check_life(full=False)
            if command.bound is not None and self.cgroups is not None:
                self.cgroups.kill_slot(command.slot, self.spawner_pid)  # what it left running goes with it
        command.connection.send(_ok(command.request, command.result()))
        self._discard(command)

    def _discard(self, command):
        self._close_pipe(command)
        self.commands.pop(command.number, None)
        self.by_pid.pop(command.pid, None)
        command.connection.commands.pop(command.request, None)
        self._release_slot(command.slot)

    def kill(self, command, bound):
        """Kill everything ``command`` started (its slot; without cgroups, its session)."""
        command.bound = command.bound or bound
        if self.cgroups is not None:
            self.cgroups.kill_slot(command.slot, self.spawner_pid)
        elif command.pid is not None:
            try:
                os.killpg(command.pid, signal.SIGKILL)
            except OSError:
                pass

    # --- slots -----------------------------------------------------------------------------

    def _take_slot(self):
        """The slot for a new command: the spawner's own when it is free (no cgroup move);
        else another (free, or new), which the spawner moves to before spawning."""
        if self.spawner_slot in self.free_slots:
            self.free_slots.remove(self.spawner_slot)
            return self.spawner_slot
        if not self.free_slots and self.lingering and self.cgroups is not None:
            still = [s for s in self.lingering if self.cgroups.slot_busy(s, self.spawner_pid)]
            self.free_slots += [s for s in self.lingering if s not in still]
            self.lingering = still
        if self.free_slots:
            self.spawner_slot = self.free_slots.pop()
        else:
            self.spawner_slot, self.next_slot = self.next_slot, self.next_slot + 1
        return self.spawner_slot

    def _release_slot(self, slot):
        if self.cgroups is not None and self.cgroups.slot_busy(slot, self.spawner_pid):
            self.lingering.append(slot)
            self._due(self.next_watch)
        else:
            self.free_slots.append(slot)

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
            connection.sock.sendall(connection.outbox + _wire.encode(_ok(request, None)))
        except OSError:
            pass
        os._exit(0)
