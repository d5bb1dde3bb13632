"""An environment's commands, as its init runs them: where each is born, what stops it, what
it returns.

A top-level module of the init (``_server.py`` owns the loop and the clients; this, what a
``run`` request sets going). For each command:

- a tracking slot (a cgroup: killing it kills all the command started, however it forked,
  detached or renamed itself) and a spawner parked in it: the slot of an idle spawner when
  nothing is left running there, so that nothing moves (commands one after another reuse
  one; overlapping commands each get one of their own, the pool growing up to
  :data:`MAX_SPAWNERS`); past that, a spawner moves to another slot first;
- one pipe for its stdout and stderr, drained as it comes (what is past ``max_output`` is
  read and dropped, so the command never blocks on it);
- the spawner (:mod:`_spawner`) spawns ``bash -c`` in the slot and says its pid, then its
  exit; if a spawner dies (a command killed it, the OOM killer) or is stopped, the init
  forks another in its place, hands it the commands the dead one never took, and reaps the
  orphans itself; a spawner beyond the first that has been idle ``spawner_idle_s`` (the
  backend's setting) is ended (killed: it holds nothing);
- its end is its ``bash`` exiting (what it left running keeps running in its slot until the
  environment ends, unless a bound or the wall killed the slot): the pipe is drained of what
  is already written, and the result sent with the bound that stopped it, if one did;
- the wall (``timeout_s``), cancellation, a client's going away and the bounds
  (:mod:`_meter`) kill its slot.
"""

import errno
import mmap
import os
import signal
import socket
import time

import msgpack

import _children
import _wire
from _meter import WATCH_S
from _spawner import Spawner

SPAWN_TIMEOUT_S = 5.0
"""How long the spawner may take to say a command's pid (it takes a millisecond): past it, it
is stopped or wedged, and the init kills it and forks another."""

PIPE_BYTES = 1 << 16

FORK_TRIES = 20
"""How often the init tries to fork a spawner while the uid's process limit is full."""

SPAWN_TRIES = 20
"""How often a command refused at its spawn (the processes bound full) is handed again,
RETRY_S apart, earlier commands' leftovers killed first (the bound is charged to them) and
the zombies of what was killed reaped; past it, it ends with the bound."""

RETRY_S = 0.01

MAX_SPAWNERS = 32
"""At most this many spawners in one environment (and an eighth of its processes bound, as
each is one of its processes): one per command in flight, so that each is born where its
spawner already is. A cgroup move takes a lock every fork and exit on the node waits for, and
after an idle spell waits for an RCU grace period: with one spawner moving between the slots of
32 commands in flight, the slowest commands took 1.2-1.7x as long as bare ones, 0.8x without."""

# what one wake-up of the init's loop handles first: finishing commands before starting new
# ones keeps the slowest of 32 concurrent commands close to the median
REAP, SPAWNER, OUTPUT, CLIENT = 0, 1, 2, 3


def refused(bound):
    """The result of a command a bound stopped before it started."""
    return {"exit_code": None, "output": b"", "truncated": False, "signal": None, "bound": bound}


class Command:
    __slots__ = ("connection", "request", "number", "text", "slot", "pid", "pipe", "handed", "chunks", "size",
                 "limit", "truncated", "sent", "deadline", "before", "status", "bound", "killed", "tries", "spawner",
                 "seq")

    def __init__(self, connection, request, number, text, slot, spawner, limit, deadline, before):
        self.connection, self.request, self.number, self.text = connection, request, number, text
        self.slot, self.spawner, self.limit, self.deadline, self.before = slot, spawner, limit, deadline, before
        self.sent = time.monotonic()
        self.pid = self.pipe = self.status = self.bound = None
        self.handed = ()  # the output pipe's write end and the working folder, until the spawner answers
        self.chunks, self.size, self.truncated, self.killed, self.tries = [], 0, False, False, 1
        self.seq = None  # its place in what its spawner was sent (see Link.hand)

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


SENT, FULL, GONE = "sent", "full", "gone"


