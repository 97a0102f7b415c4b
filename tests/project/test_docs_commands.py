"""Every `pipedeck ...` command line in docs/*.md code blocks parses with today's CLI: its command and flags exist and
its values are accepted (files the docs create earlier in their own walk-through need not exist here)."""

from __future__ import annotations

import re
import shlex

import click
import pytest

from pipedeck.console.cli import cli
from tests.paths import ROOT

DOCS = ROOT / "docs"


def command_lines() -> list[tuple[str, str]]:
    """(doc, line) for each command line: continuation lines joined, comments and placeholder lines (`...`,
    `[--optional]`) and console screen captures (`pipedeck  1 Live ...`) left out."""
    lines = []
    for doc in sorted(DOCS.glob("*.md")):
        for block in re.findall(r"```[a-z]*\n(.*?)```", doc.read_text(), flags=re.S):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = line.strip()
                if line.startswith("pipedeck ") and "..." not in line and "[" not in line and "  1 Live" not in line:
                    lines.append((doc.name, line))
    return lines


def test_the_docs_have_command_lines_to_check():
    assert len(command_lines()) >= 30


@pytest.mark.parametrize(("doc", "line"), command_lines())
def test_a_docs_command_line_parses(doc, line):
    words = shlex.split(line, comments=True)[1:]
    ctx = cli.make_context("pipedeck", list(words))
    name, command, rest = cli.resolve_command(ctx, words)
    try:
        command.make_context(name, rest, parent=ctx)
    except click.BadParameter as err:  # a file an earlier step of the doc writes: the flag itself was accepted
        assert "does not exist" in err.message, f"{doc}: {line}: {err.format_message()}"
