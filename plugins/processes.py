"""Moved to :mod:`envengineer.processes` (the suite's runs use it too); this name keeps working."""

from envengineer.processes import (  # noqa: F401  core-internal: this module is the old name of envengineer.processes
    KILL_GRACE_S,
    Stalled,
    end_group,
    end_groups,
    file_sizes,
    group_alive,
    sigterm_as_interrupt,
    start,
    watch,
)
