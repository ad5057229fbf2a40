"""The search config: YAML + `key.path=value` overrides -> one typed, frozen `SearchConfig`.

Every mistake in the file or on the command line is collected and raised as one
`ConfigError` naming the file and each key path; nothing runs until the config is valid.
Relative paths are resolved against the directory the command was run in.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from search.errors import (
    ConfigError,
    Problem,
    join_path,
    problems_from_validation,
    unknown_key_message,
)
from search.space import SpaceParam, grid_points
from trainables.data import DataSettings
from trainables.metrics import DEFAULT_OBJECTIVES, OBJECTIVE_METRICS
from trainables.reference_kinds import scales_from
from trainables.settings import DEFAULT_EPOCHS, TRAIN_KEYS, TrainSettings, under_new_names

_FROZEN = ConfigDict(frozen=True, extra="forbid")
_STRICT_INT = {"strict": True}


class EarlyStoppingSection(BaseModel):
    """`search.early_stopping`: trials trailing their peers at a rung are stopped."""

    model_config = _FROZEN

    rungs: tuple[int, ...] = Field((1, 2, 4), min_length=1)  # epochs at which trials are compared
    keep: float = Field(0.5, gt=0, le=1)  # share of the trials at a rung that may go on
    min_peers: int = Field(3, ge=2, **_STRICT_INT)  # trials at a rung before any is stopped
    # objectives a peer must be ahead on (beyond the noise) to stop a trial, behind on none;
    # auto: best_val_acc where it is an objective, else any; null: any objective (speed
    # alone can then stop a slower trial as accurate so far)
    ahead_on: tuple[str, ...] | Literal["auto"] | None = Field("auto", min_length=1)
    # the first rungs at which a trial still at chance (below the min accuracy) goes on: it
    # may be a slow starter, which the next rung tells; 0: stopped there like any behind (a
    # slow start spared is often a config that learns on some seeds only: RESULTS, 33)
    slow_start_rungs: int = Field(0, ge=0, **_STRICT_INT)
    # from the rung after this many on (and after any slow start), and at the epochs after
    # it, a trial still at chance is stopped as soon as one peer at the rung is above the
    # min accuracy beyond the noise, whatever keep and min_peers: in three searches run
    # whole, the 27 trials still at chance at their second or third rung ended at 0.725 or
    # less (RESULTS, 37); null: judged as any trial
    at_chance_after: int | None = Field(1, ge=1, **_STRICT_INT)

    @field_validator("ahead_on", mode="before")
    @classmethod
    def _auto_or_names(cls, ahead_on: Any) -> Any:
        if isinstance(ahead_on, str) and ahead_on != "auto":
            raise ValueError(f"must be auto, null or a list of objectives, got {ahead_on!r}")
        return ahead_on

    def effective_ahead_on(self, objectives: Mapping[str, str]) -> tuple[str, ...] | None:
        """The objectives a search of `objectives` stops trials on being behind on: `auto`
        resolved (`best_val_acc` where it is one of them, else None: any); names as given
        (`search.config` checks that they are objectives)."""
        if self.ahead_on == "auto":
            return ("best_val_acc",) if "best_val_acc" in objectives else None
        return self.ahead_on

    @field_validator("rungs")
    @classmethod
    def _increasing(cls, rungs: tuple[int, ...]) -> tuple[int, ...]:
        if any(rung < 1 for rung in rungs) or list(rungs) != sorted(set(rungs)):
            raise ValueError(f"must be increasing epochs >= 1, got {list(rungs)}")
        return rungs


class AblationSection(BaseModel):
    """`search.ablation`: after the search, trials around its front re-run with one sampled
    setting changed at a time (`search.ablation`), which the report's effects come from."""

    model_config = _FROZEN

    # knee: the most balanced front trial only; front: every front trial, the knee first,
    # while max_trials lasts
    around: Literal["knee", "front"] = "knee"
    # trials the ablations add at most, the noise-floor seeds included; null: the seeds
    # and one change of every sampled setting around one trial (a number above that goes
    # on to the settings' other values, and with `front` to other trials)
    max_trials: int | None = Field(None, gt=1, strict=True)
    # runs of each ablated config unchanged on other seeds: the noise floor of its effects
    seeds: int = Field(2, ge=1, **_STRICT_INT)
    # a base's noise floor runs first, and a base whose config learned nothing on one of its
    # seeds (below the min accuracy) is not ablated: around the knee, the next front trial in
    # order of balance is tried instead (up to 3; where none learns on every seed, the knee)
    skip_seed_fragile: bool = Field(True, strict=True)


