"""Models by name: this project's own (`register_model`), every torchvision classifier, or a
user's factory given as "module:function".

    build_model("mobilenet_v3_small", num_classes=2, image_size=64)
    build_model("my_package.models:build", num_classes=2, image_size=64)

A factory is called as `factory(num_classes=..., image_size=...)` and returns an
`nn.Module` mapping (N, 3, image_size, image_size) images to (N, num_classes) logits.
Nothing here downloads anything unless `pretrained` asks for torchvision's weights, and
then only the way torchvision does on a user's machine: into torch's hub cache, once.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from contextlib import nullcontext
from functools import cache
from pathlib import Path
from typing import Protocol

import torch
from torch import nn
from torch.overrides import TorchFunctionMode


class ModelFactory(Protocol):
    def __call__(self, *, num_classes: int, image_size: int) -> nn.Module: ...


class ModelError(ValueError):
    """A model that cannot be built as asked; the message says why and what would work."""


class NotAModel(ModelError):
    """The name cannot give a model at any size: unknown, not importable, not a module."""


_OWN: dict[str, ModelFactory] = {}


def register_model(name: str) -> Callable[[ModelFactory], ModelFactory]:
    """Adds a factory to the models known by name (in the style of timm's)."""

    def register(factory: ModelFactory) -> ModelFactory:
        if name in _OWN:
            raise ValueError(f"a model named {name!r} is already registered")
        _OWN[name] = factory
        return factory

    return register


@register_model("small_cnn")
def small_cnn(*, num_classes: int, image_size: int) -> nn.Sequential:
    """The seed study's model: conv 32 3x3 + ReLU + 2x2 max-pool, dense 128, classes."""
    conv = nn.Conv2d(3, 32, kernel_size=3, padding=1)
    dense = nn.Linear(32 * (image_size // 2) ** 2, 128)
    # He-uniform, as the seed's Keras model (kernel_initializer='he_uniform').
    for layer in (conv, dense):
        nn.init.kaiming_uniform_(layer.weight, nonlinearity="relu")
        nn.init.zeros_(layer.bias)
    # Two stages: checkpointed as a sequence, the first (the large activations) is recomputed.
    return nn.Sequential(
        nn.Sequential(conv, nn.ReLU(), nn.MaxPool2d(2)),
        nn.Sequential(nn.Flatten(), dense, nn.ReLU(), nn.Linear(128, num_classes)),
    )


@cache
def torchvision_names() -> tuple[str, ...]:
    """Every classification model torchvision builds by name."""
    import torchvision

    return tuple(torchvision.models.list_models(module=torchvision.models))


def model_names() -> list[str]:
    """Every model known by name: this project's, then torchvision's."""
    return [*_OWN, *torchvision_names()]


def is_factory_path(name: str) -> bool:
    return ":" in name


def build_model(
    name: str,
    num_classes: int,
    image_size: int,
    *,
    pretrained: bool = False,
    device: torch.device | None = None,
) -> nn.Module:
    """The model `name` for `num_classes` classes of `image_size` square images.

    `pretrained`: torchvision's default weights (ImageNet), with a new head for
    `num_classes` (the data's classes are not ImageNet's). `device`: where its weights are
    made and initialised (this project's and torchvision's models; the device's own random
    generator under the same seed), with no copy in host memory first. A user's factory
    builds where it builds (it may make host tensors on purpose) and is moved there after.
    """
    if pretrained and name not in torchvision_names():
        raise ModelError(
            f"pretrained weights are torchvision's, and {name!r} is not a torchvision model"
            + ("; a factory loads its own weights" if is_factory_path(name) else "")
        )
    on_device = device if device is not None else nullcontext()
    if name in _OWN:
        with on_device:
            return _checked(name, _OWN[name](num_classes=num_classes, image_size=image_size))
    if is_factory_path(name):
        factory = _import_factory(name)
        model = _checked(name, factory(num_classes=num_classes, image_size=image_size))
        return model.to(device) if device is not None else model
    if name in torchvision_names():
        with on_device:
            return _torchvision_model(name, num_classes, image_size, pretrained)
    raise NotAModel(
        f"unknown model {name!r}: use one of this project's ({', '.join(_OWN)}), a "
        "torchvision classification model (torchvision.models.list_models), or your own "
        "factory as 'module:function'"
    )


def _import_factory(path: str) -> ModelFactory:
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise NotAModel(f"{path!r} is not 'module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise NotAModel(
            f"cannot import module {module_name!r} for {path!r}: {error}; it must be "
            "importable where the trials run (installed, or on PYTHONPATH)"
        ) from error
    factory = module
    for part in attribute.split("."):
        if not hasattr(factory, part):
            raise NotAModel(f"module {module_name!r} has no {attribute!r} (for {path!r})")
        factory = getattr(factory, part)
    if not callable(factory):
        raise NotAModel(f"{path!r} is a {type(factory).__name__}, not a function")
    return factory


def _checked(name: str, model: object) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise NotAModel(f"{name!r} returned a {type(model).__name__}, not a torch nn.Module")
    return model


# Options some torchvision builders need to be trainable as plain classifiers here.
def _torchvision_options(name: str, image_size: int, pretrained: bool) -> dict[str, object]:
    if pretrained:
        # torchvision's pretrained builders set these themselves (and drop GoogLeNet's and
        # Inception's auxiliary heads after loading them); the size is the weights'.
        return {}
    if name in ("googlenet", "inception_v3"):
        # One output (no auxiliary heads) and torchvision's future default initialisation.
        return {"aux_logits": False, "init_weights": True}
    if name.startswith("vit_"):
        return {"image_size": image_size}  # position embeddings for this size
    if name == "maxvit_t":
        return {"input_size": (image_size, image_size)}
    return {}


# Models whose pretrained weights fix the image size (their position embeddings, windows).
_FIXED_SIZE_WHEN_PRETRAINED = ("vit_", "maxvit_")


def pretrained_size_problem(name: str, image_size: int) -> str | None:
    """Why `name`'s pretrained weights cannot take `image_size` images, or None."""
    if not name.startswith(_FIXED_SIZE_WHEN_PRETRAINED):
        return None
    import torchvision

    size = torchvision.models.get_model_weights(name).DEFAULT.meta["min_size"][0]
    if image_size == size:
        return None
    return f"the pretrained weights of {name!r} are for {size} px images, not {image_size}"


def _torchvision_model(name: str, num_classes: int, image_size: int, pretrained: bool) -> nn.Module:
    import torchvision

    options = _torchvision_options(name, image_size, pretrained)
    if pretrained and (problem := pretrained_size_problem(name, image_size)):
        raise ModelError(problem)
    try:
        if not pretrained:
            return torchvision.models.get_model(
                name, weights=None, num_classes=num_classes, **options
            )
        fetch_weights(name)
        weights = torchvision.models.get_model_weights(name).DEFAULT
        model = torchvision.models.get_model(name, weights=weights, **options)
    except ModelError:
        raise
    except (ValueError, AssertionError, RuntimeError) as error:
        message = f"torchvision cannot build {name!r} for {image_size} px: {error}"
        raise ModelError(message) from error
    _replace_head(model, len(weights.meta["categories"]), num_classes)
    return model


def weights_file(name: str) -> Path:
    """Where torchvision keeps `name`'s default weights once downloaded: torch's hub cache
    ($TORCH_HOME/hub/checkpoints), as on any user's machine."""
    import torchvision

    url = torchvision.models.get_model_weights(name).DEFAULT.url
    return Path(torch.hub.get_dir()) / "checkpoints" / url.rsplit("/", 1)[-1]


def fetch_weights(name: str) -> Path:
    """Make sure torchvision can load `name`'s default weights: in the cache, or downloaded
    into it now (as torchvision would), with an error that says where the file goes when
    neither works. A search calls it once before its trials start, so they read the cache."""
    import torchvision

    path = weights_file(name)
    if path.exists():
        return path
    weights = torchvision.models.get_model_weights(name).DEFAULT
    try:
        weights.get_state_dict(progress=False, check_hash=True)
    except (OSError, RuntimeError) as error:  # no network (URLError), or a hash mismatch
        raise ModelError(
            f"pretrained weights for {name!r} are not in torch's cache ({path}) and could not "
            f"be downloaded ({error}); download them once on a machine with network, or copy "
            "the file there"
        ) from error
    return path


def pretrained_stats(name: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(mean, std) per channel that `name`'s default weights were trained with, from their
    own transforms (ImageNet's for every torchvision classifier today)."""
    import torchvision

    transform = torchvision.models.get_model_weights(name).DEFAULT.transforms()
    return tuple(transform.mean), tuple(transform.std)


def _replace_head(model: nn.Module, categories: int, num_classes: int) -> None:
    """Swap the last layer that outputs `categories` (ImageNet's 1000) for a fresh one
    with `num_classes` outputs: Linear in most models, a 1x1 Conv2d in SqueezeNet."""
    heads = [
        (name, module)
        for name, module in model.named_modules()
        if (isinstance(module, nn.Linear) and module.out_features == categories)
        or (isinstance(module, nn.Conv2d) and module.out_channels == categories)
    ]
    if not heads:
        raise ModelError(f"found no layer with {categories} outputs to replace by the new head")
    path, head = heads[-1]
    if isinstance(head, nn.Linear):
        fresh: nn.Module = nn.Linear(head.in_features, num_classes, bias=head.bias is not None)
    else:
        fresh = nn.Conv2d(head.in_channels, num_classes, head.kernel_size, head.stride)
    parent_path, _, attribute = path.rpartition(".")
    setattr(model.get_submodule(parent_path), attribute, fresh.to(head.weight.device))


# --- what a model accepts, checked without building it for real ----------------------------


def check_model(name: str, num_classes: int, image_size: int) -> None:
    """Raise `ModelError` unless `name` builds and maps a batch of `image_size` images to
    `num_classes` logits; where another size works, the error names one.

    Runs on the meta device (shapes only): a second for any torchvision model, and nothing
    downloaded or allocated; a model of at most `SMALL_MODEL_PARAMETERS` runs its forward
    on the CPU instead, in milliseconds."""
    problem = _forward_problem(name, num_classes, image_size)
    if problem is None:
        return
    larger = larger_size_that_works(name, num_classes, start=image_size)
    if larger is None:
        raise ModelError(f"{name!r} cannot take {image_size} px images: {problem}")
    raise ModelError(
        f"{name!r} cannot take {image_size} px images ({problem}); it works at {larger} px "
        "(set data.image_size)"
    )


NEAR = 32  # sizes tried one by one above the configured one before doubling


def larger_size_that_works(
    name: str, num_classes: int, start: int, limit: int = 1024
) -> int | None:
    """A size above `start` that `name` accepts, checked, or None up to `limit`.

    The next `NEAR` sizes are tried one by one, so a model that needs a multiple of its
    patch (ViT) gets the nearest; beyond them, doubling then bisection, which finds the
    smallest only where every larger size works too (pooling models: Inception's 75 px).
    """
    for size in range(start + 1, min(start + NEAR, limit) + 1):
        if _forward_problem(name, num_classes, size) is None:
            return size
    size = start + NEAR
    while size < limit:
        size = min(2 * size, limit)
        if _forward_problem(name, num_classes, size) is None:
            low, high = size // 2, size  # low failed, high works
            while high - low > 1:
                middle = (low + high) // 2
                works = _forward_problem(name, num_classes, middle) is None
                low, high = (low, middle) if works else (middle, high)
            return high
    return None


def _forward_problem(name: str, num_classes: int, image_size: int) -> str | None:
    """Why `name` cannot classify `image_size` images, or None when it can."""
    try:
        logits = _logits_of_two(name, num_classes, image_size)
    except NotAModel:
        raise
    except Exception as error:  # the model's own complaint about the size, whatever it is
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    shape = tuple(getattr(logits, "shape", ()))
    if shape != (2, num_classes):
        what = f"shape {shape}" if shape else f"a {type(logits).__name__}"
        return f"returns {what} for 2 images, not (2, {num_classes}) logits"
    return None


# Parameters below which a model's check runs on the CPU: such a forward of two images
# takes milliseconds, while the meta device's first forward in a process loads PyTorch's
# meta kernels (1.0 s on the project's 2-core machine).
SMALL_MODEL_PARAMETERS = 2_000_000


def _logits_of_two(name: str, num_classes: int, image_size: int) -> object:
    """The model's output for two images, on the meta device; on the CPU for a small model
    and for a forward that the meta device cannot run (an op without a meta kernel, a
    value read)."""
    images = (2, 3, image_size, image_size)
    try:
        model = meta_model(name, num_classes, image_size).eval()
        if sum(parameter.numel() for parameter in model.parameters()) > SMALL_MODEL_PARAMETERS:
            with torch.device("meta"), torch.no_grad():
                return model(torch.zeros(images))
    except NotAModel:
        raise
    except Exception as error:
        if "meta" not in str(error).lower():
            raise
    model = build_model(name, num_classes, image_size).eval()
    with torch.no_grad():
        return model(torch.zeros(images))


def meta_model(name: str, num_classes: int, image_size: int) -> nn.Module:
    """The model with its tensors on the meta device: built there, or (for builders that
    read values while building, like RegNet's) built on the CPU, uninitialised, and moved."""
    try:
        with torch.device("meta"):
            return build_model(name, num_classes, image_size)
    except NotAModel:
        raise
    except Exception as error:
        if "meta" not in str(error):
            raise
    with _InitialisationSkipped(), torch.no_grad():
        model = build_model(name, num_classes, image_size)
    return model.to("meta")


class _InitialisationSkipped(TorchFunctionMode):
    """Weights are not filled with random numbers: for a model whose values are thrown away.
    Filling RegNet-Y 128GF's 640 million weights is seconds of work thrown away. `torch.nn.init`
    reaches the mode by its own name or by the tensor methods it calls; the builder's own
    arithmetic (RegNet's widths) runs as usual, and constant fills (small, and used in
    arithmetic) too."""

    RANDOM_FILLS = frozenset({torch.Tensor.normal_, torch.Tensor.uniform_, torch.Tensor.random_})

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        initialising = getattr(func, "__module__", None) == "torch.nn.init"
        if initialising or func in self.RANDOM_FILLS:
            return args[0] if args else kwargs["tensor"]
        return func(*args, **kwargs)
