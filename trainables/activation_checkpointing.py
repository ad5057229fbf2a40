"""Activation checkpointing for any model: its repeated blocks, or else its main sequence.

Blocks are found by module type: walking down from the model, the first modules whose type
occurs two or more times in the model and that hold modules of their own (ResNet's
`BasicBlock`, MobileNet's `InvertedResidual`, ConvNeXt's `CNBlock`, ViT's `EncoderBlock`);
containers (`nn.Sequential` and subclasses that keep its forward, `nn.ModuleList`,
`nn.ModuleDict`) are looked into, not taken. `recomputed_modules` names the types instead.
A model without repeated blocks (VGG, this project's small CNN) is checkpointed as a
sequence: the plain `nn.Sequential` nearest the top with the most children, split into
segments, all but the last recomputed.

Each checkpointed part is wrapped in `Checkpointed`, which recomputes it in backward
(torch's non-reentrant checkpoint: autocast and inputs without gradients work, and the RNG
state is restored, so dropout draws the same masks). The recomputation leaves batch-norm
running statistics alone: left to itself it would update them a second time per step, and
a checkpointed model would then evaluate differently from the same model without, which
would pass for an effect of checkpointing on accuracy. The wrapper leaves the model's
`state_dict` keys as they were, so weights load and save the same with or without it.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any, Protocol

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

_WRAPPED = "wrapped."


class RegionRecorder(Protocol):
    """Told where each recomputed region starts and ends (the CPU memory meter)."""

    @contextmanager
    def region(self, inputs: Sequence[torch.Tensor]) -> Iterator[None]: ...


# Set while the memory meter runs a forward: regions run plainly and are reported to it.
_RECORDER: ContextVar[RegionRecorder | None] = ContextVar("checkpoint_recorder", default=None)


@contextmanager
def recording_regions(recorder: RegionRecorder) -> Iterator[None]:
    token = _RECORDER.set(recorder)
    try:
        yield
    finally:
        _RECORDER.reset(token)


class Checkpointed(nn.Module):
    """`wrapped`, recomputed in backward while training with gradients. With `segments`
    (an `nn.Sequential`), the sequence is split into that many runs and every run but the
    last is recomputed."""

    def __init__(self, wrapped: nn.Module, segments: int | None = None) -> None:
        super().__init__()
        self.wrapped = wrapped
        self.segments = segments
        # Views of the wrapped layers, built once (a tuple: not registered as submodules).
        self._runs = tuple(self._split())
        for run in self._runs[1:]:
            # A segment must not change its input in place: the checkpoint keeps that input
            # to recompute from (VGG's ReLU(inplace=True) can open a segment).
            first = next(iter(run.children()), None)
            if first is not None and getattr(first, "inplace", False):
                first.inplace = False
        self.register_state_dict_post_hook(_drop_prefix)
        self.register_load_state_dict_pre_hook(_add_prefix)

    @property
    def recomputing(self) -> bool:
        return self.training and torch.is_grad_enabled()

    def runs(self) -> list[nn.Module]:
        """The parts recomputed one by one: the block, or the sequence's segments."""
        return list(self._runs)

    def _split(self) -> list[nn.Module]:
        if self.segments is None:
            return [self.wrapped]
        layers = list(self.wrapped.children())
        bounds = [round(i * len(layers) / self.segments) for i in range(self.segments + 1)]
        return [nn.Sequential(*layers[a:b]) for a, b in itertools.pairwise(bounds)]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not self.recomputing:
            return self.wrapped(*args, **kwargs)
        # Compiled, no meter records (it runs eager), and torch 2.11's Dynamo cannot trace a
        # ContextVar's get(): a graph break there, an error under fullgraph.
        recorder = None if torch.compiler.is_compiling() else _RECORDER.get()
        if self.segments is None:
            if recorder is not None:
                with recorder.region(_tensors(args, kwargs)):
                    return self.wrapped(*args, **kwargs)
            return _checkpoint(self.wrapped, *args, **kwargs)
        (x,) = args
        *recomputed, last = self._runs
        for run in recomputed:
            if recorder is not None:
                with recorder.region([x]):
                    x = run(x)
            else:
                x = _checkpoint(run, x)
        return last(x)


