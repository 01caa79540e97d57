"""``tiered-log`` helps a new user: alone it prints its help, every argument of every
command says what it is for, and counts in progress lines read one way."""

from __future__ import annotations

import argparse
import io
from collections.abc import Iterator

import pytest

from tiered_log.cli import build_parser, main
from tiered_log.cli.registry import counted
from tiered_log.cli.service import Progress


def test_tiered_log_alone_prints_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("usage: tiered-log") and "produce" in out and "consume" in out
    assert err == ""
    assert main(["topics"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("usage: tiered-log topics") and "create" in out and err == ""


def _arguments(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _arguments(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction | argparse._VersionAction):
            yield path, action


def test_every_argument_has_help() -> None:
    missing = [
        f"{path}: {'/'.join(a.option_strings) or a.dest}"
        for path, a in _arguments(build_parser(), "tiered-log")
        if not a.help
    ]
    assert missing == []


def test_produce_and_consume_help_show_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["produce", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 500)" in text and "(default: 100)" in text
    assert main(["consume", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: beginning)" in text and "(default: value)" in text
    assert main(["topics", "create", "--help"]) == 0
    assert "(default: 1)" in capsys.readouterr().out


def test_counts_read_one_way() -> None:
    assert counted(1, "file") == "1 file" and counted(2, "file") == "2 files"
    assert counted(0, "segment") == "0 segments" and counted(98_500, "record") == "98,500 records"
    stream = io.StringIO()
    progress = Progress("produced", True, after=0.0, interval=0.0, stream=stream)
    progress.update(98_500)
    assert stream.getvalue().startswith("\rproduced 98,500 records (")
    stream.truncate(0)
    progress.update(1)
    assert "produced 1 record (" in stream.getvalue()
