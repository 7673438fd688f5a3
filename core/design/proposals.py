"""An engineer's answer made safe: the last fenced YAML block, parsed with a size limit and no
aliases, anchors or tags, must be a mapping. Anything else is an :class:`UnusableProposal` whose
message says why (the design step quotes it in a re-ask)."""

from __future__ import annotations

import re
from typing import Any

import yaml

from envengineer.design.contract import EngineerReply

#: The largest YAML block we parse (characters).
MAX_YAML_CHARS = 16_000

class UnusableProposal(ValueError):
    """The reply held no usable proposal; the message says why (quoted in the re-ask)."""


_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.S | re.M)


def extract_yaml_block(text: str) -> str:
    """The last fenced block tagged ``yaml``/``yml`` or untagged; raises :class:`UnusableProposal`."""
    if not isinstance(text, str) or not text.strip():
        raise UnusableProposal("the answer was empty")
    blocks = [m.group(3) for m in _FENCE.finditer(text) if m.group(2).lower() in ("", "yaml", "yml")]
    if not blocks:
        opened = _unclosed_fence(text)
        if opened is not None:
            # the contract wants a closed block: a fence left open is most often an answer cut at the
            # token limit, whose YAML may stop mid-mapping, so it is refused, with the likely cause named
            raise UnusableProposal(
                f"the answer opens a fenced block ({opened}) that is never closed (an answer cut at the token "
                "limit?); close it with the same fence"
            )
        raise UnusableProposal("the answer has no fenced YAML block (```yaml ... ```)")
    return blocks[-1]


_OPENING = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([A-Za-z0-9_+-]*)[^\n]*$", re.M)


def _unclosed_fence(text: str) -> str | None:
    """The opening line of a yaml/yml/untagged fence that no later line closes, if any."""
    lines = [m for m in _OPENING.finditer(text)]
    i = 0
    while i < len(lines):  # pair fences in order: an opener, then the next line that closes it
        opener = lines[i]
        closer = next((j for j in range(i + 1, len(lines))
                       if lines[j].group(1) == opener.group(1) and not lines[j].group(2) and lines[j].group(0).strip() == opener.group(1)), None)
        if closer is None:
            return opener.group(0).strip() if opener.group(2).lower() in ("", "yaml", "yml") else None
        i = closer + 1
    return None


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases, anchors and explicit tags (no billion laughs, no objects) and a key
    repeated in one mapping."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise yaml.YAMLError(f"aliases are not allowed (*{event.anchor})")
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            raise yaml.YAMLError(f"anchors are not allowed (&{anchor})")
        tag = getattr(event, "tag", None)
        if tag not in (None, "!") and not isinstance(event, (yaml.DocumentStartEvent, yaml.StreamStartEvent)):
            raise yaml.YAMLError(f"explicit tags are not allowed ({tag})")
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:  # type: ignore[override]
        # YAML wants a mapping's keys unique; PyYAML would keep the last value silently (a real reply wrote
        # "shape" twice in one mapping): which one the engineer meant is unknown, so the block is refused
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    repeated = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: SafeLoader refuses it itself
                    continue
                if repeated:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key {key!r} appears twice in one mapping (write each field once)", key_node.start_mark)
        return super().construct_mapping(node, deep)


def parse_proposal(block: str, max_chars: int = MAX_YAML_CHARS) -> dict[str, Any]:
    """Parse one YAML block into a mapping; raises :class:`UnusableProposal` with the reason."""
    if len(block) > max_chars:
        raise UnusableProposal(f"the YAML block is too long ({len(block)} characters, limit {max_chars})")
    try:
        data = yaml.load(block, Loader=_StrictLoader)  # noqa: S506 - strict safe loader
    except yaml.YAMLError as exc:
        raise UnusableProposal(f"the YAML block does not parse: {one_line(str(exc))}") from None
    except RecursionError:
        raise UnusableProposal("the YAML block is nested too deeply") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UnusableProposal(f"the YAML block must be a mapping of fields, got {type(data).__name__}")
    return data


def proposal_of(reply: EngineerReply, max_chars: int = MAX_YAML_CHARS) -> dict[str, Any]:
    problem = getattr(reply, "problem", None)  # a structured reply that held no proposal (envengineer.design.structured)
    if problem:
        raise UnusableProposal(str(problem))
    if reply.proposal is not None:
        if not isinstance(reply.proposal, dict):
            raise UnusableProposal(f"the proposal must be a mapping, got {type(reply.proposal).__name__}")
        return reply.proposal
    return parse_proposal(extract_yaml_block(reply.text), max_chars)


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def nothing_applied(proposal: dict[str, Any], projection: Any) -> str | None:
    """A reason when a non-empty proposal had no effect at all (every part ignored)."""
    if not proposal or projection.accepted:
        return None
    if any(change.applied is not None for change in projection.changes):
        return None
    reasons = "; ".join(f"{c.field}: {c.reason}" for c in projection.changes[:8])
    return f"no part of the proposal could be applied ({reasons})" if reasons else "the proposal changed nothing"
