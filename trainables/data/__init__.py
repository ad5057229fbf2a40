"""Data for trials: settings, the prepared (decoded, split) form, and how to prepare it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Imported on first use: the settings load without torchvision (see `trainables`).
_EXPORTS = {
    "DataSettings": "trainables.data.settings",
    "DataUnavailable": "trainables.data.errors",
    "PreparedData": "trainables.data.prepared",
    "Split": "trainables.data.prepared",
    "channel_stats": "trainables.data.prepared",
    "default_cache_dir": "trainables.data.settings",
    "prepare_data": "trainables.data.preparation",
}
__all__ = [
    "DataSettings",
    "DataUnavailable",
    "PreparedData",
    "Split",
    "channel_stats",
    "default_cache_dir",
    "prepare_data",
]

if TYPE_CHECKING:
    from trainables.data.errors import DataUnavailable
    from trainables.data.preparation import prepare_data
    from trainables.data.prepared import PreparedData, Split, channel_stats
    from trainables.data.settings import DataSettings, default_cache_dir


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'trainables.data' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
