"""`bench/early_stopping_replay.py`'s rules, as written on its command line."""

import importlib.util
import sys

import pytest

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location(
    "early_stopping_replay", REPO / "bench" / "early_stopping_replay.py"
)
replay_bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = replay_bench  # its dataclasses look their module up
spec.loader.exec_module(replay_bench)
Rule = replay_bench.Rule
SEARCHED = {"throughput": "max", "best_val_acc": "max", "gen_gap": "min"}


def test_a_rule_compares_on_every_objective_unless_told_which():
    rule = Rule.parse("1,2,4:0.5")
    assert (rule.rungs, rule.keep, rule.min_peers, rule.sees_min_accuracy) == (
        (1, 2, 4),
        0.5,
        3,
        True,
    )
    assert rule.objectives(SEARCHED) == SEARCHED


def test_a_rule_can_compare_trials_at_the_rungs_on_some_objectives_only():
    rule = Rule.parse("1,2,4:0.5:3::throughput, best_val_acc")
    assert rule.objectives(SEARCHED) == {"throughput": "max", "best_val_acc": "max"}
    assert str(rule) == "rungs [1, 2, 4], keep 0.5, on throughput and best_val_acc only"
    assert not Rule.parse("2,4:0.3:4:blind").sees_min_accuracy


def test_a_rule_is_decided_by_accuracy_as_the_search_is_unless_told_any_objective():
    assert Rule.parse("1,2,4:0.5").ahead_on_within(SEARCHED) == ("best_val_acc",)
    anyone = Rule.parse("1,2,4:0.5:3:::any")
    assert anyone.ahead_on_within(SEARCHED) is None
    assert str(anyone) == "rungs [1, 2, 4], keep 0.5, ahead on any"
    assert Rule.parse("1,2,4:0.5:3:blind").ahead_on is None  # the older rules: any
    speed_only = Rule.parse("1,2,4:0.5:3::throughput")
    assert speed_only.ahead_on_within(speed_only.objectives(SEARCHED)) is None
    with pytest.raises(ValueError, match="ahead on best_val_ac, which it does not compare"):
        Rule.parse("1,2,4:0.5:3:::best_val_ac").ahead_on_within(SEARCHED)


def test_a_rule_naming_an_objective_the_search_does_not_have_says_so():
    with pytest.raises(ValueError, match="accuracy not among the search's objectives"):
        Rule.parse("1,2:0.5:3::accuracy").objectives(SEARCHED)
    with pytest.raises(ValueError, match="'blind' or nothing"):
        Rule.parse("1,2:0.5:3:blnd")


def replayed_search(accuracy_at_rung_1: dict[str, float], final: dict[str, float]):
    """Six trials of two epochs, as a search run without early stopping reads back."""
    import pandas as pd

    rows = [{"trial_id": trial, "epoch": epoch, "throughput": 1000.0, "gen_gap": 0.05,
             "best_val_acc": accuracy_at_rung_1[trial] if epoch == 1 else final[trial],
             "time_total_s": float(epoch), "timestamp": epoch}
            for trial in final for epoch in (1, 2)]  # fmt: skip
    histories = pd.DataFrame(rows)
    frame = pd.DataFrame([{"trial_id": trial, "status": "ok", "throughput": 1000.0,
                           "gen_gap": 0.05, "best_val_acc": accuracy, "config.epochs": 2}
                          for trial, accuracy in final.items()])  # fmt: skip
    return replay_bench.Search(
        name="seed0", frame=frame, histories=histories, seconds=dict.fromkeys(final, 2.0),
        front=set(final), most_accurate=set(frame.nlargest(3, "best_val_acc")["trial_id"]),
        min_accuracy=0.55, split_sizes={"val": 4000, "test": 4000, "train_eval": 4000},
    )  # fmt: skip


def test_the_replay_counts_how_many_of_the_three_most_accurate_trials_a_rule_stopped():
    from search.config import load_config

    config = load_config(REPO / "configs" / "cats_dogs.yaml", ["search.ablation=null"])
    # at epoch 1, a b c have learned and d e f are at chance; in the end f is the best
    at_rung = {"a": 0.8, "b": 0.8, "c": 0.8, "d": 0.5, "e": 0.5, "f": 0.5}
    final = {"a": 0.81, "b": 0.80, "c": 0.70, "d": 0.60, "e": 0.60, "f": 0.90}
    outcome = replay_bench.replay_rule(replayed_search(at_rung, final), Rule.parse("1:0.5"),
                                       config)  # fmt: skip
    assert outcome.stopped >= 1 and outcome.most_accurate_stopped == 1  # f, slow to start
    spares_slow_starts = Rule.parse("1:0.5:3::::1")
    spared = replay_bench.replay_rule(replayed_search(at_rung, final), spares_slow_starts, config)
    assert spared.stopped == 0  # at chance at the first rung: a slow start goes on
    assert str(spares_slow_starts) == "rungs [1], keep 0.5, slow starts spared at 1 rungs"


