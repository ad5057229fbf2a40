"""The one error data preparation raises on purpose (the images asked for are not there),
and how any error is shown in one line (a skipped file's reason, a pruned trial's)."""

from __future__ import annotations


class DataUnavailable(ValueError):
    """The data a config asks for cannot be had: a missing folder or data set, no
    network to download it, or too few usable images for the split sizes. The message
    says what is missing, where it looked, and what to do instead."""


def first_line(error: BaseException, limit: int = 300) -> str:
    """The first line of an error's message (its type when it has none), at most `limit`."""
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:limit]
