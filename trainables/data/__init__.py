"""Data for trials: settings, the prepared (decoded, split) form, and how to prepare it."""

from trainables.data.errors import DataUnavailable
from trainables.data.preparation import prepare_data
from trainables.data.prepared import PreparedData, Split, channel_stats
from trainables.data.settings import DataSettings, default_cache_dir

__all__ = [
    "DataSettings",
    "DataUnavailable",
    "PreparedData",
    "Split",
    "channel_stats",
    "default_cache_dir",
    "prepare_data",
]
