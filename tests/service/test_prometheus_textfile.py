"""The Prometheus textfile the daemon writes every cycle."""

from __future__ import annotations

import re
from pathlib import Path

from compass_slurm.service.prometheus import Totals, render, write_textfile
from compass_slurm.service.store import SampleRecord

SAMPLE = SampleRecord(nodes=16, gpus=128, gpus_used=22, partial=2, phi_star=1, sif=0.0625, sif_bound=0.125,
                      wcc=True, queue_len=3, pending_gpus=14, orphans=1, abs_violations=2, duration=0.25)
LINE = re.compile(r"^(# (HELP|TYPE) \w+ .+|[a-z_]+ -?[0-9.e+-]+)$")


def values(text: str) -> dict[str, str]:
    return dict(line.split(" ") for line in text.splitlines() if not line.startswith("#"))


def test_render_is_valid_exposition_format() -> None:
    totals = Totals().plus(decisions=3, migrations=2, migrations_failed=1, errors=1).plus(decisions=1)
    text = render(SAMPLE, totals, 1796003000.0)
    assert all(LINE.match(line) for line in text.splitlines()), text
    got = values(text)
    assert got["compass_sif"] == "0.0625" and got["compass_partial_nodes"] == "2" and got["compass_wcc"] == "1"
    assert (got["compass_cycles_total"], got["compass_decisions_total"], got["compass_migrations_total"],
            got["compass_migrations_failed_total"], got["compass_errors_total"]) == ("2", "4", "2", "1", "1")
    assert "# TYPE compass_decisions_total counter" in text and "# TYPE compass_sif gauge" in text


def test_a_skipped_cycle_keeps_only_counters() -> None:
    got = values(render(None, Totals().plus(errors=1), 5.0))
    assert "compass_sif" not in got and got["compass_errors_total"] == "1"


def test_write_replaces_the_file_atomically(tmp_path: Path) -> None:
    target = tmp_path / "textfile" / "compass.prom"
    write_textfile(target, SAMPLE, Totals(), 1.0)
    write_textfile(target, None, Totals().plus(), 2.0)
    assert values(target.read_text())["compass_cycles_total"] == "1"
    assert [p.name for p in target.parent.iterdir()] == ["compass.prom"]  # no temporary left behind