class SearchSection(BaseModel):
    model_config = _FROZEN

    num_samples: int = Field(8, gt=0, **_STRICT_INT)  # trials in the search
    max_concurrent_trials: int | None = Field(None, gt=0, **_STRICT_INT)  # None: as resources allow
    sampler: Literal["tpe", "nsga2", "random"] = "tpe"  # Optuna sampler, sized to num_samples
    seed: int = Field(0, **_STRICT_INT)  # the sampler's seed
    repeats: int = Field(
        1, gt=0, **_STRICT_INT
    )  # seeds per sampled config; the front uses the mean
    # metric -> max or min: the front's axes (the metrics with a direction in
    # trainables.metrics can be objectives)
    objectives: dict[str, Literal["max", "min"]] = Field(
        default_factory=lambda: dict(DEFAULT_OBJECTIVES), min_length=1
    )
    # objective -> [low, high] that the hypervolume maps to [0, 1]; fix them to compare
    # searches (default: accuracies and gaps by their ranges, others 0 to the next power of 10)
    hypervolume_bounds: dict[str, tuple[float, float]] = Field(default_factory=dict)
    # null: every trial trains all its epochs
    early_stopping: EarlyStoppingSection | None = None
    # never start a suggestion whose predicted step peak passes what its trial may reserve
    # (resources.memory_budget_mb; on a GPU its share or budget less the process's context)
    predict_oom: bool = Field(True, strict=True)
    # on CPU trials: time bf16 autocast against float32 before the search and leave a
    # sampled AMP out where it trains at under half the speed (a CPU without bfloat16
    # instructions emulates it: a tenth; docs/RESULTS.md section 31); false: sample it anyway
    amp_probe: bool = Field(True, strict=True)
    # on CPU trials: time the speed reference (trainables/speed_reference.py) once as the
    # search starts, in a trial's process, and read every trial's throughput on its scale
    # (train.speed_scale): trials timed at different moments of a machine whose speed moves
    # compare. false, or train.speed_scale given: not measured
    speed_reference: bool = Field(True, strict=True)
    # after the search; null: none (the report's effects then rest on the search's trials)
    ablation: AblationSection | None = AblationSection()
    # trial k is suggested, and judged at its rungs, knowing the trials `lag` or more
    # places before it, all ended (it waits for them): the order trials end in, set by the
    # machine's timing, does not change the search's path (runs of the main search at 3
    # asked the same configs: docs/RESULTS.md, sections 64-65). auto: one more than
    # max_concurrent_trials, where more trials than that run one after another; null (and
    # auto one at a time, or without max_concurrent_trials): with whatever has ended
    lag: int | Literal["auto"] | None = "auto"

    @field_validator("lag", mode="before")
    @classmethod
    def _auto_or_places(cls, lag: Any) -> Any:
        whole = isinstance(lag, int) and not isinstance(lag, bool)
        if not (lag is None or lag == "auto" or (whole and lag > 0)):
            raise ValueError(f"must be auto, null or a whole number > 0, got {lag!r}")
        return lag

    @property
    def effective_lag(self) -> int | None:
        """`lag` with `auto` resolved."""
        if self.lag != "auto":
            return self.lag
        slots = self.max_concurrent_trials
        if slots is None or slots == 1 or self.num_samples <= slots:
            return None  # one at a time the order is exact; all at once nothing is known
        return slots + 1

    @field_validator("objectives")
    @classmethod
    def _known_objectives(cls, objectives: dict[str, str]) -> dict[str, str]:
        unknown = [name for name in objectives if name not in OBJECTIVE_METRICS]
        if unknown:
            raise ValueError(
                f"{unknown} cannot be objectives; choose from {list(OBJECTIVE_METRICS)}"
            )
        return objectives


# A card's share per trial where `resources.gpu: auto` finds cards: four trials to a card
# (four ResNet-50 trials on quarters of an H200 trained 2.2x the images of one alone).
AUTO_GPU_SHARE = 0.25


