"""Public names of a package imported on first use (PEP 562).

A package's ``__init__`` that re-exports its public classes would otherwise import every
module behind them, and their libraries, whenever any one of its modules is imported:
the command line's client commands and the tier's worker process would start by importing
the log, the broker and the HTTP models. A package lists its exports instead::

    __getattr__, __dir__ = lazy_exports(__name__, globals(), {"Log": ".local.log"})

and declares the same names under ``if TYPE_CHECKING:`` for type checkers. The first
access imports the module and stores the name in the package, so later accesses are
plain attribute reads. Imports take Python's import lock: safe from any thread.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, namespace: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package`` (whose globals are
    ``namespace``) for ``exports``: public name -> module, relative to ``package``."""

    def __getattr__(name: str) -> Any:
        where = exports.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