def test_the_replay_says_when_it_stopped_a_front_trial_how_it_stood_then_and_what_it_held():
    from search.config import load_config

    config = load_config(REPO / "configs" / "cats_dogs.yaml", ["search.ablation=null"])
    at_rung = {"a": 0.8, "b": 0.8, "c": 0.8, "d": 0.5, "e": 0.5, "f": 0.5}
    final = {"a": 0.81, "b": 0.80, "c": 0.70, "d": 0.60, "e": 0.60, "f": 0.90}
    search = replayed_search(at_rung, final)
    outcome = replay_bench.replay_rule(search, Rule.parse("1:0.5"), config)
    assert outcome.stopped_at == {1: outcome.stopped}
    f = next(stopped for stopped in outcome.front_trials_stopped if stopped.trial_id == "f")
    assert (f.epoch, f.accuracy_then, f.best_val_acc) == (1, 0.5, 0.9)
    # same speed and gap, the most accurate: the whole front's volume above a's 0.81 is f's
    assert 0 < f.hypervolume_alone < 1


def test_the_replay_leaves_a_warming_up_trial_alone_unless_told_to_judge_it():
    from search.config import load_config

    config = load_config(REPO / "configs" / "cats_dogs.yaml", ["search.ablation=null"])
    at_rung = {"a": 0.8, "b": 0.8, "c": 0.8, "d": 0.5, "e": 0.5, "f": 0.5}
    final = {"a": 0.81, "b": 0.80, "c": 0.70, "d": 0.60, "e": 0.60, "f": 0.90}
    search = replayed_search(at_rung, final)
    search.frame["config.warmup_epochs"] = 2  # every trial still warming up at epoch 1
    assert replay_bench.replay_rule(search, Rule.parse("1:0.5"), config).stopped == 0
    judged = replay_bench.replay_rule(search, Rule.parse("1:0.5"), config, judge_warmup=True)
    assert judged.stopped >= 1


def test_a_rule_stops_trials_still_at_chance_after_its_first_rung_as_the_search_does_or_not():
    assert Rule.parse("1,2,4:0.5").at_chance_after == 1
    before = Rule.parse("1,2,4:0.5:3:::::none")
    assert before.at_chance_after is None and "at chance judged as any" in str(before)
    assert Rule.parse("1,2,4:0.5:3:::::2").at_chance_after == 2
    for wrong in ("0", "-1", "one"):
        with pytest.raises(ValueError, match="eighth field"):
            Rule.parse(f"1,2,4:0.5:3:::::{wrong}")


def test_the_replay_says_where_the_trials_still_at_chance_after_their_first_rung_ended():
    at_rung = {"a": 0.8, "b": 0.8, "c": 0.8, "d": 0.5, "e": 0.5, "f": 0.5}
    final = {"a": 0.81, "b": 0.80, "c": 0.70, "d": 0.52, "e": 0.50, "f": 0.90}
    search = replayed_search(at_rung, final)
    # d and e still at chance at epoch 2, their second rung; f had learned by then
    assert search.still_at_chance_finals((1, 2)) == [0.50, 0.52]
    assert search.still_at_chance_finals((1,)) == []  # no second rung: nothing to say
    search.frame["config.warmup_epochs"] = 1  # rung 2 at epoch 3, which none reached
    assert search.still_at_chance_finals((1, 2)) == []


def test_a_trial_resumed_from_its_checkpoint_counts_its_epochs_last_reported():
    """A resumed trial reports the epochs after its checkpoint again: the last report of an
    epoch is the one the search kept."""
    from dataclasses import replace

    import pandas as pd

    at_rung = {"a": 0.8, "b": 0.8, "c": 0.8, "d": 0.5, "e": 0.5, "f": 0.5}
    final = {"a": 0.81, "b": 0.80, "c": 0.70, "d": 0.52, "e": 0.50, "f": 0.90}
    search = replayed_search(at_rung, final)
    again = search.histories[search.histories["trial_id"] == "d"].assign(best_val_acc=0.8)
    resumed = replace(search, histories=pd.concat([search.histories, again], ignore_index=True))
    assert resumed.still_at_chance_finals((1, 2)) == [0.50]  # d learned, as last reported