class ResourcesSection(BaseModel):
    model_config = _FROZEN

    cpu: float = Field(1.0, gt=0)  # CPUs per trial; also the trial's torch threads
    # GPU share per trial: 0.25 runs four trials to a card; auto: 0.25 where the machine (or
    # the cluster) has cards, else 0, the trials on CPU without touching a card
    gpu: float | Literal["auto"] = 0.0
    # fixed: every trial asks for `gpu`; memory: each trial asks for the share of a card its
    # config's predicted memory needs (search.packing), `gpu` until the model knows a config
    pack: Literal["fixed", "memory"] = "fixed"
    # MiB per trial: on a GPU a stricter limit than the share; on CPU enforced by the
    # memory meter, so a CPU box can stand in for a card of that size.
    memory_budget_mb: float | None = Field(None, gt=0)
    _cards: int | None = PrivateAttr(None)  # the cards `auto` was resolved against

    @field_validator("gpu", mode="before")
    @classmethod
    def _ray_gpu_rule(cls, gpu: Any) -> float | str:
        if gpu == "auto":
            return gpu
        if isinstance(gpu, bool) or not isinstance(gpu, int | float):
            raise ValueError(
                f"must be a GPU share (0.25: four trials to a card) or auto, got {gpu!r}"
            )
        if gpu < 0:
            raise ValueError(f"a GPU share is 0 or more, or auto, got {gpu}")
        if gpu > 1 and gpu != int(gpu):
            raise ValueError(f"a share above 1 GPU must be a whole number, got {gpu}")
        return float(gpu)

    @property
    def gpu_share(self) -> float:
        """The GPU share each trial asks Ray for, `auto` resolved (`with_cards`)."""
        if self.gpu != "auto":
            return float(self.gpu)
        if self._cards is None:
            raise RuntimeError("resources.gpu is auto and not resolved: call with_cards first")
        return AUTO_GPU_SHARE if self._cards > 0 else 0.0

    @property
    def packs_by_memory(self) -> bool:
        """Whether trials ask for the share their predicted memory needs (on cards only)."""
        return self.pack == "memory" and self.gpu_share > 0

    def with_cards(self, cards: int) -> ResourcesSection:
        """These resources where `cards` GPUs are there to use (what `auto` decides by)."""
        resolved = self.model_copy()
        resolved._cards = cards
        return resolved

    def describe_gpu(self) -> str:
        """The share and, for `auto`, why: for the plan printed at the start."""
        share = self.gpu_share
        said = f"{share:g} GPU" if share else "no GPU"
        if self.packs_by_memory:
            said = f"the share of a GPU its predicted memory needs ({share:g} until known)"
        if self.gpu != "auto":
            return said
        cards = f"{self._cards} card{'s' if self._cards != 1 else ''}" if self._cards else "no card"
        packs_nothing = self.pack == "memory" and not share
        idle = "; resources.pack: memory packs nothing" if packs_nothing else ""
        return f"{said} (resources.gpu auto: {cards} here{idle})"


class RunSection(BaseModel):
    model_config = _FROZEN

    storage_path: str = "ray_results"  # where Ray Tune keeps trials and checkpoints
    max_failures: int = Field(
        1, ge=0, **_STRICT_INT
    )  # retries of a crashed trial from its checkpoint
    checkpoints_to_keep: int = Field(1, gt=0, **_STRICT_INT)  # per trial, newest kept

    @field_validator("storage_path")
    @classmethod
    def _a_folder(cls, path: str) -> str:
        if "://" in path:
            raise ValueError(
                "must be a folder (on a cluster: one every node can reach, such as a shared "
                f"file system); the search keeps its own state next to Tune's there, got {path!r}"
            )
        return path


class TrackingSection(BaseModel):
    model_config = _FROZEN

    uri: str | None = None  # MLflow tracking URI; None: sqlite:///<cwd>/mlflow.db
    experiment: str | None = None  # MLflow experiment; None: the config's name

    @field_validator("uri")
    @classmethod
    def _known_scheme(cls, uri: str | None) -> str | None:
        if uri is not None and "://" not in uri:
            raise ValueError(
                f"must be a URI such as sqlite:///path/mlflow.db or http://127.0.0.1:5000, "
                f"got {uri!r} (MLflow refuses plain folders as stores)"
            )
        return uri


