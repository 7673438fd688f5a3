"""vllm.sampling_params (the stand-in): ``StructuredOutputsParams`` as vLLM 0.24.0 declares it, and
``SamplingParams`` (set by the package's ``__init__``, as the real module defines it and the package re-exports it).

Real vLLM: a dataclass of one constraint kind (``json``, ``regex``, ``choice``, ``grammar``,
``json_object``, ``structural_tag``) plus backend options; more than one kind is a ``ValueError``.
The stand-in implements ``json`` (a schema dict or string) through xgrammar, vLLM's default backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_KINDS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")


@dataclass
class StructuredOutputsParams:
    json: str | dict | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_fallback: bool = False
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None
    structural_tag: str | None = None

    def __post_init__(self) -> None:
        count = sum(getattr(self, kind) is not None for kind in _KINDS)
        if count > 1:
            given = {kind: getattr(self, kind) for kind in _KINDS if getattr(self, kind) is not None}
            raise ValueError(f"You can only use one kind of structured outputs constraint but multiple are specified: {given}")

    def all_constraints_none(self) -> bool:
        return all(getattr(self, kind) is None for kind in _KINDS)


SamplingParams: Any = None  # the package's __init__ puts vllm.SamplingParams here
