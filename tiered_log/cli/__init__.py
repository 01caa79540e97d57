"""The ``tiered-log`` command line: :func:`main`, and the groups of commands it runs.

Commands (``tiered-log COMMAND --help`` for each one's options), one module per group::

    .log      tiered-log append | read | demo           the local log
    .inspect  tiered-log dump | verify | describe       look at logs without changing them
    .perf     tiered-log perf KIND                      benchmarks
    .service  tiered-log serve | topics ... | produce | consume
                                                        the HTTP service and its client
    .cluster  tiered-log dev-cluster                    etcd and N nodes on this machine
    .cluster_status  tiered-log cluster status | reassign | restore
                                                        replicas in sync, moves, restore
    .migrate  tiered-log migrate DIR                    a data directory in the former
                                                        batch format -> Kafka batches

Each group module owns a :class:`~.registry.CommandGroup` named ``COMMANDS`` and
registers its commands on it with the ``@COMMANDS.command(name, help, add_arguments)``
decorator (:mod:`.registry` shows how); :data:`COMMANDS` below includes the groups in the
order ``tiered-log --help`` lists them. Adding a command: write it in its group's module;
adding a group: a new module, included here.

Errors never show a traceback: a bad command line prints one line
``tiered-log: error: <message>`` on stderr and exits 2; any other failure (a
:class:`~tiered_log.errors.TieredLogError`, an ``OSError``) prints one such line and exits
1 (the service's client commands print ``tiered-log: <code>: <message>``). Set
``TIERED_LOG_DEBUG=1`` to get the traceback of an unexpected error. Output goes to
stdout; progress lines and notes go to stderr. ``python -m tiered_log.cli`` runs
:func:`main` too.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from collections.abc import Sequence

from .. import __version__
from ..errors import TieredLogError
from . import archive, cluster, cluster_status, groups, inspect, log, migrate, perf, service
from .registry import PROG, CommandGroup, Parser, UsageError, positive_int

COMMANDS = CommandGroup(PROG)
"""Every ``tiered-log`` command, group by group."""
COMMANDS.include(
    log.COMMANDS,
    inspect.COMMANDS,
    perf.COMMANDS,
    service.COMMANDS,
    cluster.COMMANDS,
    cluster_status.COMMANDS,
    groups.COMMANDS,
    archive.COMMANDS,
    migrate.COMMANDS,
)


def build_parser(words: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``tiered-log`` parser, from :data:`COMMANDS`: for the command ``words`` name
    (only its arguments are set up, see :meth:`~.registry.CommandGroup.install`), or the
    whole parser when ``words`` is None."""
    parser = Parser(prog=PROG, description="A segmented, append-only commit log: tools.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    COMMANDS.install(parser, words=words)
    return parser


def _error(message: str) -> None:
    """The one line every failure prints."""
    text = " ".join(message.split()) or "unknown error"
    with contextlib.suppress(OSError, ValueError):
        print(f"{PROG}: error: {text}", file=sys.stderr, flush=True)


def _os_error_message(exc: OSError) -> str:
    if exc.strerror and exc.filename is not None:
        return f"{exc.strerror}: {exc.filename}"
    return exc.strerror or str(exc)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tiered-log`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        words = list(sys.argv[1:] if argv is None else argv)
        args = build_parser(words).parse_args(words)
        return int(args._run(args))
    except UsageError as exc:
        _error(str(exc))
        return 2
    except SystemExit as exc:  # --help, --version
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:
        # The reader went away (``tiered-log read DIR | head``): stop quietly.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141
    except TieredLogError as exc:
        _error(exc.message)
        return 1
    except OSError as exc:
        _error(_os_error_message(exc))
        return 1
    except Exception as exc:
        if os.environ.get("TIERED_LOG_DEBUG"):
            raise
        _error(f"unexpected {type(exc).__name__}: {exc} (set TIERED_LOG_DEBUG=1 for the traceback)")
        return 1


__all__ = ["COMMANDS", "PROG", "UsageError", "build_parser", "main", "positive_int"]
