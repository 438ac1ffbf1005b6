"""The docs hold to the code: generated references current, relative links resolving, README commands real."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from compass_slurm.cli import cli

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = sorted([REPO / "README.md", *DOCS.rglob("*.md")])
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def prose(text: str) -> str:
    """The text less code blocks and code spans, where brackets are code, not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor, repeats numbered as GitHub numbers them (-1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links(page: Path) -> list[str]:
    return [target for target in LINK.findall(prose(page.read_text()))
            if not re.match(r"[a-z][a-z0-9+.-]*:", target)]


def named(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def broken(page: Path, target: str) -> str | None:
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    if not dest.exists():
        return f"{named(page)}: {target}: no such file"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"{named(page)}: {target}: no heading #{anchor} in {named(dest)}"
    return None


def test_every_relative_link_in_the_readme_and_docs_resolves() -> None:
    problems = [p for page in PAGES for target in relative_links(page) if (p := broken(page, target))]
    assert not problems, "\n".join(problems)


def test_the_link_check_finds_a_missing_file_and_a_missing_anchor(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A title, here\n\n## Twice\n\n## Twice\n\n[ok](#a-title-here) [ok](#twice-1) `[no](x.md)`\n")
    assert [broken(page, t) for t in relative_links(page)] == [None, None]
    assert "no such file" in broken(page, "gone.md")
    assert "no heading #nowhere" in broken(page, "#nowhere")


def test_the_generated_references_match_the_code() -> None:
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "gen-docs"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_every_setting_of_config_show_has_an_entry_in_the_configuration_reference() -> None:
    shown = CliRunner().invoke(cli, ["config", "show", "--json"])
    assert shown.exit_code == 0, shown.output
    entries = anchors(DOCS / "configuration.md")
    assert set(json.loads(shown.output)["settings"]) <= entries


def subcommands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    ctx = click.Context(group)
    found = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        found.append((*prefix, name))
        if isinstance(command, click.Group):
            found += subcommands(command, (*prefix, name))
    return found


def test_every_subcommand_has_an_entry_in_the_command_reference() -> None:
    entries = anchors(DOCS / "cli-reference.md")
    missing = [" ".join(path) for path in subcommands(cli) if "-".join(("compass", *path)) not in entries]
    assert not missing, missing


def readme_commands() -> set[tuple[str, ...]]:
    """The subcommand (and sub-subcommand) of every `compass ...` the README shows in code."""
    text = (REPO / "README.md").read_text()
    code = "\n".join([m.group(0) for m in FENCE.finditer(text)] + CODE_SPAN.findall(FENCE.sub("", text)))
    return {tuple(words.split()) for words in re.findall(r"(?:^|[\s`/(])compass((?: [a-z][a-z-]*){1,2})", code, re.M)}


@pytest.mark.parametrize("words", sorted(readme_commands()), ids=" ".join)
def test_every_compass_command_the_readme_shows_exists(words: tuple[str, ...]) -> None:
    # its help, not its run: `compass submit --help` is sbatch's, run in place of this process. The context takes the
    # group's settings as a run does: click keeps a command's help option as the first context it saw named it, and
    # one without -h would leave every later `compass CMD -h` in this process an unknown option
    ctx = click.Context(cli, info_name="compass", **cli.context_settings)
    for word in words:
        if not isinstance(ctx.command, click.Group):
            break  # an argument of the command, not a command
        found = ctx.command.get_command(ctx, word)
        assert found is not None, f"README shows `compass {' '.join(words)}`: no command {word!r}"
        ctx = click.Context(found, info_name=word, parent=ctx)
    assert ctx.command.get_help(ctx).startswith("Usage: compass ")


def test_the_install_guide_and_the_admin_guide_give_the_same_install_commands() -> None:
    """tests/packaging/test_install.py runs the admin guide's block; docs/install.md must say the same."""
    def block(page: str, start: str) -> str:
        text = (DOCS / page).read_text()
        return re.search(r"```sh\n(.*?)```", text[text.index(start):], re.S).group(1)

    assert block("install.md", "## Install") == block("admin-guide.md", "## 1. Install")


def test_the_readme_is_one_page() -> None:
    assert len((REPO / "README.md").read_text().splitlines()) <= 200
