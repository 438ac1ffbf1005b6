"""Keep native code's writes off stdout while Python keeps writing there (the drivers' guard).

The Phi* solver (HiGHS, through scipy) may print from native code, which writes to
file descriptor 1 whatever ``sys.stdout`` points at. Commands that stream JSON on
stdout (``compass replay --states``, ``--json`` outputs, the simulator's reports) and
the daemon run inside :func:`native_stdout_silenced`: fd 1 goes to /dev/null, and
when ``sys.stdout`` was fd 1 it is re-opened on a copy of the real stdout, so
Python's own output is unchanged. The engine stays free of I/O.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def native_stdout_silenced() -> Iterator[None]:
    with contextlib.suppress(AttributeError, OSError, ValueError):
        sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no fd 1 at all: nothing to keep clean
        yield
        return
    old = sys.stdout
    try:
        python_on_fd1 = old.fileno() == 1
    except (AttributeError, OSError, ValueError):  # a capture (tests, click's runner): not fd 1
        python_on_fd1 = False
    replaced = None
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
        if python_on_fd1:
            replaced = io.TextIOWrapper(
                io.FileIO(os.dup(saved), "w"),
                encoding=old.encoding,
                errors=old.errors,
                line_buffering=old.line_buffering,
                write_through=True,
            )
            sys.stdout = replaced
        yield
    finally:
        if replaced is not None:
            with contextlib.suppress(OSError, ValueError):
                replaced.flush()
            sys.stdout = old
            replaced.close()
        os.dup2(saved, 1)
        os.close(saved)