class SearchConfig(BaseModel):
    model_config = _FROZEN

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # names the experiment
    data: DataSettings = DataSettings()
    train: dict[str, Any] = Field(default_factory=dict)  # fixed train settings
    space: dict[str, SpaceParam] = Field(default_factory=dict)  # sampled train settings
    search: SearchSection = SearchSection()
    resources: ResourcesSection = ResourcesSection()
    run: RunSection = RunSection()
    tracking: TrackingSection = TrackingSection()
    source: str = ""  # the file it came from, for messages
    renamed: tuple[tuple[str, str], ...] = ()  # key paths given under an old name: (old, new)
    # sampled keys left out once the machine was known (`without_sampled`): key -> why
    _left_out: dict[str, str] = PrivateAttr(default_factory=dict)
    # the speed references' images per second, by kind, the search measured as it started
    # (`search.speed_scale`), every CPU trial's train.speed_scale; None: not measured
    _speed_scale: dict[str, float] | None = PrivateAttr(None)
    _written_space: dict[str, SpaceParam] | None = PrivateAttr(None)  # before any was left out

    @field_validator("space", mode="before")
    @classmethod
    def _parse_space(cls, space: Any) -> Any:
        if not isinstance(space, Mapping):
            return space  # pydantic reports the type
        return {
            key: raw if isinstance(raw, SpaceParam) else SpaceParam.parse(raw)
            for key, raw in space.items()
        }

    @property
    def objectives(self) -> dict[str, str]:
        return dict(self.search.objectives)

    def train_config(self) -> dict[str, Any]:
        """The fixed part of every trial's config (the sampled keys are added by Tune)."""
        fixed = {**self.train, "data": self.data.model_dump()}
        if self._speed_scale is not None and "speed_scale" not in self.train:
            fixed["speed_scale"] = self._speed_scale
        if self.resources.memory_budget_mb is not None:
            fixed["memory_budget_mb"] = self.resources.memory_budget_mb
        return fixed

    def rungs(self) -> tuple[int, ...]:
        """The early-stopping rungs: epochs whose reports the scheduler compares."""
        stopping = self.search.early_stopping
        return stopping.rungs if stopping is not None else ()

    def with_cards(self, cards: int) -> SearchConfig:
        """This config where `cards` GPUs are there for its trials (`resources.gpu: auto`
        is resolved by them); the config as written, `as_yaml_dict`, keeps `auto`."""
        return self.model_copy(update={"resources": self.resources.with_cards(cards)})

    def without_sampled(self, key: str, why: str) -> SearchConfig:
        """This config with `key` no longer sampled (its trials take the fixed setting or
        the trainable's default), and `why` kept for the plan and the parent run
        (`left_out`); the config as written, `as_yaml_dict`, still samples it, so that a
        resumed search compares with what the user wrote."""
        resolved = self.model_copy(
            update={"space": {name: p for name, p in self.space.items() if name != key}}
        )
        resolved._written_space = self.written_space
        resolved._left_out = {**self._left_out, key: why}
        return resolved

    def with_speed_scale(self, scales: dict[str, float]) -> SearchConfig:
        """This config with its trials' speed scale measured (`speed_scale`); the config as
        written, `as_yaml_dict`, stays without it."""
        resolved = self.model_copy()
        resolved._speed_scale = dict(scales)
        return resolved

    @property
    def speed_scale(self) -> dict[str, float] | None:
        """The speed references' images per second, by kind
        (`trainables.reference_kinds`), its CPU trials' throughputs are scaled by: the one
        written (train.speed_scale), else the one measured; None: neither."""
        written = self.train.get("speed_scale")
        return scales_from(written) if written is not None else self._speed_scale

    @property
    def left_out(self) -> dict[str, str]:
        """Sampled keys the search left out on this machine, and why."""
        return dict(self._left_out)

    @property
    def written_space(self) -> dict[str, SpaceParam]:
        return self._written_space if self._written_space is not None else self.space

    def as_yaml_dict(self) -> dict[str, Any]:
        """The resolved config, as it would be written in a file (its space as written)."""
        dumped = self.model_dump(mode="json", exclude={"space", "source", "renamed"})
        dumped["space"] = {key: param.as_yaml() for key, param in self.written_space.items()}
        return dumped


