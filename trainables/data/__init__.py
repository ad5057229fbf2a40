"""Data for trials: settings, the prepared (decoded, split) form, and how to prepare it."""

from trainables.data.preparation import prepare_data
from trainables.data.prepared import PreparedData, Split, channel_stats
from trainables.data.settings import DataSettings

__all__ = ["DataSettings", "PreparedData", "Split", "channel_stats", "prepare_data"]
