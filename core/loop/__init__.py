"""The loop: one round's steps (:mod:`~envengineer.loop.steps`: the :class:`Loop`, resumable step by
step), the run config (:mod:`~envengineer.loop.runconfig`), evaluation and its training signal, the
lifecycle hooks and their payloads, the trackers' fan-out, the preflight checks (``envengineer doctor``'s)
and the design step replayed from a recorded run.
"""
