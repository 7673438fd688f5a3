"""The design step: the evidence of a round (:mod:`~envengineer.design.evidence`), the engineer's context
(:mod:`~envengineer.design.context`, its prompt budget), the prompts, the parsing of a proposal and of a
structured reply, and the step itself (:mod:`~envengineer.design.step`: ask, re-ask, fall back, record).
"""
