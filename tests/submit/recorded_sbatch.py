"""A stand-in for sbatch that notes every call and answers as a recorded release would (the tests install it as
``sbatch``, behind a ``#!`` line naming this interpreter).

Every call is appended to $FAKE_SBATCH_LOG (argv and stdin). What the wrapper's option reader asks, this answers
from tests/data/sbatch/<release> ($FAKE_SBATCH_DATA): ``--help``, ``--usage``, ``--version``, getopt's list of
every name (``--=``) and its answers to a probe of one name (from options.json, the table read from that release's
real sbatch). Anything else is a submission: "Submitted batch job 4242" (``4242`` with --parsable), exit
$FAKE_SBATCH_EXIT.
"""

import json
import os
import sys
from pathlib import Path

data = Path(os.environ["FAKE_SBATCH_DATA"])
args = sys.argv[1:]
stdin = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
with open(os.environ["FAKE_SBATCH_LOG"], "a") as log:
    log.write(json.dumps({"argv": args, "stdin": stdin}) + "\n")
print("sbatch: warning: recorded", file=sys.stderr)


def text(name: str) -> str:
    return (data / name).read_text()


def answer(out: str, err: str = "", code: int = 0) -> None:
    sys.stdout.write(out)
    sys.stderr.write(err)
    sys.exit(code)


informational = {"--help": "help.txt", "--usage": "usage.txt", "--version": "version.txt"}
if args == ["--="]:
    answer("", text("names.txt"), 255)
if len(args) == 1 and args[0] in informational:
    answer(text(informational[args[0]]))
if len(args) in (2, 3) and args[1] == "--version" and args[0].startswith("--"):
    name, eq, _ = args[0][2:].partition("=")
    arity = json.loads(text("options.json"))["long"].get(name)
    if arity is None:
        answer("", f"sbatch: unrecognized option '{args[0]}'\n", 255)
    if eq and arity == "none":
        answer("", f"sbatch: option '--{name}' doesn't allow an argument\n", 255)
    answer(text("usage.txt" if arity == "required" and not eq else "version.txt"))
print("4242" if "--parsable" in args else "Submitted batch job 4242")
sys.exit(int(os.environ.get("FAKE_SBATCH_EXIT", "0")))
