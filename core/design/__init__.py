"""The design step: the evidence of a round (:mod:`~envengineer.design.evidence`), the engineer's context
(:mod:`~envengineer.design.context`, its prompt budget), the prompts, the parsing of a proposal and of a
structured reply, and the step itself (:mod:`~envengineer.design.step`: ask, re-ask, fall back, record).

``envengineer.design`` was one module until 0.1 (today's :mod:`~envengineer.design.step`): its names
(``design``, ``write_outcome``, ...) are still importable from here, looked up there when imported.
"""

from envengineer._moved import forward

__getattr__ = forward(__name__, "envengineer.design.step")