BAD_OVERRIDE = "a command-line override must look like key.path=value"
SET_ON_COMMAND_LINE = " (set on the command line)"


def load_config(
    path: str | Path,
    overrides: Sequence[str] = (),
    flags: Mapping[str, Any] | None = None,
    cwd: Path | None = None,
) -> SearchConfig:
    """Read, override, validate and resolve a config; raise one `ConfigError` for all mistakes.

    `overrides` are `key.path=value` strings (value read as YAML); `flags` are values the
    command line already parsed, by key path (e.g. {"search.num_samples": 4}).
    """
    cwd = cwd or Path.cwd()
    source = str(path)
    raw = _read_yaml(Path(path), source)
    given = {key: value for key, value in (flags or {}).items() if value is not None}
    problems = apply_overrides(raw, overrides)
    overridden = {override_key(item): item for item in overrides}
    for key_path, value in given.items():
        if key_path in overridden:
            twice = f"is given twice, {value!r} by its flag and `{overridden[key_path]}`; give one"
            problems.append(Problem(key_path, twice))
    for key_path, value in given.items():
        problems += _set_key(raw, key_path.split("."), value)
    raw, renamed = sections_under_new_names(raw)
    raw["renamed"] = renamed
    config, more = _validate(raw, source)
    problems += more
    if problems or config is None:
        set_here = [*overridden, *given]
        raise ConfigError(source, [say_where_set(problem, set_here) for problem in problems])
    return _resolve_paths(config, cwd)


def sections_under_new_names(
    raw: Mapping[str, Any],
) -> tuple[dict[str, Any], tuple[tuple[str, str], ...]]:
    """A search config with the train settings and space entries given under an old name
    (`RENAMED_KEYS`), and the search's own keys (`RENAMED_SEARCH_KEYS`), moved to their new
    one; what was moved, as (old key path, new key path)."""
    config, moved = dict(raw), []
    for section in ("train", "space"):
        if isinstance(config.get(section), dict):
            config[section], pairs = under_new_names(config[section])
            moved += [(f"{section}.{old}", f"{section}.{new}") for old, new in pairs]
    for old, new in RENAMED_SEARCH_KEYS.items():
        renamed = _key_moved(config, old.split("."), new.rsplit(".", 1)[1])
        if renamed is not None:
            config = renamed
            moved.append((old, new))
    return config, tuple(moved)


def _key_moved(config: Any, path: list[str], new_key: str) -> dict[str, Any] | None:
    """`config` with the key at `path` renamed `new_key` in the same mapping (copied along
    the path: the caller's stays as it was); None where there is no such key, or the new
    one is there too (validation then refuses the old)."""
    head, *rest = path
    if not isinstance(config, Mapping) or head not in config:
        return None
    if not rest:
        if new_key in config:
            return None
        moved = dict(config)
        moved[new_key] = moved.pop(head)
        return moved
    inner = _key_moved(config[head], rest, new_key)
    return None if inner is None else {**config, head: inner}


# Search keys given a clearer name: old key path -> new (the old one still works, with a note).
RENAMED_SEARCH_KEYS: dict[str, str] = {
    "search.ablation.budget": "search.ablation.max_trials",  # trials, not MiB
}


def renamed_notes(config: SearchConfig) -> list[str]:
    """One line per key the config gave under an old name, for the user to update."""
    return [
        f"note: {config.source}: {old} is now {new}; the old name still works for now"
        for old, new in config.renamed
    ]


def override_key(override: str) -> str:
    """The key path a `key.path=value` override sets."""
    return override.partition("=")[0].strip()


