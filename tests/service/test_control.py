"""The control socket: a real ControlServer in a thread on a socket in a temporary directory."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compass_slurm.service.control import (
    MAX_REQUEST, ControlError, ControlServer, ControlUnavailable, Peer, Refused, RequestError, request,
    require_owner,
)

NOBODY = 65534
#: job -> owner uid, as the daemon would know it from Slurm
OWNERS = {"101": 0, "202": NOBODY}


class Handlers:
    """Test handlers for the built-in ops; they remember what they were asked."""

    def __init__(self) -> None:
        self.submitted: list[tuple[str, Peer]] = []

    def ping(self, doc: dict[str, Any], peer: Peer) -> dict[str, Any]:
        return {"policy": "compass", "cycle": 7, "uid": peer.uid, "pid": peer.pid}

    def submitted_op(self, doc: dict[str, Any], peer: Peer) -> dict[str, Any]:
        self.submitted.append((doc["job"], peer))
        return {}

    def job(self, doc: dict[str, Any], peer: Peer) -> dict[str, Any]:
        if doc["job"] not in OWNERS:
            raise RequestError(f"no job {doc['job']}")
        require_owner(peer, OWNERS[doc["job"]], daemon_uid=4242)
        return {"job": doc["job"], "state": "PENDING"}

    def table(self) -> dict[str, Any]:
        return {"ping": self.ping, "submitted": self.submitted_op, "job": self.job}


@pytest.fixture
def rundir() -> Iterator[Path]:
    """A directory every uid can traverse (tmp_path is 0700), so another uid's client can reach the socket."""
    path = Path(tempfile.mkdtemp(prefix="compass-ctl-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def handlers() -> Handlers:
    return Handlers()


@pytest.fixture
def server(rundir: Path, handlers: Handlers) -> Iterator[ControlServer]:
    with ControlServer(rundir / "sock" / "compass.sock", handlers.table()) as srv:
        yield srv


def raw(path: Path, data: bytes, shutdown: bool = True) -> dict[str, Any]:
    """Send bytes as they are and read the one-line answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(str(path))
        sock.sendall(data)
        if shutdown:
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    return json.loads(answer)


def test_ping_carries_the_callers_credentials(server: ControlServer) -> None:
    reply = request(server.path, {"op": "ping"}, timeout=2)
    assert reply == {"ok": True, "policy": "compass", "cycle": 7, "uid": os.getuid(), "pid": os.getpid()}


def test_socket_and_directory_modes(server: ControlServer) -> None:
    assert stat.S_ISSOCK(server.path.stat().st_mode)
    assert stat.S_IMODE(server.path.stat().st_mode) == 0o666
    assert stat.S_IMODE(server.path.parent.stat().st_mode) == 0o755


def test_submitted_normalises_the_job_id(server: ControlServer, handlers: Handlers) -> None:
    assert request(server.path, {"op": "submitted", "job": 31}, timeout=2) == {"ok": True}
    assert request(server.path, {"op": "submitted", "job": "32_4"}, timeout=2) == {"ok": True}
    assert [job for job, _ in handlers.submitted] == ["31", "32_4"]
    assert handlers.submitted[0][1].uid == os.getuid()


@pytest.mark.parametrize(("data", "error"), [
    (b"not json\n", "not valid JSON"),
    (b"\xff\xfe\n", "not valid JSON"),
    (b"[1, 2]\n", "must be a JSON object"),
    (b"{}\n", "needs an 'op' string"),
    (b'{"op": 5}\n', "needs an 'op' string"),
    (b'{"op": "shutdown"}\n', "unknown op 'shutdown'; known: job, ping, submitted"),
    (b'{"op": "submitted"}\n', "needs the field 'job'"),
    (b'{"op": "submitted", "job": "12; scancel 1"}\n', "not a valid Slurm job id"),
    (b'{"op": "submitted", "job": true}\n', "not a valid Slurm job id"),
    (b'{"op": "submitted", "job": 1.5}\n', "not a valid Slurm job id"),
    (b'{"op": "ping", "user": "root"}\n', "takes no field 'user'"),
    (b'{"op": "ping"}', "must end with a newline"),
    (b'{"op": "ping", "pad": "' + b"x" * MAX_REQUEST + b'"}\n', f"larger than {MAX_REQUEST} bytes"),
])
def test_malformed_requests_are_answered_and_the_server_lives_on(
        server: ControlServer, data: bytes, error: str) -> None:
    reply = raw(server.path, data)
    assert reply["ok"] is False
    assert error in reply["error"]
    assert request(server.path, {"op": "ping"}, timeout=2)["ok"] is True


def test_a_failing_handler_answers_an_error(rundir: Path) -> None:
    def broken(doc: dict[str, Any], peer: Peer) -> dict[str, Any]:
        raise KeyError("bug")

    with ControlServer(rundir / "c.sock", {"ping": broken, "job": broken}) as srv:
        assert request(srv.path, {"op": "ping"}, timeout=2) == {"ok": False,
                                                               "error": "internal error in 'ping': KeyError"}
        assert request(srv.path, {"op": "job", "job": "1"}, timeout=2)["ok"] is False
        # a handler not registered is an unknown op, even if it is a built-in name
        assert "unknown op 'submitted'" in request(srv.path, {"op": "submitted", "job": "1"}, timeout=2)["error"]


def test_extra_ops_need_a_field_description(rundir: Path) -> None:
    with pytest.raises(ControlError, match="no field description for op\\(s\\) drain"):
        ControlServer(rundir / "c.sock", {"drain": lambda doc, peer: {}})
    with ControlServer(rundir / "c.sock", {"drain": lambda doc, peer: {"n": doc["n"]}},
                       fields={"drain": {"n": int}}) as srv:
        assert request(srv.path, {"op": "drain", "n": 3}, timeout=2) == {"ok": True, "n": 3}
        assert request(srv.path, {"op": "drain", "n": "3"}, timeout=2) == {
            "ok": False, "error": "field 'n' must be a int, not str"}
        assert request(srv.path, {"op": "drain", "n": True}, timeout=2)["ok"] is False


def test_a_silent_client_does_not_block_others(server: ControlServer) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as idle:
        idle.connect(str(server.path))
        started = time.monotonic()
        assert request(server.path, {"op": "ping"}, timeout=2)["ok"] is True
        assert time.monotonic() - started < 1.0


def test_own_job_allowed_other_users_job_refused(server: ControlServer) -> None:
    """Root may ask about anyone's job; uid 65534, in a forked child, only about its own."""
    assert request(server.path, {"op": "job", "job": "202"}, timeout=2)["state"] == "PENDING"
    if os.geteuid() != 0:
        pytest.skip("needs root to run a client as another uid")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become nobody, ask, report, and leave without running pytest's teardown
        try:
            os.close(read)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            answers = [request(server.path, {"op": "job", "job": job}, timeout=2) for job in ("101", "202")]
            answers.append(request(server.path, {"op": "ping"}, timeout=2))
            os.write(write, json.dumps(answers).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    theirs, own, ping = json.loads(data)
    assert theirs == {"ok": False, "error": f"uid {NOBODY} may not access a job owned by uid 0"}
    assert own == {"ok": True, "job": "202", "state": "PENDING"}
    assert ping["uid"] == NOBODY


def test_require_owner() -> None:
    nobody = Peer(uid=NOBODY, gid=NOBODY, pid=1)
    require_owner(nobody, NOBODY, daemon_uid=4242)
    require_owner(nobody, "nobody", daemon_uid=4242)
    require_owner(Peer(uid=0, gid=0, pid=1), NOBODY, daemon_uid=4242)  # root
    require_owner(Peer(uid=4242, gid=0, pid=1), NOBODY, daemon_uid=4242)  # the daemon's own uid
    with pytest.raises(Refused, match="uid 65534 may not access a job owned by uid 0"):
        require_owner(nobody, "root", daemon_uid=4242)
    with pytest.raises(Refused, match="not a known user"):
        require_owner(nobody, "no-such-user-here", daemon_uid=4242)


def test_stale_socket_replaced_live_one_kept(rundir: Path, handlers: Handlers) -> None:
    path = rundir / "c.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens: a daemon that died
    with ControlServer(path, handlers.table()) as srv:
        assert request(path, {"op": "ping"}, timeout=2)["ok"] is True
        with pytest.raises(ControlError, match="already listening"):
            ControlServer(path, handlers.table()).start()
        assert request(srv.path, {"op": "ping"}, timeout=2)["ok"] is True
    assert not path.exists()
    with pytest.raises(ControlUnavailable, match=f"No such file or directory: {path}"):
        request(path, {"op": "ping"}, timeout=1)
    plain = path.with_name("plain")
    plain.write_text("")
    with pytest.raises(ControlUnavailable, match=f"Not a directory: {plain / 'x'}"):  # whatever the error: the path
        request(plain / "x", {"op": "ping"}, timeout=1)


def test_refuses_unsafe_places(rundir: Path, handlers: Handlers) -> None:
    (rundir / "file").write_text("")
    with pytest.raises(ControlError, match="exists and is not a socket"):
        ControlServer(rundir / "file", handlers.table()).start()
    shared = rundir / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ControlError, match="writable by group or others \\(mode 777\\)"):
        ControlServer(shared / "c.sock", handlers.table()).start()
    with pytest.raises(ControlError, match="longer than 107 bytes"):
        ControlServer(rundir / ("x" * 120), handlers.table()).start()


def test_client_gives_up_on_a_hung_server(rundir: Path) -> None:
    path = rundir / "hung.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as hung:
        hung.bind(str(path))
        hung.listen(8)  # accepts connections (in the backlog) and never answers
        started = time.monotonic()
        with pytest.raises(ControlUnavailable, match="no answer within 0.3 s"):
            request(path, {"op": "ping"}, timeout=0.3)
        assert time.monotonic() - started < 2.0


@pytest.mark.parametrize("answer", [b"garbage\n", b"[]\n", b'{"cycle": 1}\n', b""])
def test_client_rejects_malformed_answers(rundir: Path, answer: bytes) -> None:
    path = rundir / "odd.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as odd:
        odd.bind(str(path))
        odd.listen(1)

        def serve() -> None:
            conn, _ = odd.accept()
            conn.recv(4096)
            conn.sendall(answer)
            conn.close()

        thread = threading.Thread(target=serve)
        thread.start()
        with pytest.raises(ControlUnavailable, match="malformed answer"):
            request(path, {"op": "ping"}, timeout=2)
        thread.join()
