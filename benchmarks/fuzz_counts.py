"""Run every fuzz target (tests/fuzz) with a larger example budget and print, per parser, the cases tried and
the failures, as a markdown table for the README.

    .venv/bin/python benchmarks/fuzz_counts.py [--examples 1000]

A failure is a fuzz test that let something other than the parser's own clear error escape (or broke a
round-trip property); pytest's report above the table shows the input. Exits 1 when anything failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(examples: int) -> tuple[dict[str, dict[str, int]], int, float]:
    """(parser -> {cases, failures}, pytest's exit code, seconds) for one run of tests/fuzz."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "fuzz.json"
        env = dict(os.environ, COMPASS_FUZZ_EXAMPLES=str(examples), COMPASS_FUZZ_REPORT=str(report))
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/fuzz"],
                              cwd=REPO, env=env)
        took = time.monotonic() - started
        if not report.exists():
            sys.exit(f"fuzz_counts: pytest wrote no report (exit {done.returncode})")
        return json.loads(report.read_text()), done.returncode, took


def table(counts: dict[str, dict[str, int]]) -> str:
    rows = ["| parser | cases tried | failures |", "|---|---:|---:|"]
    rows += [f"| {parser} | {c['cases']:,} | {c['failures']} |" for parser, c in sorted(counts.items())]
    total = sum(c["cases"] for c in counts.values())
    rows.append(f"| **all** | **{total:,}** | **{sum(c['failures'] for c in counts.values())}** |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=1000, help="hypothesis examples per fuzz test (default 1000)")
    args = parser.parse_args()
    counts, code, took = run(args.examples)
    print(f"\nFuzzing, {args.examples} examples per hypothesis test, {took:.0f} s "
          f"(`python benchmarks/fuzz_counts.py --examples {args.examples}`):\n")
    print(table(counts))
    sys.exit(1 if code else 0)


if __name__ == "__main__":
    main()
