"""reasoning-gym: procedural reasoning tasks from the reasoning-gym package, difficulty set by
integer curriculum levels (docs: reasoning-gym.md).

The package is an optional extra (``pip install "envengineer[reasoning-gym]"``) and is imported
only when the family generates or scores: importing envengineer and listing plugins work without it.
"""

TASK_NAME = "reasoning-gym"
#: The reasoning-gym release the catalogue was vetted on (the extra pins it).
PINNED_VERSION = "0.1.25"
INSTALL_HINT = f'pip install "envengineer[reasoning-gym]" (reasoning-gym=={PINNED_VERSION})'