def say_where_set(problem: Problem, set_on_command_line: Sequence[str]) -> Problem:
    """Point at the command line for a key the user set there, not at the file."""
    if problem.message == BAD_OVERRIDE or problem.message.endswith(SET_ON_COMMAND_LINE):
        return problem  # says where it is already
    for key_path in set_on_command_line:
        inside = problem.path.startswith((f"{key_path}.", f"{key_path}["))
        above = key_path.startswith(f"{problem.path}.")  # e.g. `serch` of `serch.seed=1`
        if problem.path == key_path or inside or above:
            return Problem(problem.path, f"{problem.message}{SET_ON_COMMAND_LINE}")
    return problem


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (the safe loader
    keeps the last one, and the first would be ignored without a word)."""


def _mapping_of_unique_keys(loader: UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    first_line: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if not isinstance(key, Hashable):
            continue  # construct_mapping refuses it
        if key in first_line:
            raise yaml.constructor.ConstructorError(
                None, None, f"{key!r} is given twice (first on line {first_line[key]})",
                key_node.start_mark,
            )  # fmt: skip
        first_line[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node)


UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_of_unique_keys
)


def _read_yaml(path: Path, source: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(source, [Problem("", "file not found")]) from None
    except (OSError, UnicodeDecodeError) as error:  # a folder, no permission, a path too long
        raise ConfigError(source, [Problem("", f"cannot be read: {error}")]) from None
    try:
        raw = yaml.load(text, Loader=UniqueKeyLoader)  # safe: a config is data, never code
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        reason = getattr(error, "problem", None) or str(error)
        raise ConfigError(source, [Problem("", f"is not valid YAML: {where}{reason}")]) from None
    if raw is None:
        raise ConfigError(source, [Problem("", "is empty; it needs at least `name:`")])
    if not isinstance(raw, dict):
        raise ConfigError(source, [Problem("", f"must be a mapping of sections, got {raw!r}")])
    return raw


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str]) -> list[Problem]:
    """Set each `key.path=value` (value read as YAML) into `raw`.

    `space.KEY=null` removes KEY from the space, so it takes its fixed or default value.
    """
    problems = []
    for item in overrides:
        key_path, sep, text = item.partition("=")
        parts = key_path.strip().split(".")
        if not sep or not all(parts):
            problems.append(Problem(item, BAD_OVERRIDE))
            continue
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            problems.append(Problem(key_path, f"the value in `{item}` is not valid YAML"))
            continue
        if value is None and parts[0] == "space" and len(parts) == 2:
            space = raw.get("space")
            if isinstance(space, dict) and parts[1] in space:
                space.pop(parts[1])  # `space.lr=null` stops sampling lr
            elif not set(under_new_names({parts[1]: None})[0]) <= TRAIN_KEYS:  # a misspelling
                problems.append(
                    Problem(key_path, unknown_key_message(parts[1], TRAIN_KEYS - {"data"}))
                )
            continue
        problems += _set_key(raw, parts, value)
    return problems


def _set_key(raw: dict[str, Any], parts: list[str], value: Any) -> list[Problem]:
    node = raw
    for depth, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            where = join_path(parts[: depth + 1])
            return [
                Problem(join_path(parts), f"cannot be set: {where} is {child!r}, not a mapping")
            ]
        node = child
    node[parts[-1]] = value
    return []


def _validate(raw: dict[str, Any], source: str) -> tuple[SearchConfig | None, list[Problem]]:
    """Structure via pydantic, then the rules between sections; all problems, sorted by key."""
    train = raw.get("train") if isinstance(raw.get("train"), dict) else {}
    space = raw.get("space") if isinstance(raw.get("space"), dict) else None
    parsed_space, problems = _parse_space(space or {})
    config = None
    try:
        structure = {**raw, "source": source}
        if space is not None:
            structure["space"] = parsed_space  # each entry's syntax is reported per key
        config = SearchConfig.model_validate(structure)
    except ValidationError as error:
        problems += problems_from_validation(error, known_keys=_known_keys)
    problems += _train_problems(train)
    problems += _space_problems(parsed_space, train)
    problems += _determinism_problems(parsed_space, train)
    if config is not None:
        problems += _search_problems(config)
    return (None if problems else config), sorted(problems, key=_section_order)


def _parse_space(space: dict[str, Any]) -> tuple[dict[str, SpaceParam], list[Problem]]:
    parsed, problems = {}, []
    for key, raw in space.items():
        try:
            parsed[key] = SpaceParam.parse(raw)
        except ValueError as error:
            problems.append(Problem(f"space.{key}", str(error)))
    return parsed, problems


# Trainable keys that the search config sets from its own sections.
_SET_ELSEWHERE = {
    "data": "set data in the top-level `data:` section",
    "memory_budget_mb": "set it as resources.memory_budget_mb",
}


def _train_problems(train: dict[str, Any]) -> list[Problem]:
    elsewhere = [Problem(f"train.{k}", _SET_ELSEWHERE[k]) for k in train if k in _SET_ELSEWHERE]
    if elsewhere:
        return elsewhere
    try:
        TrainSettings.from_config(train)
    except ValidationError as error:
        return problems_from_validation(error, prefix=("train",), known_keys=lambda _: TRAIN_KEYS)
    return []


def _space_problems(space: dict[str, SpaceParam], train: dict[str, Any]) -> list[Problem]:
    problems = []
    for key, param in space.items():
        path = f"space.{key}"
        if key in _SET_ELSEWHERE:
            problems.append(Problem(path, _SET_ELSEWHERE[key]))
            continue
        if key not in TRAIN_KEYS:
            problems.append(Problem(path, unknown_key_message(key, TRAIN_KEYS - {"data"})))
            continue
        if key in train:
            problems.append(Problem(path, f"is also fixed in train.{key}; keep one of the two"))
        field_type = _field_type(key)
        for where, value in param.candidates():
            try:
                field_type.validate_python(value)
            except ValidationError as error:
                problems += problems_from_validation(error, prefix=(f"{path}.{where}",))
    return problems


def _determinism_problems(space: dict[str, SpaceParam], train: dict[str, Any]) -> list[Problem]:
    """A trial that may draw both `deterministic` and `cudnn_benchmark` true would fail
    its own validation mid-search; a fixed pair is reported by `_train_problems`."""

    def may_be_true(key: str) -> bool:
        if key in space:
            return any(value is True for _, value in space[key].candidates())
        return train.get(key) is True

    if not any(key in space for key in ("deterministic", "cudnn_benchmark")):
        return []
    if may_be_true("deterministic") and may_be_true("cudnn_benchmark"):
        where = "space.cudnn_benchmark" if "cudnn_benchmark" in space else "space.deterministic"
        return [
            Problem(where, "a trial could draw cudnn_benchmark and deterministic both true, "
                    "which cannot hold (the autotuner picks kernels by timing them)")
        ]  # fmt: skip
    return []


def _field_type(key: str) -> TypeAdapter:
    field = TrainSettings.model_fields[key]
    return TypeAdapter(Annotated[field.annotation, field])


def _search_problems(config: SearchConfig) -> list[Problem]:
    search = config.search
    problems = []
    points = grid_points(config.space)
    if len(points) * search.repeats > search.num_samples:
        problems.append(
            Problem(
                "search.num_samples",
                f"must be at least the {len(points)} grid combinations of `space` times "
                f"search.repeats ({search.repeats}), got {search.num_samples}",
            )
        )
    if search.num_samples % search.repeats:
        problems.append(
            Problem(
                "search.num_samples",
                f"must be a multiple of search.repeats ({search.repeats}): each sampled "
                f"config runs with that many seeds, got {search.num_samples}",
            )
        )
    for name, (low, high) in search.hypervolume_bounds.items():
        if name not in search.objectives:
            problems.append(Problem(
                f"search.hypervolume_bounds.{name}",
                f"is not one of search.objectives ({', '.join(search.objectives)})",
            ))  # fmt: skip
        elif not low < high:
            problems.append(Problem(
                f"search.hypervolume_bounds.{name}", f"needs low < high, got [{low}, {high}]"
            ))  # fmt: skip
    if search.early_stopping is not None:
        problems += _early_stopping_problems(config)
    most = search.ablation.max_trials if search.ablation is not None else None
    if search.ablation is not None and most is not None and most <= search.ablation.seeds:
        problems.append(Problem(
            "search.ablation.max_trials",
            f"must be more than search.ablation.seeds ({search.ablation.seeds}): the "
            f"noise-floor runs come out of it, got {most}",
        ))  # fmt: skip
    if search.repeats > 1 and "seed" in config.space:
        problems.append(
            Problem("space.seed", "cannot be sampled while search.repeats sets the seeds")
        )
    capped, lag = search.max_concurrent_trials, search.effective_lag
    if lag is not None and capped is not None and lag < capped:
        problems.append(Problem(
            "search.lag",
            f"must be at least search.max_concurrent_trials ({capped}): a trial waits for "
            f"those {lag} or more places before it, so at most {lag} would run at once, "
            f"got {lag}",
        ))  # fmt: skip
    return problems


# The epoch's own scores, NaN at a rung that is not a best-validation epoch.
_NOT_EVERY_EPOCH = ("test_acc", "train_eval_acc")


def _early_stopping_problems(config: SearchConfig) -> list[Problem]:
    search, problems = config.search, []
    assert search.early_stopping is not None
    epochs = config.train.get("epochs", DEFAULT_EPOCHS)
    fixed = isinstance(epochs, int) and "epochs" not in config.space
    late = [rung for rung in search.early_stopping.rungs if fixed and rung >= epochs]
    if late:
        # Said with both ways out: shortening train.epochs is how a quick search is asked
        # for, and the rungs come from the config file, not from the user's override.
        kept = [rung for rung in search.early_stopping.rungs if rung not in late]
        way_out = f"search.early_stopping.rungs={kept}" if kept else "search.early_stopping=null"
        problems.append(Problem(
            "search.early_stopping.rungs",
            f"must be below train.epochs ({epochs}): a rung at the last epoch or later "
            f"saves nothing, got {late}; set {way_out}, or train.epochs={max(late) + 1} "
            "or more",
        ))  # fmt: skip
    rungs, spared = search.early_stopping.rungs, search.early_stopping.slow_start_rungs
    if spared > len(rungs):
        problems.append(Problem(
            "search.early_stopping.slow_start_rungs",
            f"must be at most the number of rungs ({len(rungs)}: {list(rungs)}), got {spared}",
        ))  # fmt: skip
    unscored = [name for name in search.objectives if name in _NOT_EVERY_EPOCH]
    if unscored:
        problems.append(Problem(
            "search.early_stopping",
            f"cannot compare trials on {unscored}: a rung that is not a trial's "
            "best-validation epoch has no value for them (gen_gap and val_test_gap, taken "
            "at the best epoch, are scored at every rung)",
        ))  # fmt: skip
    unknown = [name for name in search.early_stopping.effective_ahead_on(search.objectives) or ()
               if name not in search.objectives]  # fmt: skip
    if unknown:
        problems.append(Problem(
            "search.early_stopping.ahead_on",
            f"must name objectives ({', '.join(search.objectives)}), got {unknown}; auto: "
            "best_val_acc where it is one; null: any of them",
        ))  # fmt: skip
    if search.repeats > 1:
        problems.append(Problem(
            "search.early_stopping",
            f"cannot be combined with search.repeats ({search.repeats}): a stopped seed "
            "would take its whole config off the front",
        ))  # fmt: skip
    return problems


def _known_keys(location: tuple[Any, ...]) -> list[str]:
    """Keys valid at a location of the config, for "did you mean" hints."""
    model: Any = SearchConfig
    for part in location:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None or not (
            isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
        ):
            return []
        model = field.annotation
    return [key for key in model.model_fields if key != "source"]


_SECTIONS = list(SearchConfig.model_fields)


def _section_order(problem: Problem) -> tuple[int, str]:
    head = problem.path.split(".")[0].split("[")[0]
    return (_SECTIONS.index(head) if head in _SECTIONS else -1, problem.path)


def _absolute(path: str, cwd: Path) -> str:
    """`path` as an absolute path, a relative one taken from the user's working directory.
    URIs (s3://...) are left as they are: Ray and the stores read them."""
    if "://" in path:
        return path
    resolved = Path(path).expanduser()
    return str((resolved if resolved.is_absolute() else cwd / resolved).resolve())


def _resolve_paths(config: SearchConfig, cwd: Path) -> SearchConfig:
    """Every path made absolute: trials run in other working directories, on other nodes."""
    uri = config.tracking.uri or f"sqlite:///{cwd / 'mlflow.db'}"
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        uri = f"sqlite:///{cwd / uri.removeprefix('sqlite:///')}"  # relative to the user's cwd
    data = config.data.model_copy(
        update={
            key: _absolute(value, cwd)
            for key, value in (("root", config.data.root), ("cache_dir", config.data.cache_dir))
            if value
        }
    )
    return config.model_copy(
        update={
            "data": data,
            "run": config.run.model_copy(
                update={"storage_path": _absolute(config.run.storage_path, cwd)}
            ),
            "tracking": config.tracking.model_copy(
                update={"uri": uri, "experiment": config.tracking.experiment or config.name}
            ),
        }
    )
