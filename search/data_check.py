"""The search's data, checked before anything starts: an image folder that is not there (or
holds fewer than two class folders) is one message naming `data.root`, in a moment, not
after Ray has started."""

from __future__ import annotations

from search.config import ConfigError, SearchConfig
from search.errors import Problem


def check_data(config: SearchConfig) -> None:
    """Raise `ConfigError` at `data.root` when the image folder the config names cannot be
    read as one; other sources (synthetic, auto, oxford_pets) are prepared as they start."""
    data = config.data
    if data.source != "image_folder":
        return
    from trainables.data.folder import folder_problem  # numpy, not torch

    root = data.root_path()
    problem = folder_problem(root) if root is not None else None
    if problem is not None:
        said = problem.removeprefix("data.root: ")
        raise ConfigError(config.source, [Problem("data.root", said)])