def _checkpoint(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """`module(*args)` recomputed in backward, its running statistics kept from the forward.

    Lists and dicts among the arguments are passed as copies: the recomputation reads its
    arguments again in backward, and a caller may have grown them by then (DenseNet appends
    each layer's output to the list the next layer reads)."""

    args = tuple(_snapshot(value) for value in args)
    kwargs = {key: _snapshot(value) for key, value in kwargs.items()}
    if torch.compiler.is_compiling():
        # Compiled, the recomputation is the partitioner's: it never replays a mutation, so
        # the running statistics are updated once without the frozen context; and Dynamo
        # takes a context_fn only when it yields two TorchDispatchModes (selective
        # checkpointing), which a context manager over the layers is not.
        return checkpoint(module, *args, use_reentrant=False, **kwargs)
    contexts = functools.partial(_forward_plainly_recompute_frozen, module)
    return checkpoint(module, *args, use_reentrant=False, context_fn=contexts, **kwargs)


def _forward_plainly_recompute_frozen(module: nn.Module) -> tuple[Any, Any]:
    """The checkpoint's contexts: the forward as it is, the recomputation's statistics frozen."""
    return nullcontext(), running_statistics_frozen(module)


def _snapshot(value: Any) -> Any:
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return value


@contextmanager
def running_statistics_frozen(module: nn.Module) -> Iterator[None]:
    """Normalisation layers of `module` normalise by the batch as usual but leave their
    running statistics (and batch counters) as they were."""
    layers = [
        layer
        for layer in module.modules()
        if getattr(layer, "track_running_stats", False) and hasattr(layer, "momentum")
    ]
    # The counters are kept as tensors on the device: reading one (int()) would wait for
    # every queued kernel of the card, at each block of each step.
    saved = [(layer.momentum, _counter(layer)) for layer in layers]
    for layer in layers:
        layer.momentum = 0.0  # running = (1 - 0) x running + 0 x batch
    try:
        yield
    finally:
        for layer, (momentum, counter) in zip(layers, saved, strict=True):
            layer.momentum = momentum
            if counter is not None:
                layer.num_batches_tracked.copy_(counter)


def _counter(layer: nn.Module) -> torch.Tensor | None:
    tracked = getattr(layer, "num_batches_tracked", None)
    return tracked.clone() if isinstance(tracked, torch.Tensor) else None


def _tensors(*values: Any) -> list[torch.Tensor]:
    """The tensors in `values`, inside lists, tuples and dicts too (DenseNet's layers take a
    list of earlier features)."""
    found: list[torch.Tensor] = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, list | tuple):
            found += _tensors(*value)
        elif isinstance(value, dict):
            found += _tensors(*value.values())
    return found


def _drop_prefix(module: nn.Module, state_dict: dict, prefix: str, local_metadata: Any) -> None:
    for key in [k for k in state_dict if k.startswith(prefix + _WRAPPED)]:
        state_dict[prefix + key[len(prefix + _WRAPPED) :]] = state_dict.pop(key)


def _add_prefix(module: nn.Module, state_dict: dict, prefix: str, *_: Any) -> None:
    for key in [k for k in state_dict if k.startswith(prefix)]:
        if not key.startswith(prefix + _WRAPPED):
            state_dict[prefix + _WRAPPED + key[len(prefix) :]] = state_dict.pop(key)


def repeated_blocks(model: nn.Module, types: Sequence[str] | None = None) -> list[str]:
    """The dotted names of the blocks to checkpoint (see the module docstring); with
    `types`, the outermost modules whose class name is one of them."""
    counts = Counter(type(m) for m in model.modules() if _block_like(m))

    def is_block(module: nn.Module) -> bool:
        if types is not None:
            return type(module).__name__ in types
        return _block_like(module) and counts[type(module)] >= 2

    found: list[str] = []

    def visit(prefix: str, module: nn.Module) -> None:
        for name, child in module.named_children():
            path = f"{prefix}{name}"
            if is_block(child):
                found.append(path)
            else:
                visit(path + ".", child)

    visit("", model)
    return found


