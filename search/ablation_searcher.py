"""The ablations' searcher: Tune asks it for the ablation trials in the order a
`search.ablation.ScreenedOrder` decides them, so that a base's noise floor has run before its
changes are chosen (`search.ablation.skip_seed_fragile`).

Why: a front trial's config can learn on some seeds only (docs/RESULTS.md, sections 33 and
63). Ablated, its floor holds a run at chance, and every accuracy effect is read against
that spread: the answer says nothing of accuracy. Run first, its floor shows this before
its changes are spent on it, and the next front trial is tried instead (section 66).

While a floor is still running, the next trial waits (`suggest` answers None, Tune asks
again): a floor run that ended first would then leave its process idle and, once the other
ended too, lose it (Tune keeps one idle process), so the scheduler holds such an end
(`search.held_ends.HoldsEnds`, which reads `waits` and `end_held` here as it reads the
search's order). The trials' concurrency is kept here (`max_concurrent`), as Tune's own
generator kept it before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ray.tune.search import Searcher

from search.ablation import ScreenedOrder, floor_accuracy, floor_key
from search.saved_state import SavedAsItsState
from trainables.metrics import ABLATION, ABLATION_OF, ASKED, NOISE_FLOOR


class ScreenedAblations(SavedAsItsState):
    """Suggests `order`'s configs as they are decided, at most `max_concurrent` running
    (None: as resources allow); `say` tells the user what a floor decided."""

    def __init__(
        self,
        order: ScreenedOrder,
        max_concurrent: int | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__()
        self.order, self.max_concurrent, self.say = order, max_concurrent, say
        self.suggested: list[str] = []  # Tune trial ids, in the order's order
        self.floor_of: dict[str, tuple[str, int]] = {}  # trial id -> its floor's key
        self.floors: dict[tuple[str, int], float | None] = {}  # floor key -> best_val_acc
        self.running: set[str] = set()  # suggested, not yet ended for Tune
        self.held: frozenset[str] = frozenset()  # ended for the order, not yet for Tune

    @property
    def holds_ends(self) -> bool:
        """Whether a trial may wait for a floor: screened, and with a cap on the trials at
        once (without one, Tune makes trials as it asks, which would wait for the process a
        held trial keeps)."""
        return self.order.screened and self.max_concurrent is not None

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict, **spec: Any
    ) -> bool:
        return True  # every suggestion is a whole config: nothing in the space to resolve

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self.max_concurrent and len(self.running) >= self.max_concurrent:
            return None
        decided, final = self.order.decided(self.floors)
        if len(self.suggested) >= len(decided):
            return Searcher.FINISHED if final else None  # None: a floor still runs
        # its place in the order: the report reads the ablations in it (Tune's trial ids
        # from a searcher are random)
        point = {**decided[len(self.suggested)], ASKED: len(self.suggested)}
        self.suggested.append(trial_id)
        self.running.add(trial_id)
        if point[ABLATION] == NOISE_FLOOR:
            self.floor_of[trial_id] = floor_key(point)
        return point

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        self.running.discard(trial_id)  # a held trial kept its slot until now
        if trial_id in self.held:
            self.held -= {trial_id}  # its end, told when it was held
            return
        self.ended(trial_id, None if error else result)

    def ended(self, trial_id: str, result: dict[str, Any] | None) -> None:
        """A trial ended for the order: a floor run's accuracy decides what follows."""
        key = self.floor_of.get(trial_id)
        if key is None or key in self.floors:  # a run ended again (rerun after a restore):
            return  # its first end decided what was suggested after it
        before, _ = self.order.decided(self.floors)
        self.floors[key] = floor_accuracy(result)
        decided, _ = self.order.decided(self.floors)
        if self.say is not None and len(decided) > len(before):
            self.say(f"Ablations: {self.decision(key[0], decided[len(before)])}")

    def decision(self, base: str, next_point: dict[str, Any]) -> str:
        """What a base's floor decided, in words, given the next config it brought."""
        runs = [value for key, value in self.floors.items() if key[0] == base]
        reached = " / ".join("-" if value is None else f"{value:.4g}" for value in runs)
        following = str(next_point[ABLATION_OF])
        if self.order.learns_on_every_seed(runs):
            return f"trial {base}'s noise floor learned on every seed ({reached}): ablating it"
        if following == base or next_point[ABLATION] != NOISE_FLOOR:
            return (f"trial {base}'s noise floor learned nothing on some seeds ({reached}); "
                    f"ablating trial {following}")  # fmt: skip
        return (f"trial {base}'s noise floor learned nothing on some seeds ({reached}): its "
                f"config learns on some seeds only; trying trial {following}'s floor")  # fmt: skip

    def waits(self, ending: str | None = None) -> bool:
        """Whether the next suggestion would wait for a running floor run (one other than
        `ending`, were that one to end now)."""
        decided, final = self.order.decided(self.floors)
        if final or len(self.suggested) < len(decided):
            return False
        return any(
            trial != ending and key not in self.floors
            for trial, key in self.floor_of.items()
            if trial in self.running
        )

    def end_held(self, trial_id: str, result: dict[str, Any], stopped: bool) -> None:
        """`trial_id` is held at its last report (`search.held_ends`): it ends for the order
        now, and keeps its slot (its process) until Tune ends it, whose telling is dropped."""
        self.ended(trial_id, result)
        self.held |= {trial_id}

    def get_state(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items() if key != "say"}

    def set_state(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