class Link:
    """The init's end of one spawner: its socket and pid, the page where it writes the ``seq``
    of each request it takes (requests are numbered in the order they are sent, so all before
    it were taken), the slot it is parked in (or will be, once it has taken what it was
    handed), and when it was last handed a command or one of its commands ended. A spawner
    that dies is replaced in the same link, so its commands keep it."""

    __slots__ = ("sock", "pid", "taken", "slot", "used", "sent")

    def __init__(self, slot):
        self.slot, self.used, self.sent = slot, time.monotonic(), 0
        self.sock = self.pid = self.taken = None

    def hand(self, command):
        """Send ``command`` to the spawner: :data:`SENT`; :data:`FULL` when its socket's
        buffer is (a few large commands queued: try again shortly); :data:`GONE`."""
        self.used = time.monotonic()
        try:
            socket.send_fds(self.sock, [msgpack.packb(
                {"n": command.number, "seq": self.sent + 1, "command": command.text, "slot": command.slot},
                use_bin_type=True)], list(command.handed))
        except BlockingIOError:
            return FULL
        except OSError:
            return GONE
        self.sent += 1
        command.seq = self.sent
        return SENT

    def stopped(self):
        try:
            with open(f"/proc/{self.pid}/stat") as handle:
                return handle.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
        except (OSError, IndexError):
            return False


