"""What every subcommand shares: -h, --json, errors on stderr with a hint and exit code 2 (1 for our own bugs)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

import click

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

#: bumped when a --json document changes shape incompatibly.
SCHEMA_VERSION = 1


class UserError(click.ClickException):
    """An error the user can fix: printed as 'compass: error: ...' plus a hint, exit code 2."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def show(self, file: Any = None) -> None:
        err = file or sys.stderr
        click.echo(f"compass: error: {self.message}", file=err)
        if self.hint:
            click.echo(f"hint: {self.hint}", file=err)


class InternalError(click.ClickException):
    """A bug in compass, not in the input: one line saying so and what to report, exit code 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"compass: internal error (a bug in compass, not in your input): {self.message}; please report it "
                   "with the command line, `compass --version` and the input it read", file=file or sys.stderr)


def json_option(func: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(func)


def emit_json(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=None, separators=(",", ":"), default=str))


def console(stderr: bool = False):
    """A rich console that honours NO_COLOR and pipes (imported lazily: rich is slow to load)."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def check_arguments(args: list[str]) -> None:
    """A UserError for an argument that is not UTF-8: Python hands its bytes on as surrogates, which no database,
    file name or output takes back, so every command would fail on it later, somewhere, with a traceback."""
    for arg in args:
        try:
            arg.encode()
        except UnicodeEncodeError:
            raise UserError(f"argument {os.fsencode(arg)!r} is not UTF-8 text",
                            hint="type it in UTF-8 (check the terminal's and the locale's encoding)") from None


def run_main(group: click.Group) -> None:
    """Run the CLI; engine and input errors become one line on stderr, never a traceback."""
    from ..engine.model import EngineError

    try:
        check_arguments(sys.argv[1:])
        # Without standalone mode click returns ctx.exit()'s code instead of exiting.
        code = group.main(prog_name="compass", standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except click.exceptions.Abort:
        click.echo("compass: aborted", err=True)
        sys.exit(130)
    except click.UsageError as err:  # click's own: a bad option or value, in our one-line form
        click.echo(f"compass: error: {err.format_message()}", err=True)
        click.echo(f"hint: see '{err.ctx.command_path if err.ctx else 'compass'} --help'", err=True)
        sys.exit(err.exit_code)
    except click.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except EngineError as err:
        click.echo(f"compass: error: {err}", err=True)
        sys.exit(2)
    except BrokenPipeError:
        sys.exit(0)
    except OSError as err:  # a file, directory or socket no command turned into its own message
        if err.filename:
            click.echo(f"compass: error: {err.strerror or err}: {err.filename}", err=True)
            click.echo("hint: check that the path exists and that this user may use it", err=True)
        else:  # most often the command's own output (stdout on a full disk, /dev/full)
            click.echo(f"compass: error: cannot write the output: {err.strerror or err}", err=True)
            click.echo("hint: check the free space where the output goes, or send it elsewhere", err=True)
        sys.exit(2)