def test_configs_two_searches_ran_alike_are_counted_by_whether_a_rule_decided_them_alike():
    settings = [{"t1": "lr=0.1", "t2": "lr=0.2", "t3": "lr=0.3"},
                {"u1": "lr=0.1", "u2": "lr=0.2", "u4": "lr=0.4"},
                {"v1": "lr=0.1", "v2": "lr=0.2", "v3": "lr=0.3"}]  # fmt: skip
    stops = [{"t1": 2, "t3": 1}, {"u1": 2, "u2": 1}, {"v1": 2, "v3": 1}]
    agreement = replay_bench.decision_agreement(settings, stops)
    # lr=0.1 stopped at epoch 2 in all three, lr=0.3 at 1 in the two that ran it; lr=0.2 ran
    # whole in two and was stopped at 1 in one; lr=0.4 ran in one search only
    assert (agreement.shared, agreement.alike_in_all) == (3, 2)
    assert (agreement.pairs_alike, agreement.pairs) == (3 + 1 + 1, 3 + 3 + 1)
    assert agreement.differing == [("lr=0.2", [None, 1, None])]


def test_a_config_a_search_did_not_run_is_marked_so_where_the_others_differ():
    settings = [{"a": "lr=0.1"}, {"b": "lr=0.1"}, {"c": "lr=0.9"}]
    agreement = replay_bench.decision_agreement(settings, [{"a": 4}, {}, {}])
    assert agreement.differing == [("lr=0.1", [4, None, replay_bench.NOT_RUN])]


def test_speeds_known_to_a_share_replace_every_interval_and_keep_the_speeds():
    at_rung = {"a": 0.8, "b": 0.8, "c": 0.8, "d": 0.5, "e": 0.5, "f": 0.5}
    final = {"a": 0.81, "b": 0.80, "c": 0.70, "d": 0.60, "e": 0.60, "f": 0.90}
    search = replayed_search(at_rung, final).with_speeds_known_to(0.05)
    histories = search.histories
    assert (histories["throughput"] == 1000.0).all()
    assert histories["throughput_low"].tolist() == pytest.approx([1000 - 1.959964 * 50] * 12)
    assert histories["throughput_high"].tolist() == pytest.approx([1000 + 1.959964 * 50] * 12)


def test_each_trials_sampled_settings_name_the_space_keys_in_their_order():
    import pandas as pd

    search = replayed_search({"a": 0.8}, {"a": 0.81})
    frame = pd.DataFrame([{"trial_id": "a", "config.lr": 0.002, "config.batch_size": 32,
                           "config.amp": True}])  # fmt: skip
    from dataclasses import replace

    settings = replace(search, frame=frame).sampled_settings(["batch_size", "lr", "amp", "seed"])
    assert settings == {"a": "batch_size=32, lr=0.002, amp=true"}


def test_a_configs_speed_from_search_to_search_is_read_with_each_searchs_scale_taken_out():
    import math

    import pandas as pd

    trials = ("a", "b", "c", "d", "e")

    def history(scale: float, faster: str = "") -> pd.DataFrame:
        """Five configs at one epoch, read on a search's scale, one of them 10% faster,
        each trial's interval +-10% (a standard error of 5.1%)."""
        speeds = {trial: 1000.0 * scale * (1.1 if trial == faster else 1.0) for trial in trials}
        return pd.DataFrame([{"trial_id": trial, "epoch": 1, "throughput": speed,
                              "throughput_low": 0.9 * speed, "throughput_high": 1.1 * speed}
                             for trial, speed in speeds.items()])  # fmt: skip

    settings = [{trial: f"lr=0.{i}" for i, trial in enumerate(trials)}] * 3
    # a search whose scale read 20% higher moves every config alike: no spread
    alike = replay_bench.speed_spread_by_epoch([history(1.0), history(1.2), history(0.9)], settings)
    assert alike.loc[1, "configs"] == 5 and alike.loc[1, "between_searches"] == pytest.approx(0)
    assert alike.loc[1, "own_intervals"] == pytest.approx(0.1 / 1.959964)
    # a, b and c each 10% faster in one search of the three, d and e never: the median
    # config moved by log(1.1) in one of three
    moved = replay_bench.speed_spread_by_epoch(
        [history(1.0, "a"), history(1.2, "b"), history(0.9, "c")], settings
    )
    assert moved.loc[1, "between_searches"] == pytest.approx(
        pd.Series([math.log(1.1), 0.0, 0.0]).std()
    )
    fewer = replay_bench.speed_spread_by_epoch([history(1.0), history(1.0)], settings[:2])
    assert fewer.empty  # a config in two searches only: no spread told
