"""A Tune searcher saved as its state: `save` and `restore` (which Tune calls with the
experiment's checkpoint) as one pickle of `get_state`, read back by `set_state`."""

from __future__ import annotations

import pickle
from typing import Any

from ray.tune.search import Searcher


class SavedAsItsState(Searcher):
    """A searcher whose saved form is its `get_state` (a subclass says what that holds)."""

    def get_state(self) -> dict[str, Any]:
        raise NotImplementedError

    def set_state(self, state: dict[str, Any]) -> None:
        raise NotImplementedError

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as handle:
            pickle.dump(self.get_state(), handle)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as handle:
            self.set_state(pickle.load(handle))
