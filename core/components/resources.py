"""What a component reports about the resources it needs: its memory estimate for a GPU
(``Trainer.memory_plan`` and ``Policy.memory_plan`` return a :class:`MemoryEstimate`; ``envengineer plan``,
the gpu plugin, adds them up per phase). The model's shape (:mod:`envengineer.components.model_shape`), the GPUs
(:mod:`envengineer.components.gpus`) and the cluster resources of a run (:class:`envengineer.components.Resources`)
are beside it."""

from __future__ import annotations

from dataclasses import dataclass, field

#: What every estimate leaves out (each component adds its own).
LEAVES_OUT = (
    "the CUDA context and kernels (about 0.5-1 GB per process) and the allocator's fragmentation",
    "buffers of communication libraries (NCCL) and compiled kernels' workspaces",
    "transient copies inside a kernel (e.g. a fused loss's chunks) beyond the rows shown",
)


@dataclass(frozen=True)
class MemoryRow:
    phase: str  # when it is on the GPU: rows of one phase are there together
    item: str
    bytes: float
    how: str = ""


@dataclass(frozen=True)
class Fix:
    """Dotted run-config overrides that change the memory, and what they do."""

    overrides: tuple[str, ...]
    what: str


@dataclass
class MemoryEstimate:
    rows: list[MemoryRow] = field(default_factory=list)
    leaves_out: list[str] = field(default_factory=list)
    fixes: list[Fix] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: what makes it fail whatever the totals (e.g. vLLM's share holds no whole sequence's KV cache)
    problems: list[str] = field(default_factory=list)
    #: the longest prompt it plans for (a policy's plan reuses it)
    prompt_tokens: int | None = None

    def add(self, phase: str, item: str, size: float, how: str = "") -> None:
        self.rows.append(MemoryRow(phase, item, float(size), how))
