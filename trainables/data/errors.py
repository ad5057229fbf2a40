"""The one error data preparation raises on purpose: the images asked for are not there."""

from __future__ import annotations


class DataUnavailable(ValueError):
    """The data a config asks for cannot be had: a missing folder or data set, no
    network to download it, or too few usable images for the split sizes. The message
    says what is missing, where it looked, and what to do instead."""
