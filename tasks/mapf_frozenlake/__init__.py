"""MAPF-FrozenLake: multi-agent path finding on FrozenLake grids (docs: mapf-frozenlake.md)."""

TASK_NAME = "mapf-frozenlake"
SIZES: tuple[int, ...] = (3, 4, 5, 6, 7, 8, 9, 10)
SIZE_NAMES: tuple[str, ...] = tuple(f"{n}x{n}" for n in SIZES)
