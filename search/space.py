"""The `space:` section: how each sampled train setting is written and what Tune gets.

batch_size: {choice: [16, 32, 64]}     # one of the values
optimizer:  {grid: [sgd, adam]}        # every value is tried (the first trials), then sampled
lr:         {loguniform: [1.0e-4, 0.1]}
momentum:   {uniform: [0.8, 0.99]}
epochs:     {randint: [2, 5]}          # whole numbers, both ends included
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import optuna
    from ray import tune

SpaceKind = Literal["choice", "grid", "uniform", "loguniform", "randint"]
_LISTS = ("choice", "grid")
_RANGES = ("uniform", "loguniform", "randint")
SYNTAX = (
    "{choice: [a, b, ...]}, {grid: [a, b, ...]}, {uniform: [low, high]}, "
    "{loguniform: [low, high]} or {randint: [low, high]}"
)


@dataclass(frozen=True)
class SpaceParam:
    kind: SpaceKind
    values: tuple[Any, ...] = ()  # choice and grid
    low: float = math.nan  # uniform, loguniform, randint (inclusive)
    high: float = math.nan

    @classmethod
    def parse(cls, raw: Any) -> SpaceParam:
        """Read one entry of `space:`; a ValueError states the rule that was broken."""
        if not isinstance(raw, Mapping) or len(raw) != 1:
            raise ValueError(f"must be one of {SYNTAX}, got {raw!r}")
        ((kind, args),) = raw.items()
        if kind in _LISTS:
            if not isinstance(args, list) or not args:
                raise ValueError(f"{kind} takes a non-empty list of values, got {args!r}")
            if len(set(map(repr, args))) != len(args):
                raise ValueError(f"{kind} lists a value twice: {args!r}")
            return cls(kind=kind, values=tuple(args))
        if kind in _RANGES:
            return cls._parse_range(kind, args)
        raise ValueError(f"unknown kind {kind!r}; must be one of {SYNTAX}")

    @classmethod
    def _parse_range(cls, kind: SpaceKind, args: Any) -> SpaceParam:
        number = int if kind == "randint" else (int, float)
        if (
            not isinstance(args, list)
            or len(args) != 2
            or not all(isinstance(a, number) and not isinstance(a, bool) for a in args)
        ):
            what = "whole numbers" if kind == "randint" else "numbers"
            raise ValueError(f"{kind} takes [low, high] as two {what}, got {args!r}")
        low, high = args
        if not low < high:
            raise ValueError(f"{kind} needs low < high, got [{low}, {high}]")
        if kind == "loguniform" and low <= 0:
            raise ValueError(f"loguniform needs low > 0, got [{low}, {high}]")
        return cls(kind=kind, low=low, high=high)

    def candidates(self) -> list[tuple[str, Any]]:
        """The values a trial may receive that are worth type-checking, with their paths."""
        if self.kind in _LISTS:
            return [(f"{self.kind}[{i}]", value) for i, value in enumerate(self.values)]
        return [(f"{self.kind}[0]", self.low), (f"{self.kind}[1]", self.high)]

    def to_tune(self) -> tune.search.sample.Domain:
        from ray import tune  # here, not above: checking a config must not wait for Ray

        if self.kind in _LISTS:
            return tune.choice(list(self.values))
        if self.kind == "uniform":
            return tune.uniform(self.low, self.high)
        if self.kind == "loguniform":
            return tune.loguniform(self.low, self.high)
        return tune.randint(int(self.low), int(self.high) + 1)  # Tune's high is exclusive

    def to_optuna(self) -> optuna.distributions.BaseDistribution:
        """The same domain as Optuna asks it (the searcher samples through Optuna)."""
        from optuna import distributions  # here, not above: as for Ray

        if self.kind in _LISTS:
            return distributions.CategoricalDistribution(list(self.values))
        if self.kind == "randint":
            return distributions.IntDistribution(int(self.low), int(self.high))
        return distributions.FloatDistribution(
            float(self.low), float(self.high), log=self.kind == "loguniform"
        )

    def as_yaml(self) -> dict[str, list[Any]]:
        if self.kind in _LISTS:
            return {self.kind: list(self.values)}
        return {self.kind: [self.low, self.high]}


def grid_points(space: Mapping[str, SpaceParam]) -> list[dict[str, Any]]:
    """Every combination of the `grid` entries; the searcher runs these first."""
    grid = {key: param.values for key, param in space.items() if param.kind == "grid"}
    if not grid:
        return []
    return [dict(zip(grid, combo, strict=True)) for combo in itertools.product(*grid.values())]
