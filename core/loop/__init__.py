"""The loop: one round's steps (:mod:`~envengineer.loop.steps`: the :class:`Loop`, resumable step by
step), the run config (:mod:`~envengineer.loop.runconfig`), evaluation and its training signal, the
lifecycle hooks and their payloads, the trackers' fan-out, the preflight checks (``envengineer doctor``'s)
and the design step replayed from a recorded run.

``envengineer.loop`` was one module until 0.1: its names (``Loop``, ``run``, ``round_seed``, ...) are still
importable from here; they are looked up in :mod:`envengineer.loop.steps` when imported (a patch goes there).
"""

from envengineer._moved import forward

__getattr__ = forward(__name__, "envengineer.loop.steps")
