"""The daemon's control socket: a Unix-socket request/response server and its client.

Protocol: one request per connection, one JSON object on one line, answered by
one JSON object on one line. Every answer carries ``ok``; a failed request
answers ``{"ok": false, "error": "..."}`` and the server keeps serving.

Built-in ops (the daemon registers their handlers):

- ``ping``                     -> ``{"ok": true, "policy": ..., "cycle": n, "looks": n, "role": "leader" | "standby",
  "leader": {"host", "pid", "since", "token"} or null}`` (service/leader.py)
- ``submitted`` ``job``        -> the daemon runs an early cycle for the new job
- ``job``       ``job``        -> the status of a job the caller owns

Permissions. The socket file is mode 0666 inside a directory of mode 0755 owned
by the daemon user: every cluster user's wrapper can connect (connecting needs
write permission on the socket), while nobody but the daemon user can remove or
replace the socket (that needs write permission on the directory). Who may do
what is decided per request from the kernel's SO_PEERCRED credentials of the
caller, never from anything the caller says about itself: a user may only ask
about or act on their own jobs (``require_owner``); root and the daemon's own
uid may do anything.

The client (``request``) is in control_client.py: the sbatch wrapper uses it and must
start fast, so it imports nothing of the server (threads, logging, paths, name checks).
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import select
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# the client lives apart, so that the wrapper imports nothing of the server
from .control_client import MAX_REQUEST, ControlUnavailable, request

__all__ = ["ControlError", "ControlServer", "ControlUnavailable", "MAX_REQUEST", "Peer", "Refused", "RequestError",
           "request", "require_owner", "validate"]

log = logging.getLogger(__name__)

SOCKET_MODE = 0o666
DIRECTORY_MODE = 0o755
#: a connection that has not sent its whole request by then is dropped (a hung client must not pin a thread).
READ_TIMEOUT = 2.0
#: connections handled at once; more are answered "busy" straight away.
MAX_CLIENTS = 128
_UNIX_PATH_MAX = 107  # sun_path is 108 bytes including the terminating NUL

#: op -> its fields and their types; every field is required and no other field is allowed.
BUILTIN_FIELDS: dict[str, dict[str, type]] = {
    "ping": {},
    "submitted": {"job": str},
    "job": {"job": str},
}


class ControlError(Exception):
    """The server cannot start: a bad socket path, a directory others may write to, a daemon already there."""


class RequestError(Exception):
    """Raised by a handler for a request it will not serve; the message goes back as ``error``."""


class Refused(RequestError):
    """The caller may not ask this (another user's job)."""


@dataclass(frozen=True, slots=True)
class Peer:
    """Who is on the other end of a connection, as the kernel says (SO_PEERCRED)."""

    uid: int
    gid: int
    pid: int


Handler = Callable[[dict[str, Any], Peer], dict[str, Any]]


def require_owner(peer: Peer, owner: int | str, daemon_uid: int | None = None) -> None:
    """Refuse unless the caller owns the job (``owner``: a uid or a user name), is root, or is the daemon's uid."""
    admin = {0, os.geteuid() if daemon_uid is None else daemon_uid}
    if peer.uid in admin:
        return
    if isinstance(owner, str):
        try:
            owner = pwd.getpwnam(owner).pw_uid
        except KeyError:
            raise Refused(f"the job's owner {owner!r} is not a known user") from None
    if peer.uid != owner:
        raise Refused(f"uid {peer.uid} may not access a job owned by uid {owner}")


def validate(doc: Any, fields: Mapping[str, Mapping[str, type]]) -> dict[str, Any]:
    """The request if it is well formed: an object with a known ``op`` and exactly that op's fields."""
    from ..slurm import names  # here, not at the top: the wrapper imports this module for the client only
    from ..slurm.errors import SlurmNameError

    if not isinstance(doc, dict):
        raise RequestError("the request must be a JSON object")
    op = doc.get("op")
    if not isinstance(op, str):
        raise RequestError("the request needs an 'op' string")
    if op not in fields:
        raise RequestError(f"unknown op {op!r}; known: {', '.join(sorted(fields))}")
    expected = fields[op]
    extra = sorted(set(doc) - set(expected) - {"op"})
    if extra:
        raise RequestError(f"op {op!r} takes no field {', '.join(map(repr, extra))}")
    for name, kind in expected.items():
        if name not in doc:
            raise RequestError(f"op {op!r} needs the field {name!r}")
        value = doc[name]
        # a job id may come as a number or a string; it is always checked against Slurm's syntax
        if name == "job":
            try:
                doc[name] = names.job_id(value)
            except SlurmNameError:
                raise RequestError(f"field 'job' is not a valid Slurm job id: {value!r}") from None
        elif not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise RequestError(f"field {name!r} must be a {kind.__name__}, not {type(value).__name__}")
    return doc


class ControlServer:
    """Serves ``handlers`` (op -> handler) on a Unix socket from a daemon thread.

    ``fields`` adds ops beyond the built-in ones (op -> field -> type); every op
    with a handler must be described by one of the two.
    """

    def __init__(self, path: str | os.PathLike, handlers: Mapping[str, Handler],
                 fields: Mapping[str, Mapping[str, type]] | None = None) -> None:
        self.path = Path(path)
        self.handlers = dict(handlers)
        self.fields = {**BUILTIN_FIELDS, **(fields or {})}
        undescribed = sorted(set(self.handlers) - set(self.fields))
        if undescribed:
            raise ControlError(f"no field description for op(s) {', '.join(undescribed)}")
        self.fields = {op: f for op, f in self.fields.items() if op in self.handlers}
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._slots = threading.BoundedSemaphore(MAX_CLIENTS)
        self._inode: int | None = None
        self._wake: tuple[int, int] | None = None  # a pipe whose write end wakes the accept loop for stop()

    def start(self) -> None:
        if len(os.fsencode(self.path)) > _UNIX_PATH_MAX:
            raise ControlError(f"socket path {self.path} is longer than {_UNIX_PATH_MAX} bytes")
        self._prepare_directory()
        self._remove_stale_socket()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(self.path))
            os.chmod(self.path, SOCKET_MODE)
            sock.listen(MAX_CLIENTS)
            sock.setblocking(False)  # a client gone between select() and accept() must not block the loop
        except OSError as err:
            sock.close()
            raise ControlError(f"cannot listen on {self.path}: {err.strerror or err}") from None
        self._inode = os.stat(self.path).st_ino
        self._sock = sock
        self._wake = os.pipe()
        self._stopping.clear()
        self._thread = threading.Thread(target=self._serve, name="compass-control", daemon=True)
        self._thread.start()
        log.info("control socket listening on %s", self.path)

    def stop(self) -> None:
        self._stopping.set()
        if self._wake is not None:
            os.write(self._wake[1], b"x")
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._wake is not None:
            for fd in self._wake:
                os.close(fd)
            self._wake = None
        # remove the socket only if it is still ours (not one a newer daemon created meanwhile)
        try:
            if self._inode is not None and os.stat(self.path).st_ino == self._inode:
                self.path.unlink()
        except FileNotFoundError:
            pass
        self._inode = None

    def __enter__(self) -> ControlServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _prepare_directory(self) -> None:
        directory = self.path.parent
        try:
            if not directory.exists():
                directory.mkdir(mode=DIRECTORY_MODE, parents=True)
                os.chmod(directory, DIRECTORY_MODE)  # mkdir's mode is cut by the umask
            info = directory.stat()
        except OSError as err:
            raise ControlError(f"cannot prepare the socket directory {directory}: {err.strerror or err}") from None
        # others able to write the directory could swap the socket for their own (unless it is sticky)
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
            raise ControlError(f"{directory} is writable by group or others (mode {stat.S_IMODE(info.st_mode):o}); "
                               f"use a directory only the daemon user can write, mode {DIRECTORY_MODE:o}")

    def _remove_stale_socket(self) -> None:
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(info.st_mode):
            raise ControlError(f"{self.path} exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(str(self.path))
        except OSError:
            self.path.unlink()  # left behind by a daemon that died
            return
        finally:
            probe.close()
        raise ControlError(f"another process is already listening on {self.path}")

    def _serve(self) -> None:
        assert self._sock is not None and self._wake is not None
        while not self._stopping.is_set():
            readable, _, _ = select.select([self._sock, self._wake[0]], [], [])
            if self._sock not in readable:
                continue
            try:
                conn, _ = self._sock.accept()
            except BlockingIOError:
                continue
            except OSError as err:
                if self._stopping.is_set():
                    return
                log.error("control socket accept failed: %s", err)
                time.sleep(0.1)
                continue
            if not self._slots.acquire(blocking=False):
                self._answer(conn, {"ok": False, "error": "busy: too many connections, try again"})
                conn.close()
                continue
            threading.Thread(target=self._handle, args=(conn,), name="compass-control-conn", daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            with conn:
                conn.settimeout(READ_TIMEOUT)
                try:
                    peer = peer_of(conn)
                    doc = validate(_parse(_read_line(conn)), self.fields)
                    reply = self._dispatch(doc, peer)
                except RequestError as err:
                    reply = {"ok": False, "error": str(err)}
                except (TimeoutError, ConnectionError):
                    return  # the client gave up or never finished its request: nobody to answer
                self._answer(conn, reply)
        finally:
            self._slots.release()

    def _dispatch(self, doc: dict[str, Any], peer: Peer) -> dict[str, Any]:
        try:
            result = self.handlers[doc["op"]](doc, peer)
        except RequestError:
            raise
        except Exception as err:  # a handler bug answers this request, never ends the server
            log.exception("control op %r from uid %d failed", doc["op"], peer.uid)
            return {"ok": False, "error": f"internal error in {doc['op']!r}: {type(err).__name__}"}
        return {"ok": True, **result}

    @staticmethod
    def _answer(conn: socket.socket, reply: dict[str, Any]) -> None:
        try:
            conn.sendall(json.dumps(reply, default=str).encode() + b"\n")
        except OSError:
            pass  # the client is gone; its wrapper has already fallen back


def peer_of(conn: socket.socket) -> Peer:
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return Peer(uid=uid, gid=gid, pid=pid)


def _read_line(conn: socket.socket) -> bytes:
    data = bytearray()
    while b"\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST:
            raise RequestError(f"request larger than {MAX_REQUEST} bytes")
    line, newline, _ = bytes(data).partition(b"\n")
    if not newline:
        raise RequestError("the request must end with a newline")
    return line


def _parse(line: bytes) -> Any:
    try:
        return json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise RequestError(f"the request is not valid JSON: {err}") from None
