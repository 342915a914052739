"""Settings for every test run, the notebook checks (``pytest book``) included."""

from __future__ import annotations

import pytest

# nbval waits only 5 s for a cell's output once the kernel says the cell is done; on a
# slow or loaded machine a cell that streamed many progress updates can take longer to
# deliver them, and nbval then fails a cell that ran. Wait longer: a cell that raises
# still fails at once, and one that hangs still fails after --nbval-cell-timeout.
NBVAL_OUTPUT_TIMEOUT = 120


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if hasattr(item, "output_timeout"):  # a notebook cell collected by nbval
            item.output_timeout = NBVAL_OUTPUT_TIMEOUT
