"""Which Python interpreter Spark's Python workers run for the ``tiered_log`` source.

Spark starts a Python worker for every step of a Python data source (creating it and
planning on the driver, reading on the executors) with the interpreter named by
``PYSPARK_PYTHON`` when the SparkContext was created, and ``python3`` from ``PATH``
when it is unset. In a virtual environment that ``python3`` is usually another
interpreter, without this package or its dependencies, and every query then fails with a
``ModuleNotFoundError`` inside ``PYTHON_DATA_SOURCE_ERROR``.

:func:`worker_python` decides, once, at :func:`tiered_log.spark.register`:

- ``PYSPARK_PYTHON`` unset and a ``local[...]`` master (the workers run on this machine):
  the source's workers run this interpreter (``sys.executable``), which has the package,
  since it is importing it. Other Python code of the session (UDFs) is left as it was.
- Otherwise (the user chose an interpreter, or the executors are elsewhere): the chosen
  interpreter is asked, once, whether it can import the source with the PYTHONPATH Spark
  gives its workers; if it cannot, registering fails with one line saying what to set.
  A cluster's executors may still differ from the driver's machine; that is not checked.

Functions only; call from the driver's thread that registers the source.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from typing import Any

from ..errors import InvalidArgumentError

DEFAULT_EXEC = "python3"
"""What Spark runs when ``PYSPARK_PYTHON`` is unset (``SparkContext.pythonExec``)."""

PROBE_TIMEOUT_S = 60.0
"""How long the interpreter check may take (importing pyspark and pyarrow cold)."""

PROBE = "import tiered_log.spark.source, pyarrow"
"""What a worker imports to unpickle and run the source."""


def _spark_python_path() -> list[str]:
    """The zips Spark puts on its workers' PYTHONPATH (pyspark and py4j)."""
    from pyspark.find_spark_home import _find_spark_home

    return sorted(glob.glob(os.path.join(_find_spark_home(), "python", "lib", "*.zip")))


def probe_error(python: str) -> str | None:
    """Why ``python`` cannot run the source's workers (its last error line), or None."""
    path = shutil.which(python)
    if path is None:
        return f"{python!r} is not an executable on PATH"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [*_spark_python_path(), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    try:
        done = subprocess.run(
            [path, "-c", PROBE],
            env=env,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None  # slow, not broken: let Spark try
    except OSError as exc:
        return f"{python!r} cannot be run ({exc.strerror})"
    if done.returncode == 0:
        return None
    lines = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit status {done.returncode}"


def worker_python(sc: Any) -> str:
    """The interpreter the source's workers should run for SparkContext ``sc``.

    Raises :class:`InvalidArgumentError` (one line naming ``PYSPARK_PYTHON``) when the
    interpreter the user chose, or Spark's default on a non-local master, cannot import
    the source.
    """
    chosen: str = sc.pythonExec
    user_set = "PYSPARK_PYTHON" in os.environ or chosen != DEFAULT_EXEC
    local = str(sc.master).startswith("local")
    if not user_set and local:
        return sys.executable
    if os.path.abspath(shutil.which(chosen) or chosen) == os.path.abspath(sys.executable):
        return chosen
    why = probe_error(chosen)
    if why is None:
        return chosen
    runs = (
        f"PYSPARK_PYTHON={chosen}"
        if user_set
        else f"{chosen!r} from PATH (PYSPARK_PYTHON is unset)"
    )
    raise InvalidArgumentError(
        f"tiered_log source: Spark's Python workers run {runs}, which cannot import the "
        f"source ({why}); set PYSPARK_PYTHON to an interpreter with tiered-log[spark] "
        f"(this one: {sys.executable}) before creating the SparkSession"
    )
