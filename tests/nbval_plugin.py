"""pytest plugin for the notebook run (``-p tests.nbval_plugin``).

* The kernels nbval starts get the same environment as ``make notebooks`` (offline, CPU).
* nbval compares every output stream; the course compares stdout and rich outputs strictly
  and leaves stderr (progress bars, library warnings) out of the comparison.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import course_config  # noqa: E402


def pytest_configure(config):  # noqa: ARG001 - pytest hook signature
    os.environ.update(course_config.COURSE_ENV)


def pytest_collection_modifyitems(session, config, items):  # noqa: ARG001 - pytest hook signature
    for item in items:
        parent = getattr(item, "parent", None)
        skip = getattr(parent, "skip_compare", None)
        if skip is not None and "stderr" not in skip:
            parent.skip_compare = tuple(skip) + ("stderr",)