def _is_container(module: nn.Module) -> bool:
    """A plain container, or a subclass that keeps `nn.Sequential`'s forward (RegNet's
    stages): its children run in order, so the blocks are among them."""
    if type(module) in (nn.ModuleList, nn.ModuleDict):
        return True
    return isinstance(module, nn.Sequential) and type(module).forward is nn.Sequential.forward


def _block_like(module: nn.Module) -> bool:
    return not _is_container(module) and any(True for _ in module.children())


def main_sequence(model: nn.Module) -> str | None:
    """The plain `nn.Sequential` nearest the top (breadth first) with the most children
    (two or more), as a dotted name ("" for the model itself), or None."""
    level = [("", model)]
    while level:
        sequences = [
            (path, module)
            for path, module in level
            if type(module) is nn.Sequential and len(module) >= 2
        ]
        if sequences:
            return max(sequences, key=lambda item: len(item[1]))[0]
        level = [
            (f"{path}.{name}" if path else name, child)
            for path, module in level
            for name, child in module.named_children()
        ]
    return None


def default_segments(length: int) -> int:
    """Chen et al.'s sqrt(n) segments for a sequence of n layers, at least two."""
    return max(2, round(math.sqrt(length)))


class CheckpointingError(ValueError):
    """Checkpointing cannot be applied to this model as asked."""


def enable_checkpointing(
    model: nn.Module,
    *,
    modules: Sequence[str] | None = None,
    segments: int | None = None,
) -> nn.Module:
    """Wrap `model`'s blocks (or its main sequence) in `Checkpointed`; returns the model,
    or the wrapper when the model itself is the sequence. A description of what was
    wrapped is `describe_checkpointing(model)`."""
    blocks = repeated_blocks(model, modules)
    if modules is not None and not blocks:
        known = sorted({type(m).__name__ for m in model.modules() if _block_like(m)})
        raise CheckpointingError(
            f"no module of type {', '.join(modules)} in the model; its types with "
            f"submodules: {', '.join(known) or 'none'}"
        )
    if blocks:
        if segments is not None:
            raise CheckpointingError(
                f"recomputed_segments splits a sequence, but this model is checkpointed by "
                f"its {len(blocks)} repeated blocks ({_block_types(model, blocks)}); leave it out"
            )
        for path in blocks:
            _replace(model, path, Checkpointed(model.get_submodule(path)))
        return model
    path = main_sequence(model)
    if path is None:
        raise CheckpointingError(
            "found no repeated blocks and no nn.Sequential to checkpoint; name the model's "
            "block types in train.recomputed_modules"
        )
    sequence = model.get_submodule(path)
    count = min(segments or default_segments(len(sequence)), len(sequence))
    wrapper = Checkpointed(sequence, segments=count)
    if path == "":
        return wrapper
    _replace(model, path, wrapper)
    return model


def _replace(model: nn.Module, path: str, module: nn.Module) -> None:
    parent, _, name = path.rpartition(".")
    setattr(model.get_submodule(parent), name, module)


def _block_types(model: nn.Module, paths: list[str]) -> str:
    return _counted_types(model.get_submodule(path) for path in paths)


def _counted_types(modules: Iterable[nn.Module]) -> str:
    counts = Counter(type(module).__name__ for module in modules)
    return ", ".join(f"{name} x{count}" for name, count in counts.items())


def checkpointed_parts(model: nn.Module) -> list[Checkpointed]:
    return [m for m in model.modules() if isinstance(m, Checkpointed)]


def describe_checkpointing(model: nn.Module) -> str:
    """What is recomputed, for logs and errors: "BasicBlock x8" or "a sequence of 7 in 2"."""
    parts = checkpointed_parts(model)
    if len(parts) == 1 and parts[0].segments is not None:
        return f"a sequence of {len(parts[0].wrapped)} layers in {parts[0].segments} segments"
    return _counted_types(part.wrapped for part in parts) or "nothing"
