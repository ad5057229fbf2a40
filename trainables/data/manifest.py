"""The manifest of one decoding: every file skipped or converted, why, and the totals.

Written as manifest.json next to the decoded images, so that "why does my folder of 25,000
photos give 24,998 images?" has an answer per file.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from trainables.data.catalogue import Catalogue, ImageFile
from trainables.data.decode import Decoded


class Manifest:
    def __init__(self, catalogue: Catalogue) -> None:
        self.catalogue = catalogue
        self.entries: list[dict[str, Any]] = []
        self.classes = {
            name: {"files": 0, "kept": 0, "skipped": Counter(), "converted": Counter()}
            for name in catalogue.class_names
        }

    def add(self, file: ImageFile, decoded: Decoded) -> None:
        name = self.catalogue.class_names[file.label]
        per_class = self.classes[name]
        per_class["files"] += 1
        per_class["kept"] += not decoded.skipped
        if not decoded.reasons:
            return
        action = "skipped" if decoded.skipped else "converted"
        for reason in decoded.reasons:
            per_class[action][reason] += 1
        self.entries.append(
            {
                "path": file.path,
                "class": name,
                "action": action,
                "reasons": list(decoded.reasons),
                "detail": decoded.detail,
            }
        )

    def by_reason(self, action: str) -> dict[str, int]:
        """Files skipped (or converted) for each reason, over every class."""
        total: Counter[str] = sum((c[action] for c in self.classes.values()), Counter())
        return dict(sorted(total.items()))

    @property
    def skipped_files(self) -> int:
        return sum(1 for entry in self.entries if entry["action"] == "skipped")

    @property
    def converted_files(self) -> int:
        return sum(1 for entry in self.entries if entry["action"] == "converted")

    def as_json(self, **about: Any) -> dict[str, Any]:
        """The manifest as a JSON object; `about` (key, timings) goes first."""
        files = len(self.catalogue.files)
        return {
            **about,
            "source": self.catalogue.source,
            "root": str(self.catalogue.root),
            "files": files,
            "kept": files - self.skipped_files,
            "skipped": self.skipped_files,
            "converted": self.converted_files,
            "skipped_by_reason": self.by_reason("skipped"),
            "converted_by_reason": self.by_reason("converted"),
            "classes": {
                name: {
                    "files": counts["files"],
                    "kept": counts["kept"],
                    "skipped": dict(sorted(counts["skipped"].items())),
                    "converted": dict(sorted(counts["converted"].items())),
                }
                for name, counts in self.classes.items()
            },
            "entries": self.entries,
        }
