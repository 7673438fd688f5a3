"""grid-walk: follow k moves on a small grid and list the cells visited (the frontier testbed)."""

TASK_NAME = "grid-walk"
