"""The control socket's client: one request, one answer (the protocol is in control.py).

The sbatch wrapper calls this on every GPU submission, so it imports only what a
socket round trip needs; the server and its checks stay in control.py.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Mapping

#: largest line either side sends, newline included; a ping is about 20 bytes.
MAX_REQUEST = 64 * 1024


class ControlUnavailable(Exception):
    """The client got no usable answer: no socket, refused, timed out, or a malformed reply."""


def request(path: str | os.PathLike, doc: Mapping[str, object], timeout: float) -> dict[str, object]:
    """Send one request and return the answer; ``timeout`` bounds everything, connecting included."""
    deadline = time.monotonic() + timeout
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(os.fspath(path))
        sock.sendall(json.dumps(doc).encode() + b"\n")
        data = bytearray()
        while b"\n" not in data:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
            if len(data) > MAX_REQUEST:
                raise ControlUnavailable("the answer is too large")
    except TimeoutError:
        raise ControlUnavailable(f"no answer within {timeout:.2g} s") from None
    except OSError as err:
        reason = os.strerror(err.errno) if err.errno else str(err)
        raise ControlUnavailable(f"{reason}: {os.fspath(path)}") from None
    finally:
        sock.close()
    line = bytes(data).partition(b"\n")[0]
    try:
        reply = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ControlUnavailable("a malformed answer") from None
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        raise ControlUnavailable("a malformed answer")
    return reply
