"""pytest plugin for the notebook runs (``-p tests.nbval_plugin``; tools/check_colab.py copies it).

* The kernels nbval starts get the same environment as ``make notebooks`` (offline, CPU): from
  ``tools/course_config.py`` in a checkout; where the file runs alone (the clean environments of
  tools/check_colab.py) that runner has already set the environment.
* nbval compares every output stream; the course compares stdout and rich outputs strictly
  and leaves stderr (library warnings) out of the comparison.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
try:
    import course_config
except ImportError:  # running alone, outside the repository
    course_config = None


def pytest_configure(config):  # pytest hook signature: arguments unused
    if course_config is not None:
        os.environ.update(course_config.COURSE_ENV)


def pytest_collection_modifyitems(session, config, items):  # pytest hook signature: arguments unused
    for item in items:
        parent = getattr(item, "parent", None)
        skip = getattr(parent, "skip_compare", None)
        if skip is not None and "stderr" not in skip:
            parent.skip_compare = tuple(skip) + ("stderr",)