class Commands:
    """The init's commands (see the module docs). ``watch(fd, priority, handler)`` and
    ``forget(fd)`` are the loop's; ``inherited()`` the descriptors a spawner closes."""

    def __init__(self, *, watch, forget, inherited, cgroups, meter, env, workspace, spawner_idle_s):
        self.watch, self.forget, self.inherited = watch, forget, inherited
        self.cgroups, self.meter, self.env, self.workspace = cgroups, meter, env, workspace
        self.commands = {}          # spawn number -> Command, until its bash is reaped
        self.by_pid = {}            # bash pid -> Command
        self.numbers = iter(range(1 << 62))
        self.free_slots, self.lingering, self.next_slot = [0], [], 1
        self.spawners = []  # Link, the first forked at the start, the others as commands overlap
        self.max_spawners = max(1, min(MAX_SPAWNERS, meter.processes // 8))
        self.spawner_idle_s = spawner_idle_s
        self.next_watch = 0.0
        self.wake_at = None  # when the loop must look at the time next (None: only events wake it)
        self.again = {}  # spawn number -> when a command not delivered, or refused at its spawn, is handed again
        self.ended = set()  # pids of spawners lost, or ended as spares, until reaped
        self.hearing = False  # (reaped() reads what every spawner said, not from within itself)

    def cancel(self, connection, request):
        command = connection.commands.get(request)
        if command is not None:
            self.kill(command, command.bound)

    def abandon(self, connection):
        """Its client went away: its commands are killed."""
        for command in list(connection.commands.values()):
            self.kill(command, command.bound)

    def reaped(self, pid, status):
        """The init reaped ``pid``: a spawner (its counts are the init's own now), or the
        command it was, if its spawner died — which may have said its pid and died before the
        init read it: what every spawner said is heard first."""
        link = next((link for link in self.spawners if link.pid == pid), None)
        if link is not None:
            self._spawner_lost(link)  # (its last words heard first)
        if pid in self.ended:
            self.ended.discard(pid)
            self.meter.spawner_gone(pid)
            return
        if pid not in self.by_pid and not self.hearing:
            self.hearing = True
            try:
                for each in list(self.spawners):
                    self._hear_the_last(each)
            finally:
                self.hearing = False
        command = self.by_pid.pop(pid, None)
        if command is not None:
            self._finish(command, status)

    def start(self, connection, request, message):
        text, timeout_s = message["command"], float(message["timeout_s"])
        limit = min(int(message.get("max_output", 65536)), _wire.MAX_DATA)
        if not isinstance(text, str) or len(text.encode()) > _wire.MAX_COMMAND or not timeout_s > 0 or limit < 0:
            raise ValueError("a command is a string of at most 128 KiB, timeout_s positive, max_output at least 0")
        spent = self.meter.check_life(full=False)
        if spent is not None:
            connection.send(_wire.ok(request, refused(spent)))
            return
        cwd = message.get("cwd")
        folder = self.workspace.directory(cwd) if cwd else os.dup(self.workspace.fd)
        slot, spawner = self._place()
        command = Command(connection, request, next(self.numbers), text, slot, spawner, limit,
                          time.monotonic() + timeout_s, self.meter.events())
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        command.pipe, command.handed = read_end, (write_end, folder)
        connection.commands[request] = command
        self.commands[command.number] = command
        self._due(self._next_times(command))
        self.watch(read_end, OUTPUT, lambda mask, c=command: self._output(c))
        self._send(command)

    def _send(self, command):
        """Hand ``command`` to its spawner. Not delivered, it is handed again shortly (its
        socket full), or to the spawner forked in place of one gone (the OOM killer, or a
        command killed it)."""
        outcome = command.spawner.hand(command)
        if outcome != SENT:
            self._hand_later(command)  # (never taken: it is sent again)
        if outcome == GONE:
            self._spawner_lost(command.spawner)

    def _hand_later(self, command):
        """Hand ``command`` again in :data:`RETRY_S` (:meth:`_hand_again`); meanwhile a lost
        spawner's successor counts it as never taken."""
        self.again[command.number] = time.monotonic() + RETRY_S
        self._due(self.again[command.number])

    def spawner_pids(self):
        return {link.pid for link in self.spawners}

    @staticmethod
    def _answered(command):
        """The spawner answered for ``command``: the init's copies of what it handed go."""
        for fd in command.handed:
            os.close(fd)
        command.handed = ()

    def _spawner_event(self, link):
        try:
            data = link.sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._spawner_lost(link)
            return
        self._spawner_said(link, msgpack.unpackb(data, raw=False))

    def _spawner_said(self, link, message):
        if "exit" in message:
            self.meter.spawner_usage(link.pid, *message["usage"])
            command = self.by_pid.pop(message["exit"], None)
            if command is not None:
                self._finish(command, message["status"])
            return
        command = self.commands.get(message.get("n"))
        if command is None:
            return
        if message.get("errno") == errno.EAGAIN and self._spawn_again(command):
            return
        self._answered(command)
        if "pid" in message:
            command.pid = message["pid"]
            self.by_pid[command.pid] = command
            if command.killed:
                self.kill(command, command.bound)  # killed (or cancelled) before its pid was known
        else:  # it could not start: EAGAIN is the processes bound
            command.bound = "processes" if message.get("errno") == errno.EAGAIN else None
            if command.bound is None:
                command.connection.send(_wire.error(command.request, "ENV_REQUEST",
                                                    f"cannot start bash: {message.get('error')}"))
                self._discard(command)
            else:
                self._finish(command, None)

    def _spawn_again(self, command):
        """The processes bound refused ``command``'s spawn: what earlier commands left running
        is killed (the bound is charged to it), what the init may reap is reaped (a bomb just
        killed holds the bound with its zombies until then), and the command is handed again
        shortly; after ``SPAWN_TRIES`` it ends with the bound."""
        if command.killed or command.tries >= SPAWN_TRIES or self.cgroups is None:
            return False
        self._empty_leftovers()
        command.tries += 1
        command.sent = time.monotonic()  # its spawner answered: its spawn's timeout starts again
        self._hand_later(command)
        return True

    def _hand_again(self, now):
        for number, when in list(self.again.items()):
            if number not in self.again:
                continue  # handed meanwhile, to the spawner forked in place of its own
            command = self.commands.get(number)
            if command is None or command.killed:
                self.again.pop(number)
                if command is not None:  # killed meanwhile (its wall, a cancel): it never started
                    self._finish(command, None)
            elif when <= now:
                self.again.pop(number)
                self._send(command)
            else:
                self._due(when)

    def fork_spawner(self):
        """The first spawner, in slot 0 (the server's, once the init is home)."""
        link = Link(0)
        self._start(link, self._fork)
        self.spawners.append(link)

    def _start(self, link, fork):
        """Fork a spawner for ``link`` (``fork``: how; it may raise ``BlockingIOError``)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        page = mmap.mmap(-1, mmap.PAGESIZE)  # shared with the child: what it writes, the init reads
        taken = memoryview(page).cast("q")
        taken[0] = -1
        try:
            pid = fork()
        except BaseException:
            ours.close()
            theirs.close()
            raise
        if pid == 0:
            ours.close()
            for fd in [*self.inherited(), *(fd for c in self.commands.values() for fd in c.handed)]:
                try:
                    os.close(fd)
                except OSError:
                    pass
            try:
                Spawner(theirs, self.cgroups, self.env, taken).run(link.slot, self.workspace.lib)
            finally:
                os._exit(1)
        theirs.close()
        ours.setblocking(False)
        link.sock, link.pid, link.taken = ours, pid, taken
        self.watch(ours.fileno(), SPAWNER, lambda mask, l=link: self._spawner_event(l))

    def _grow(self, slot):
        """A new spawner parked in ``slot``, or ``None`` when none can be forked now (the
        uid's process limit: then an existing one moves; no command is killed for it)."""
        link = Link(slot)
        try:
            self._start(link, os.fork)
        except BlockingIOError:
            return None
        self.spawners.append(link)
        return link

    def _retire_idle(self, now):
        """Spawners beyond the first with nothing to spawn for ``spawner_idle_s`` are ended
        (killed: they hold nothing); the others are looked at again when they may be."""
        busy = {command.spawner for command in self.commands.values()}
        for link in self.spawners[1:]:
            if link in busy:
                continue
            if now - link.used < self.spawner_idle_s:
                self._due(link.used + self.spawner_idle_s)
                continue
            self.spawners.remove(link)
            self._let_go(link)
            try:
                os.kill(link.pid, signal.SIGKILL)  # (a stopped one would never read the end of its socket)
            except OSError:
                pass

    def _fork(self):
        """``os.fork()``, which may find the uid's process limit full (``RLIMIT_NPROC``: a
        fork bomb's processes and the zombies of those the bound killed, the init's to reap)
        when a spawner died mid-bomb: then every command ends with the processes bound,
        every slot is emptied and reaped, and it tries again (the init must not die of it)."""
        for _ in range(FORK_TRIES - 1):
            try:
                return os.fork()
            except BlockingIOError:
                for command in list(self.commands.values()):
                    self.kill(command, "processes")
                self._empty_leftovers()
                time.sleep(0.01)
        return os.fork()

    def _empty_leftovers(self):
        """Kill what ended commands left running, and reap what the init may (their processes
        and zombies hold the processes bound until then)."""
        for slot in self.lingering:
            self._empty_slot(slot)
        self._reap_now()

    def _reap_now(self):
        for pid, status in _children.reaped_now():
            self.reaped(pid, status)

    def _spawner_lost(self, link):
        """``link``'s spawner died (a command killed it, or the OOM killer: it is in the
        bounded cgroup, and a fork of the init looks big there), or was killed as wedged.
        What it said before is heard; another is forked in its place; the commands it never
        took go to that one (a command may kill each new spawner as it comes: after
        ``FORK_TRIES`` they end killed); the one it was spawning as it died ends killed (it
        may have started, and must not run twice); the rest the init reaps itself (the dead
        one's counts move to the init's when it is reaped: :meth:`reaped`)."""
        for _ in range(FORK_TRIES):
            if link.sock.fileno() < 0:
                return
            self._hear_the_last(link)
            taken = link.taken[0]
            self._let_go(link)
            self._start(link, self._fork)
            again = []
            for command in sorted((c for c in self.commands.values() if c.spawner is link and c.pid is None),
                                  key=lambda c: c.number):
                undelivered = self.again.pop(command.number, None) is not None  # (or refused at its spawn)
                if command.killed or (command.seq is not None and command.seq <= taken and not undelivered):
                    self.kill(command, command.bound)
                    self._finish(command, None)
                else:  # never taken, or refused at its spawn (so it never started either)
                    command.sent = time.monotonic()  # its spawn's timeout starts again
                    again.append(command)
            for command in again:
                outcome = link.hand(command)
                if outcome == GONE:
                    break
                if outcome == FULL:
                    self._hand_later(command)
            else:
                return
        for command in [c for c in self.commands.values() if c.spawner is link and c.pid is None]:
            self.again.pop(command.number, None)
            self.kill(command, command.bound)
            self._finish(command, None)

    def _let_go(self, link):
        """The init's end of ``link``'s spawner closed; the spawner's counts stay its own until
        the init reaps it (:meth:`reaped`)."""
        self.forget(link.sock.fileno())
        link.sock.close()
        self.ended.add(link.pid)

    def _hear_the_last(self, link):
        """What the lost spawner said and the init has yet to read (pids, exits)."""
        while True:
            try:
                data = link.sock.recv(1 << 16)
            except OSError:
                return
            if not data:
                return
            self._spawner_said(link, msgpack.unpackb(data, raw=False))

    def _replace_spawner(self, link):
        """Kill ``link``'s spawner and fork another: it is stopped or wedged (a command may
        stop it: the same uid); its commands are then the init's to reap."""
        try:
            os.kill(link.pid, signal.SIGKILL)
        except OSError:
            pass
        self._spawner_lost(link)

    def _output(self, command):
        try:
            data = os.read(command.pipe, PIPE_BYTES)
        except BlockingIOError:
            return
        if data:
            command.take(data)
        else:
            self._close_pipe(command)

    def _close_pipe(self, command):
        if command.pipe is not None:
            try:
                while data := os.read(command.pipe, PIPE_BYTES):  # what is already written
                    command.take(data)
            except BlockingIOError:
                pass
            self.forget(command.pipe)
            os.close(command.pipe)
            command.pipe = None

    def _finish(self, command, status):
        command.status = status
        self._close_pipe(command)
        if command.bound is None:
            command.bound = self._bound_during(command) or self.meter.check_life(full=False)
            if command.bound is not None and self.cgroups is not None:
                self._empty_slot(command.slot)  # what it left running goes with it
        command.connection.send(_wire.ok(command.request, command.result()))
        self._discard(command)

    def _discard(self, command):
        self._answered(command)
        self._close_pipe(command)
        self.commands.pop(command.number, None)
        self.by_pid.pop(command.pid, None)
        command.connection.commands.pop(command.request, None)
        self._release_slot(command.slot)
        command.spawner.used = time.monotonic()
        if len(self.spawners) > 1:
            self._due(command.spawner.used + self.spawner_idle_s)  # it may be idle then

    def kill(self, command, bound):
        """Kill everything ``command`` started (its slot; without cgroups, its session)."""
        command.bound, command.killed = command.bound or bound, True
        if self.cgroups is not None:
            self._empty_slot(command.slot)
        elif command.pid is not None:
            try:
                os.killpg(command.pid, signal.SIGKILL)
            except OSError:
                pass

    def timeout(self):
        return -1 if self.wake_at is None else min(3600.0, max(0.0, self.wake_at - time.monotonic()))

    def _due(self, when):
        """Wake the loop by ``when`` (the time of a wall, a spawn's timeout, a measure)."""
        self.wake_at = when if self.wake_at is None else min(self.wake_at, when)

    def _next_times(self, command):
        """When ``command`` next needs the loop: its wall, its spawn's timeout, a measure."""
        times = [command.deadline, max(self.next_watch, command.sent + WATCH_S)]
        if command.pid is None:
            times.append(command.sent + SPAWN_TIMEOUT_S)
        return min(times)

    def on_time(self):
        """What is due: walls, a wedged spawner, the measure of what runs long. Only when
        something is (commands are scanned then, not on every event: with 32 running, a
        scan per event cost a quarter of the init's time)."""
        now = time.monotonic()
        if self.wake_at is None or now < self.wake_at:
            return
        self.wake_at = None
        if self.again:
            self._hand_again(now)
        if len(self.spawners) > 1:
            self._retire_idle(now)
        for link in {c.spawner for c in self.commands.values() if c.pid is None and now - c.sent > SPAWN_TIMEOUT_S}:
            self._replace_spawner(link)
        for command in list(self.commands.values()):
            if now >= command.deadline and command.bound is None:
                self.kill(command, "wall")
        if now >= self.next_watch and (self.lingering or any(now - c.sent >= WATCH_S for c in self.commands.values())):
            # only what runs longer than a tick is measured while it runs (a short command is
            # measured at its end): reading /proc each tick would slow the quick ones
            self.next_watch = now + WATCH_S
            self._measure()
        for command in self.commands.values():  # a killed one waits for its exit, watched: its spawner may be stopped
            self._due(self._next_times(command) if command.bound is None else max(self.next_watch, now + WATCH_S))
        if self.lingering:
            self._due(self.next_watch)

    def _measure(self):
        for link in {c.spawner for c in self.commands.values()}:
            if link.stopped():
                self._replace_spawner(link)
        spent = self.meter.check_life(full=True)
        if spent is not None:
            for slot in self.lingering:
                self._empty_slot(slot)
            for command in list(self.commands.values()):
                self.kill(command, spent)
            return
        if self.meter.new_refusals():
            self._stop_charged()
        oom = self.meter.events()[0]
        for command in list(self.commands.values()):
            bound = "memory" if oom > command.before[0] else None
            if bound is None and self.meter.too_many_processes():
                bound = "processes"
            if bound is not None and command.bound is None:
                self.kill(command, bound)

    def _refusals_charged_to(self):
        """The slots the forks refused since the last kill are charged to (those before it
        were charged then, once what it killed had exited: each one since is a live
        process's): the leftovers of ended commands still running, if any (a fork bomb in
        the background, the usual shape: it churns, so the count read now may be below the
        bound it keeps hitting); else, while the bound holds, the running command holding
        the most processes (every running one, where nothing tells them apart); else none."""
        spawners = self.spawner_pids()
        leftovers = {slot for slot in self.lingering if self.cgroups.slot_busy(slot, spawners)}
        if leftovers:
            return leftovers
        if self.meter.at_processes_bound() is False:
            return set()
        running = {c.slot for c in self.commands.values()}
        crowded = self.cgroups.crowded(running, spawners)
        return {crowded} if crowded is not None else running

    def _bound_during(self, command):
        """The bound an event while ``command`` ran says: an OOM kill, or forks refused that
        are charged to its slot."""
        oom, refused = self.meter.events()
        if oom > command.before[0]:
            return "memory"
        if refused > command.before[1] and command.slot in self._refusals_charged_to():
            return "processes"
        return None

    def _stop_charged(self):
        """The processes bound refused forks: stop the slots they are charged to (leftovers
        are killed; a running command ends with the bound) and charge the refusals so far to
        them alone. What has ended is reaped first: the orphans of a bomb that died of the
        bound (bash gives up when a fork stays refused) hold the count until then."""
        self._reap_now()
        charged = self._refusals_charged_to()
        for slot in charged & set(self.lingering):
            self._empty_slot(slot)
        for command in list(self.commands.values()):
            if command.slot in charged:
                self.kill(command, "processes")
        self._refusals_so_far_charged()

    def _empty_slot(self, slot):
        """Kill what runs in ``slot`` (the spawners aside) and wait for it to exit: the forks
        refused until then are charged to it (or to no one), not to what still runs."""
        self.cgroups.kill_slot(slot, self.spawner_pids())
        self._refusals_so_far_charged()

    def _refusals_so_far_charged(self):
        """No check and no command's end counts the forks refused so far again."""
        self.meter.new_refusals()
        refused = self.meter.events()[1]
        for command in self.commands.values():
            command.before = (command.before[0], max(command.before[1], refused))

    def _place(self):
        """The slot and the spawner for a new command: an idle spawner's own slot when it is
        free (nothing moves); else a free or new slot, with a new spawner while the pool may
        grow, else one that moves there (the one with the fewest commands)."""
        link = self._idle_in_free_slot()
        if link is None and self.lingering and self.cgroups is not None:
            parked = {l.slot for l in self.spawners}
            if not self.free_slots or parked & set(self.lingering):  # have their leftovers ended?
                pids = self.spawner_pids()
                still = [s for s in self.lingering if self.cgroups.slot_busy(s, pids)]
                self.free_slots += [s for s in self.lingering if s not in still]
                self.lingering = still
                link = self._idle_in_free_slot()
        if link is not None:
            self.free_slots.remove(link.slot)
            return link.slot, link
        if self.free_slots:
            slot = self.free_slots.pop()
        else:
            slot, self.next_slot = self.next_slot, self.next_slot + 1
        link = self._grow(slot) if len(self.spawners) < self.max_spawners else None
        if link is None:
            load = {l: 0 for l in self.spawners}
            for command in self.commands.values():
                load[command.spawner] += 1
            link = min(self.spawners, key=load.__getitem__)
            link.slot = slot  # it moves there before spawning (see Spawner.spawn)
        return slot, link

    def _idle_in_free_slot(self):
        free = set(self.free_slots)
        return next((link for link in self.spawners if link.slot in free), None)

    def _release_slot(self, slot):
        if self.cgroups is not None and self.cgroups.slot_busy(slot, self.spawner_pids()):
            self.lingering.append(slot)
            self._due(self.next_watch)
        else:
            self.free_slots.append(slot)
