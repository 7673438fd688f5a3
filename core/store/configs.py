"""Generator config files: read one (strictly validated, its declared knobs within the bounds the
design step's projection keeps them in), or say which knob is out of them."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ValidationError

from envengineer.components import Generator
from envengineer.errors import ConfigError
from envengineer.fileio import read_yaml
from envengineer.registry import format_validation_error


def load_generator_config(generator: Generator, path: str | Path | None, *, check_bounds: bool = True) -> BaseModel:
    """The generator config in ``path`` (strictly validated), or the generator's default.

    A declared knob outside its bounds is refused too: the design step's projection keeps every
    knob within them (a share from round 1 on), so round 0 would train on a config no later
    round can have. ``check_bounds=False``: a config the loop recorded itself (a run started before
    the check, resumed) is read as it was written."""
    if path is None:
        return generator.default_config()
    data = read_yaml(path)
    try:
        config = generator.config_model.model_validate(data if data is not None else {})
    except ValidationError as exc:
        raise ConfigError(f"{path}:\n{format_validation_error(exc)}") from None
    problems = knobs_out_of_bounds(generator, config) if check_bounds else []
    if problems:
        raise ConfigError(f"{path}:\n" + "\n".join(problems))
    return config


def knobs_out_of_bounds(generator: Generator, config: BaseModel) -> list[str]:
    """One line per declared knob value outside the bounds the default projection keeps it in,
    naming the field (a share's bounds as :func:`envengineer.components.knobs.renormalize` narrows them)."""
    from envengineer.components.knobs import number, share_bounds

    table = generator.knob_table
    if table is None:
        dumped = config.model_dump()
        rows = {None: {k.name: dumped[k.name] for k in generator.knobs if k.name in dumped}}
    else:
        rows = dict(generator.knob_values(config))
    share = generator.share_knob()
    shared = sum(1 for values in rows.values() if share is not None and share.name in values)
    problems = []
    for group, values in rows.items():
        for knob in generator.knobs:
            raw = values.get(knob.name)
            value = number(raw)
            if value is None:
                continue
            low, high = share_bounds(knob, shared) if knob.share and table is not None and shared else (knob.low, knob.high)
            where = knob.name if group is None else f"{table}.{group}.{knob.name}"
            clips = f"the design step's projection clips it into [{low:g}, {high:g}] when it moves it"
            if value < low - 1e-9:
                why = "the design step raises it to the floor from round 1 on" if knob.share else clips
                problems.append(f"{where}: {raw} is below the projection's floor {low:g}; {why}, so give it at least {low:g}")
            elif value > high + 1e-9:
                why = "the design step lowers it to the ceiling from round 1 on" if knob.share else clips
                problems.append(f"{where}: {raw} is above the projection's ceiling {high:g}; {why}, so give it at most {high:g}")
    return problems
