"""The mapf-frozenlake generator: its task options, groupings and the ``Generator`` the plugin registers
(generation in :mod:`draw`, the projection in :mod:`projection`, the prompts in :mod:`prompts`)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from envengineer.api import GenerationResult, Generator, Grouping, Knob, Projection
from envengineer.tasks.mapf_frozenlake import SIZE_NAMES, SIZES, TASK_NAME, knobs as cfg
from envengineer.tasks.mapf_frozenlake import draw as gen
from envengineer.tasks.mapf_frozenlake import projection, prompts
from envengineer.tasks.mapf_frozenlake.instance import from_record
from envengineer.tasks.mapf_frozenlake.shares import DECIMALS

#: Solver work units (the same on every machine) of a reference answer: an instance the generator made
#: needs at most its work limit (40,000); past this budget a foreign record gets an error, not an answer.
REFERENCE_WORK = 1_000_000


class MapfOptions(BaseModel):
    """The ``task:`` section of a run config for mapf-frozenlake."""

    model_config = ConfigDict(extra="forbid")

    name: Literal["mapf-frozenlake"] = TASK_NAME
    agents: int = Field(2, ge=1, le=16, description="agents per training instance")
    prompt_style: Literal["full", "compact"] = Field("full", description="prompt rendering for the policy")
    solver_work_limit: int = Field(gen.WORK_LIMIT, ge=100, description="solver work units before a generated draw is discarded (deterministic)")
    solver_time_limit: float | None = Field(
        gen.TIME_LIMIT, gt=0,
        description="optional wall-clock limit of one solve, in seconds (default none: the work limit bounds every solve); "
                    "when it fires, generation stops with an error instead of discarding the draw, so it never changes the data",
    )
    workers: int = Field(1, ge=1, description="processes used to generate a training set")
    seed_scheme: Literal["holes", "ratio"] = Field(
        "holes", description="what seeds a training instance: holes (each size's hole count, so a hole_ratio move smaller "
        "than one cell keeps the same instances) or ratio (the hole ratio itself: the training sets of runs recorded before 2026-12-01)",
    )
    warm_start_agents: list[int] = Field(
        [2], min_length=1,
        description="agent counts of the tiny policy's warm-start instances, drawn in turn (repeat one to weight it: "
                    "[2, 3, 2, 4, 2, 5] is half 2-agent); GRPO still trains on `agents`. The default [2] is the shipped quickstart base",
    )

    agents_range: tuple[int, int] | None = Field(
        None,
        description="[low, high]: turns on a per-size `agents` knob that an engineer may move within it (each size starts "
                    "at `agents`, which the range must contain); a deviation from the paper, which trains on 2 agents only. "
                    f"Off (null) by default. {cfg.AGENTS_KNOB_MIN} <= low <= high <= {cfg.AGENTS_KNOB_MAX}, and low fits an empty 3x3 map",
    )

    @field_validator("warm_start_agents")
    @classmethod
    def _agent_counts(cls, value: list[int]) -> list[int]:
        from envengineer.tasks.mapf_frozenlake.warm_start import check_agent_counts

        return check_agent_counts(value)

    @field_validator("agents_range")
    @classmethod
    def _agents_range(cls, value: tuple[int, int] | None) -> tuple[int, int] | None:
        if value is None:
            return None
        low, high = value
        if not cfg.AGENTS_KNOB_MIN <= low <= high <= cfg.AGENTS_KNOB_MAX:
            raise ValueError(f"needs {cfg.AGENTS_KNOB_MIN} <= low <= high <= {cfg.AGENTS_KNOB_MAX} "
                             f"(a WAIT needs two agents; the compact style names S1-S{cfg.AGENTS_KNOB_MAX}), got [{low}, {high}]")
        smallest = min(SIZES)
        if low > cfg.agents_fitting(smallest, 0.0):
            raise ValueError(f"low {low}: an empty {smallest}x{smallest} map fits at most {cfg.agents_fitting(smallest, 0.0)} "
                             "agents (2k + 1 free cells), and every size keeps at least low agents")
        return value

    @model_validator(mode="after")
    def _range_holds_agents(self) -> "MapfOptions":
        if self.agents_range is not None and not self.agents_range[0] <= self.agents <= self.agents_range[1]:
            low, high = self.agents_range
            raise ValueError(f"agents_range: [{low}, {high}] must contain agents ({self.agents}), the count every size starts at")
        return self


def size_label(size: Any) -> str:
    """A map size as its group name: ``6`` -> ``6x6``."""
    return f"{size}x{size}"


def hole_ratio_label(ratio: Any) -> str:
    """A hole ratio as its group name: ``0.10`` -> ``0.1``."""
    return f"{float(ratio):g}"


#: Evaluation files instances by map size (primary: the evidence groups, one knob set each) and by hole ratio.
GROUPINGS = (
    Grouping("size", label=size_label, order=SIZE_NAMES),
    Grouping("hole_ratio", label=hole_ratio_label),
)


class MapfGenerator(Generator):
    name: ClassVar[str] = TASK_NAME
    description: ClassVar[str] = "Multi-agent path finding on FrozenLake grids (3x3 to 10x10)"
    Options: ClassVar[type[BaseModel]] = MapfOptions
    config_model: ClassVar[type[BaseModel]] = cfg.MapfConfig
    prompt_styles: ClassVar[tuple[str, ...]] = prompts.STYLES
    knob_table: ClassVar[str | None] = "sizes"
    knobs: ClassVar[tuple[Knob, ...]] = cfg.KNOBS
    groupings: ClassVar[tuple[Grouping, ...]] = GROUPINGS
    #: A run's evidence unless its config names another set (eval.validation).
    validation_benchmark: ClassVar[str | None] = "mapf-2agents-val"

    options: MapfOptions

    def __init__(self, options: BaseModel | None = None) -> None:
        super().__init__(options)
        if self.options.agents_range is not None:
            # The agents knob: this instance's config model and knobs gain a per-size agent count.
            low, high = self.options.agents_range
            self.config_model = cfg.agents_config_model(self.options.agents)  # type: ignore[misc]
            self.knobs = (*type(self).knobs, Knob(  # type: ignore[misc]
                "agents", low, high, 1, integer=True, harder="up",
                description="agents in each instance at this size (the map keeps 2k + 1 free cells for k agents)",
            ))

    def default_config(self) -> cfg.MapfConfig:
        return self._with_agents(cfg.uniform_config())

    def random_config(self, seed: int) -> cfg.MapfConfig:
        """The paper's random start (and the random engineer's draw): ratios, hole and wait ratios
        drawn. With the agents knob on, each size's count is drawn too, from a stream of its own, so
        the other knobs are drawn as without the knob (then fitted: see :meth:`_with_agents`)."""
        config = cfg.random_config(seed, agents=self.options.agents)
        if self.options.agents_range is None:
            return config
        rng = random.Random(f"mapf-frozenlake-random-agents-{seed}")
        low, high = self.options.agents_range
        return self._with_agents(config, {name: rng.randint(low, high) for name in config.sizes})

    def _with_agents(self, config: cfg.MapfConfig, counts: Mapping[str, int] | None = None) -> cfg.MapfConfig:
        """``config`` itself when the agents knob is off; else with every size at its count in ``counts``
        (default: ``agents``), fitted as the projection fits a proposal (an empty map too small for the
        count takes fewer agents, a map with too many holes for it fewer holes)."""
        if self.options.agents_range is None:
            return config
        sizes = {}
        for name, knobs in config.sizes.items():
            size = int(name.split("x")[0])
            wanted = self.options.agents if counts is None else counts[name]
            count, _ = projection.fit_agents(wanted, size, self.options.agents_range)
            hole_ratio = min(knobs.hole_ratio, round(projection.hole_ratio_ceiling(size, count), DECIMALS))
            sizes[name] = {**knobs.model_dump(), "hole_ratio": hole_ratio, "agents": count}
        return self.config_model.model_validate({"sizes": sizes})

    def generate(self, config: BaseModel, *, n: int, seed: int, workers: int | None = None, progress: Any = None) -> GenerationResult:
        instances, discarded = gen.generate(
            self.config_model.model_validate(config.model_dump()),
            n=n,
            seed=seed,
            agents=self.options.agents,
            workers=workers or self.options.workers,
            time_limit=self.options.solver_time_limit,
            work_limit=self.options.solver_work_limit,
            progress=progress,
            seed_scheme=self.options.seed_scheme,
        )
        return GenerationResult([i.to_record() for i in instances], discarded)

    def project(self, proposal: Mapping[str, Any], current: BaseModel) -> Projection:
        return projection.project(
            proposal, self.config_model.model_validate(current.model_dump()),
            agents=self.options.agents, agents_range=self.options.agents_range,
        )

    def render(self, record: Mapping[str, Any], style: str | None = None) -> list[dict[str, str]] | str:
        style = style or self.options.prompt_style
        instance = from_record(record)
        if style == "compact":
            return prompts.render_compact(instance)
        if style == "full":
            return prompts.render_full(instance)
        raise ValueError(f"unknown prompt style {style!r} (styles: {', '.join(prompts.STYLES)})")

    def decode_response(self, record: Mapping[str, Any], response: str, style: str | None = None) -> str:
        """Convert a response in a style's own answer format to the contract's format."""
        style = style or self.options.prompt_style
        if style == "compact":
            return prompts.compact_to_answer(response, *_starts_and_goals(record))
        return response

    def answer_end(self, record: Mapping[str, Any], response: str, style: str | None = None) -> int | None:
        """Compact answers end at the step that puts every agent on its goal; full answers are read whole."""
        if (style or self.options.prompt_style) == "compact":
            return prompts.compact_answer_end(response, *_starts_and_goals(record))
        return None

    def check_record(self, record: Mapping[str, Any]) -> None:
        from_record(record)

    def guidelines(self) -> str:
        return prompts.guidelines(self.options.agents, agents_range=self.options.agents_range)

    def design_brief(self, budget: int | None = None) -> str:
        from envengineer.tasks.mapf_frozenlake.benchmarks import specs

        held_out = sorted({b.options["agents"] for b in specs() if b.options.get("agents", 0) > self.options.agents})
        return prompts.design_brief(self.options.agents, held_out, budget, agents_range=self.options.agents_range)

    def instance_knobs(self, record: Mapping[str, Any]) -> dict[str, float]:
        """``hole_ratio`` as drawn, ``wait_ratio`` as 1 for an instance whose optimum needs a WAIT, else 0,
        and with the agents knob on, ``agents`` as the instance's agent count."""
        values = super().instance_knobs(record)
        if isinstance(record.get("requires_wait"), bool):
            values["wait_ratio"] = 1.0 if record["requires_wait"] else 0.0
        if self.options.agents_range is not None and isinstance(record.get("agents"), list):
            values["agents"] = float(len(record["agents"]))
        return values

    def reference_answer(self, record: Mapping[str, Any]) -> str:
        from envengineer.tasks.mapf_frozenlake.answer import format_answer
        from envengineer.tasks.mapf_frozenlake.solver import solve

        instance = from_record(record)
        solution = solve(instance.grid, [(a.start, a.goal) for a in instance.agents],
                         time_limit=self.options.solver_time_limit, work_cap=REFERENCE_WORK)
        if solution.status != "optimal" or solution.paths is None:
            raise ValueError(f"instance {instance.id}: {solution.status} ({solution.reason})")
        return format_answer(solution.paths)

    # The embedded tiny policy reads the compact style word by word (tasks/mapf_frozenlake/warm_start.py).

    def reference_completion(self, record: Mapping[str, Any], style: str) -> str:
        if style != "compact":
            return self.reference_answer(record)
        from envengineer.tasks.mapf_frozenlake.solver import solve

        instance = from_record(record)
        solution = solve(instance.grid, [(a.start, a.goal) for a in instance.agents],
                         time_limit=self.options.solver_time_limit, work_cap=REFERENCE_WORK)
        if solution.status != "optimal" or solution.paths is None:
            raise ValueError(f"instance {instance.id}: {solution.status} ({solution.reason})")
        return prompts.compact_answer(solution.paths)

    def warm_start_pairs(self, *, n: int, seed: int, style: str) -> list[tuple[str, str]]:
        """Compact style: draws with ``warm_start_agents`` agents in turn (default 2), of every size
        that fits, each solved once (whatever the run's training agent count)."""
        if style != "compact":
            return super().warm_start_pairs(n=n, seed=seed, style=style)
        from envengineer.tasks.mapf_frozenlake.warm_start import warm_start_pairs

        return warm_start_pairs(n=n, seed=seed, agents=self.options.warm_start_agents)

    def warm_start_recipe(self) -> dict[str, Any]:
        """``warm_start_agents`` when it is not the default [2] (the shipped base's key stays as it was)."""
        agents = list(self.options.warm_start_agents)
        return {} if agents == [2] else {"warm_start_agents": agents}

    def tiny_vocabulary(self, style: str) -> list[str] | None:
        from envengineer.tasks.mapf_frozenlake.warm_start import vocabulary

        return vocabulary() if style == "compact" else None

    def tiny_init_embeddings(self, weight: Any, token_ids: Mapping[str, int], style: str) -> None:
        """Cell words ``r_c`` (and ``N<size>``) start from Fourier features of row and column."""
        if style == "compact":
            from envengineer.tasks.mapf_frozenlake.warm_start import geometric_embeddings

            geometric_embeddings(weight, token_ids)

    def tiny_prebuilt(self, key: str) -> Path | None:
        """The quickstart's warm start ships in ``data/tiny/<key>/`` (tasks/mapf_frozenlake/warm_start.py)."""
        from envengineer.tasks.mapf_frozenlake.warm_start import prebuilt_dir

        return prebuilt_dir(key)


def _starts_and_goals(record: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
    agents = record["agents"]
    return [a["start"] for a in agents], [a["goal"] for a in agents]
