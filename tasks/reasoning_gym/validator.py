"""The reasoning-gym family's validator: the answer between the last ``<answer>`` tags, size-capped, scored by
the dataset's own ``score_answer`` under a time net, and told apart (no_answer, too_long, scorer_error,
rejected, wrong, partial)."""

from __future__ import annotations

import contextlib
import copy
import io
import math
import threading
from collections.abc import Mapping
from typing import Any, ClassVar

from envengineer.api import ConfigError, Validator, Verdict
from envengineer.tasks.reasoning_gym import TASK_NAME, compact
from envengineer.tasks.reasoning_gym.catalogue import CATALOGUE
from envengineer.tasks.reasoning_gym.items import _scorer

OPEN, CLOSE = "<answer>", "</answer>"
#: The answer inside the tags is refused as too_long above max(MIN_ANSWER_CHARS, ANSWER_FACTOR x the oracle's length):
#: the size cap that bounds every scorer's work.
MIN_ANSWER_CHARS = 256
ANSWER_FACTOR = 4
#: Seconds one scorer call may take before it is a scorer_error: a net for a scorer that hangs, not a budget. With
#: the size cap the vetted scorers take milliseconds on any answer, and the limit is 30 s, thousands of times that,
#: so no machine's speed or load decides a verdict (it was 0.5 s, which a loaded machine could reach; docs/reasoning-gym.md).
SCORE_TIME_LIMIT = 30.0


class RGValidator(Validator):
    name: ClassVar[str] = TASK_NAME
    failure_types: ClassVar[tuple[str, ...]] = ("no_answer", "too_long", "scorer_error", "rejected", "wrong", "partial")

    def score(self, record: Mapping[str, Any], response: str) -> Verdict:
        exact = getattr(response, "exact", None) if isinstance(response, compact.Answer) else None
        response = response if isinstance(response, str) else str(response)
        if isinstance(exact, str):  # a compact answer: the line the model wrote, as it is
            answer = exact
        else:
            span = answer_span(response)
            if span is None:
                return Verdict(False, False, "no_answer", ("no_answer",))
            answer = response[span[0]:span[1]].strip()
        oracle = str(record.get("answer", ""))
        if len(answer) > max(MIN_ANSWER_CHARS, ANSWER_FACTOR * len(oracle)):
            return Verdict(False, False, "too_long", ("too_long",))
        dataset = record.get("dataset")
        entry = CATALOGUE.get(dataset)  # type: ignore[arg-type]
        if entry is None:
            return Verdict(False, False, "scorer_error", ("scorer_error",))
        try:
            scorer = _scorer(dataset, tuple(sorted(dict(record.get("levels") or {}).items())))
        except ConfigError:
            raise
        except Exception:  # noqa: BLE001 - a malformed record
            return Verdict(False, False, "scorer_error", ("scorer_error",))
        item = {"question": record.get("question", ""), "answer": oracle, "metadata": copy.deepcopy(record.get("metadata") or {})}
        score = bounded_call(scorer, answer, item, SCORE_TIME_LIMIT)
        if score is RAISED:
            # The scorer raised on this answer: the model's format mistake (`2 * 3`, `457.0`, a trailing `.`) when
            # the scorer grades the oracle answer, the scorer's own failure when it cannot even do that.
            fresh = {**item, "metadata": copy.deepcopy(record.get("metadata") or {})}
            if isinstance(bounded_call(scorer, oracle, fresh, SCORE_TIME_LIMIT), float):
                return Verdict(False, False, "rejected", ("rejected",), score=0.0)
            score = None
        if score is None:
            return Verdict(False, False, "scorer_error", ("scorer_error",))
        if score >= 1.0:
            return Verdict(True, True, None, (), score=1.0)
        if score >= entry.valid_at:
            return Verdict(True, False, None, (), score=score)
        if score <= 0.0:
            return Verdict(False, False, "rejected", ("rejected",), score=0.0)
        kind = "partial" if entry.partial_at is not None and score >= entry.partial_at else "wrong"
        return Verdict(False, False, kind, (kind,), score=score)


def answer_span(response: str) -> tuple[int, int] | None:
    """Where the graded answer lies in ``response``: after the last ``<answer>`` that a ``</answer>`` follows, up to the
    first ``</answer>`` after it (``<answer>A</answer></answer>`` is ``A``); None without such a pair. Three linear
    scans, whatever the input."""
    last_close = response.rfind(CLOSE)
    if last_close < 0:
        return None
    start = response.rfind(OPEN, 0, last_close)
    if start < 0:
        return None
    start += len(OPEN)
    return start, response.find(CLOSE, start)


#: Held while a scorer's output is redirected (bounded_call).
_QUIET = threading.Lock()
#: What :func:`bounded_call` returns when the scorer raised (distinct from None: a non-number or a timeout).
RAISED: Any = type("Raised", (), {"__repr__": lambda self: "RAISED", "__slots__": ()})()


def bounded_call(scorer: Any, answer: str, item: dict[str, Any], limit: float) -> Any:
    """``scorer(answer, item)`` as a float in [0, 1]; :data:`RAISED` when it raised; None on a non-number or ``limit``
    seconds passing.

    A daemon thread per call: the answer is size-capped before it gets here, and no vetted scorer executes or parses it
    as code, so a call takes milliseconds; the limit is a safety net that keeps the loop going should one ever hang
    (the thread is then left behind). A subprocess would cost a 3 s reasoning_gym import per worker and a pickling
    round trip per answer, for a guarantee the catalogue already gives."""
    result: list[Any] = []

    def work() -> None:
        try:
            result.append(scorer(answer, item))
        except BaseException:  # noqa: BLE001 - the validator tells the answer's fault from the scorer's
            result.append(RAISED)

    thread = threading.Thread(target=work, name="reasoning-gym-scorer", daemon=True)
    # Some scorers print (tower_of_hanoi: "Error validating move …"), which would corrupt `envengineer score`'s output:
    # stdout and stderr go to a throwaway buffer while the caller waits. The swap of sys.stdout is process-wide, so one
    # lock keeps concurrent callers from restoring each other's buffer; a scorer left running past the limit prints
    # to the real streams again.
    with _QUIET, contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        thread.start()
        thread.join(limit)
    if thread.is_alive() or not result:
        return None
    value = result[0]
    if value is RAISED:
        return RAISED
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return min(1.0, max(0.0, float(value)))
