"""How a ``tiered-log`` command is declared, and what every command shares.

Each command group module (:mod:`.log`, :mod:`.inspect`, :mod:`.perf`, :mod:`.service`)
owns one :class:`CommandGroup` named ``COMMANDS`` and registers its commands on it with
the :meth:`CommandGroup.command` decorator; :mod:`tiered_log.cli` includes the groups, in
order, in the root group and builds the argparse parser from it. A command is one
function ``(args) -> exit status`` and one function adding its arguments::

    COMMANDS = CommandGroup()

    def _serve_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--port", type=int, default=8080)

    @COMMANDS.command("serve", "run the HTTP service", _serve_args)
    def cmd_serve(args: argparse.Namespace) -> int:
        ...
        return 0

A nested group works the same way (``PERF = COMMANDS.group("perf", ...)``, then
``@PERF.command("ship", ...)`` adds ``tiered-log perf ship``). Raise :class:`UsageError`
for a bad argument found after parsing (exit status 2); raise the library's errors (or
let ``OSError`` through) for everything else (exit status 1). Keep imports of heavy
modules (the service, boto3, benchmarks) inside the command function so that every
command starts fast.

Also here: the argument types (:func:`positive_int`, :func:`non_negative_int`,
:func:`timestamp_ms`), the ``--progress`` flag, the stderr note, and :func:`counted`
(how numbers of things are written). Registration happens
at import time, in one thread.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import NoReturn

PROG = "tiered-log"


class UsageError(Exception):
    """A bad command line: reported in one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises UsageError instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


Runner = Callable[[argparse.Namespace], int]
"""A subcommand: parsed arguments in, exit status out."""
Configure = Callable[[argparse.ArgumentParser], None]
"""Adds a subcommand's arguments to its parser."""


def _help_of(parser: argparse.ArgumentParser) -> Runner:
    """The runner of a group given no command: prints the group's help, exit status 0."""

    def show_help(args: argparse.Namespace) -> int:
        parser.print_help()
        return 0

    return show_help


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """Configure for a subcommand without arguments."""


@dataclass(frozen=True, slots=True)
class Command:
    """One registered subcommand."""

    name: str
    help: str
    configure: Configure
    run: Runner


class CommandGroup:
    """An ordered registry of subcommands and nested groups (``tiered-log perf ...``).

    Register with the :meth:`command` decorator, nest with :meth:`group`, merge another
    module's group with :meth:`include`; :meth:`install` adds everything to an argparse
    parser. Registration happens at import time, in one thread.
    """

    def __init__(self, name: str = "", help: str = "") -> None:
        self.name = name
        self.help = help
        self.entries: dict[str, Command | CommandGroup] = {}

    def _add(self, name: str, entry: Command | CommandGroup) -> None:
        if name in self.entries:
            where = f"{self.name} {name}" if self.name else name
            raise ValueError(f"subcommand {where} is registered twice")
        self.entries[name] = entry

    def command(
        self, name: str, help: str, configure: Configure | None = None
    ) -> Callable[[Runner], Runner]:
        """Decorator registering ``fn`` as subcommand ``name`` (arguments by ``configure``)."""

        def register(fn: Runner) -> Runner:
            self._add(name, Command(name, help, configure or _no_arguments, fn))
            return fn

        return register

    def group(self, name: str, help: str) -> CommandGroup:
        """A nested group of subcommands, e.g. ``perf``."""
        g = CommandGroup(name, help)
        self._add(name, g)
        return g

    def include(self, *groups: CommandGroup) -> None:
        """Add the entries of ``groups`` (each a command group module's ``COMMANDS``), in
        order; a name registered twice is an error."""
        for g in groups:
            for name, entry in g.entries.items():
                self._add(name, entry)

    def install(
        self,
        parser: argparse.ArgumentParser,
        path: str = PROG,
        words: Sequence[str] | None = None,
    ) -> None:
        """Add every registered subcommand (and group, recursively) to ``parser``;
        ``path`` is the command line that leads to this group (``tiered-log perf``).

        ``words``: the command line being parsed (``sys.argv[1:]``). Then only the command
        it names gets its arguments: setting up a command's arguments may import what its
        defaults come from (the service's settings, a benchmark's module), and a command
        should not start by paying for every other one. The others are still listed in
        the help, and a name that is none of them is still a usage error. None: every
        command gets its arguments (the whole parser)."""
        sub = parser.add_subparsers(
            title="commands", metavar="COMMAND", dest=f"_{path.replace(' ', '_').replace('-', '_')}"
        )
        # Without a command (``tiered-log``, ``tiered-log topics``): the group's help, as
        # rpk does, not an error; a command chosen sets its own ``_run`` over this one.
        parser.set_defaults(_run=_help_of(parser))
        chosen, rest = _first_word(words)
        for name, entry in self.entries.items():
            p = sub.add_parser(name, help=entry.help, description=entry.help)
            if words is not None and name != chosen:
                continue
            if isinstance(entry, CommandGroup):
                entry.install(p, f"{path} {name}", None if words is None else rest)
            else:
                entry.configure(p)
                p.set_defaults(_run=entry.run)


def _first_word(words: Sequence[str] | None) -> tuple[str | None, Sequence[str]]:
    """The first word of ``words`` that is not an option (a group's own options, ``-h`` and
    ``--version``, take no value), and the words after it."""
    words = words or ()
    for i, word in enumerate(words):
        if not word.startswith("-"):
            return word, words[i + 1 :]
    return None, ()


# ---- argument types ----------------------------------------------------------------------


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 (offsets, timestamps)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {v}")
    return v


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (counts, sizes); accepts ``_`` separators."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def timestamp_ms(text: str) -> int:
    """argparse type: milliseconds since the epoch, or an ISO 8601 date-time (UTC if no zone)."""
    try:
        v = int(text)
    except ValueError:
        try:
            dt = datetime.fromisoformat(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected milliseconds since the epoch or an ISO 8601 date-time, got {text!r}"
            ) from None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        # exact: dt.timestamp() * 1000 is a float (1.003 s gave 1002 ms)
        v = (dt - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {v}")
    return v


def progress_flag(p: argparse.ArgumentParser) -> None:
    """``--progress`` / ``--no-progress`` (default: only when stderr is a terminal)."""
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show progress on stderr (default: only when stderr is a terminal)",
    )


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun, as every progress line and summary writes them: digits grouped
    by commas, the plural from 0 and 2 on (``1 record``, ``98,500 records``)."""
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"


def note(message: str) -> None:
    """A one-line note on stderr (not an error)."""
    print(f"{PROG}: {message}", file=sys.stderr)


__all__ = [
    "PROG",
    "Command",
    "CommandGroup",
    "Configure",
    "Parser",
    "Runner",
    "UsageError",
    "counted",
    "non_negative_int",
    "note",
    "positive_int",
    "progress_flag",
    "timestamp_ms",
]
