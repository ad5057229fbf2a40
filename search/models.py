"""Before a search starts: every model its config can train builds, takes the configured
image size and, where checkpointing may be on, can be checkpointed as asked.

Each model is built on PyTorch's meta device (shapes only: nothing allocated, nothing
downloaded; a small one then runs its forward on the CPU, in milliseconds), so a typo in
`train.model`, a factory that returns the wrong thing or an image size the model cannot
take is one config error naming the key, not a crashed trial minutes later. The seed
study's `small_cnn` alone needs no check (and no torch).
"""

from __future__ import annotations

from typing import Any

from search.config import ConfigError, SearchConfig
from search.errors import Problem

CHECK_CLASSES = 2  # a factory builds for the classes it is given: any number shows the shape


def check_models(config: SearchConfig) -> None:
    """Raise `ConfigError` naming `train.model` (or `space.model`) and the checkpointing
    keys for every model of `config` that cannot train as configured (`search.run` says
    which of them were set on the command line)."""
    models = _values(config, "model", "small_cnn")
    checkpointing = True in _values(config, "activation_checkpointing", False)
    pretrained = True in _values(config, "pretrained", False)
    if models == ["small_cnn"] and not checkpointing and not pretrained:
        return
    from trainables.activation_checkpointing import CheckpointingError, enable_checkpointing
    from trainables.models import (
        ModelError,
        check_model,
        fetch_weights,
        meta_model,
        pretrained_size_problem,
        torchvision_names,
    )

    where = "space.model" if "model" in config.space else "train.model"
    modules = config.train.get("recomputed_modules")
    segments = config.train.get("recomputed_segments")
    problems = []
    for model in models:
        try:
            check_model(model, CHECK_CLASSES, config.data.image_size)
        except ModelError as error:
            problems.append(Problem(where, str(error)))
            continue
        if pretrained and model not in torchvision_names():
            problems.append(
                Problem("train.pretrained", f"is true, but {model!r} has no torchvision weights")
            )
        elif pretrained and (problem := pretrained_size_problem(model, config.data.image_size)):
            problems.append(Problem("train.pretrained", problem))
        elif pretrained:
            try:
                fetch_weights(model)  # once, here: the trials then read torch's cache
            except ModelError as error:
                problems.append(Problem("train.pretrained", str(error)))
        if not checkpointing:
            continue
        try:
            built = meta_model(model, CHECK_CLASSES, config.data.image_size)
            enable_checkpointing(built, modules=modules, segments=segments)
        except CheckpointingError as error:
            problems.append(Problem(_checkpointing_key(modules, segments), f"{model}: {error}"))
    if problems:
        raise ConfigError(config.source, problems)


def _values(config: SearchConfig, key: str, default: Any) -> list[Any]:
    """Every value `key` can take in a trial: fixed in `train`, or each sampled candidate."""
    if key in config.space:
        return [value for _, value in config.space[key].candidates()]
    return [config.train.get(key, default)]


def _checkpointing_key(modules: object, segments: object) -> str:
    """The key a checkpointing problem comes from: the one the user set, if any."""
    if modules is not None:
        return "train.recomputed_modules"
    if segments is not None:
        return "train.recomputed_segments"
    return "train.activation_checkpointing"
