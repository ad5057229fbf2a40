"""Trials packed on a card by their predicted memory (`resources.pack: memory`)."""

from __future__ import annotations

import itertools
import json
import math
import pickle
import subprocess
import sys
import textwrap

import pytest

from search.config import ConfigError, SearchConfig
from search.devices import check_packing
from search.feasibility import MemoryModel
from search.packing import LIVE_MODELS, MEMORY_MARGIN, SHARE_STEP, PackedResources, share_of_card
from search.searcher import InOrder, build_searcher
from search.space import SpaceParam
from tests.conftest import REPO
from tests.processes import cli_env, ray_temp_dir
from trainables.metrics import TIMED_AGAINST_NOTE
from trainables.settings import TrainSettings

CARD_MB = 81_559.0  # an H100's 80 GB
CONTEXT_MB = 552.0  # what a trial's process holds outside the allocator, reserve included
RESNET = {"model": "resnet50"}


def learned_model(name: str = "") -> MemoryModel:
    """A GPU memory model that has seen ResNet-50 steps of 16 and 64 images (360 MiB + 40
    a image) on an H100 whose trials hold `CONTEXT_MB` outside the allocator."""
    model = MemoryModel(on_gpu=True, packs_search=name)
    for batch, peak in ((16, 1000.0), (64, 2920.0)):
        settings = TrainSettings.from_config({**RESNET, "batch_size": batch})
        model.observe(settings, batch, peak, limit_mb=20_000.0, card_mb=CARD_MB,
                      context_mb=CONTEXT_MB)  # fmt: skip
    return model


def test_a_share_is_the_need_over_the_card_rounded_up_to_the_step_and_never_above_one():
    assert share_of_card(1000.0, 16_000.0) == SHARE_STEP == 0.0625  # exactly one step
    assert share_of_card(1001.0, 16_000.0) == 0.125
    assert share_of_card(1.0, 16_000.0) == 0.0625  # at least one step
    assert share_of_card(4_900.0, 16_000.0) == 0.3125  # exact: Ray keeps four decimals
    assert share_of_card(90_000.0, 64_000.0) == 1.0
    with pytest.raises(ValueError):
        share_of_card(0.0, 64_000.0)


def test_a_configs_share_holds_its_predicted_peak_with_the_margin_and_the_context():
    model = learned_model()
    small = TrainSettings.from_config({**RESNET, "batch_size": 32})
    large = TrainSettings.from_config({**RESNET, "batch_size": 512})
    for settings in (small, large):
        needed = (360 + 40 * settings.batch_size) * (1 + MEMORY_MARGIN) + CONTEXT_MB
        share = model.share(settings)
        assert share * CARD_MB >= needed > (share - SHARE_STEP) * CARD_MB
    assert model.share(small) == 0.0625  # 2.5 GiB: 16 to a card, where 0.25 holds four
    assert model.share(large) == 0.375  # 25 GiB: more than a quarter, which would run out


def test_a_config_the_model_cannot_predict_yet_has_no_share_of_its_own():
    model = learned_model()
    adam = TrainSettings.from_config({**RESNET, "batch_size": 32, "optimizer": "adam"})
    assert model.share(adam) is None  # another memory group: not measured yet
    assert MemoryModel(on_gpu=True, packs_search="x").share(adam) is None
    assert MemoryModel(probe=lambda s: lambda b: 10.0 + b).share(adam) is None  # a CPU search


def test_packed_a_group_no_trial_reported_gets_the_meters_share_scaled_as_the_card_showed():
    """On an H200 the driver's CPU meter read 0.60-0.88 of a step's reserved peak
    (docs/RESULTS.md section 35): a group first seen is sized by the largest such ratio
    yet, not left at the fixed share until two of its trials have run."""
    model = MemoryModel(probe=lambda settings: lambda batch: 300.0 + 30.0 * batch,
                        on_gpu=True, packs_search="packing-borrowed")  # fmt: skip
    model.observe(TrainSettings.from_config({**RESNET, "batch_size": 16}), 16,
                  1.25 * (300 + 30 * 16), limit_mb=20_000.0, card_mb=CARD_MB,
                  context_mb=CONTEXT_MB)  # fmt: skip
    adam = {**RESNET, "batch_size": 32, "optimizer": "adam"}
    share = model.share(TrainSettings.from_config(adam))
    needed = 1.25 * (300 + 30 * 32) * (1 + MEMORY_MARGIN) + CONTEXT_MB
    assert share * CARD_MB >= needed > (share - SHARE_STEP) * CARD_MB
    assert PackedResources("packing-borrowed", cpu=1.0, default_gpu=0.25)(adam)["gpu"] == share
    assert share == 0.0625  # where the fixed share gives 0.25


def test_a_packed_gpu_searchs_memory_model_meters_each_group_at_the_driver_a_fixed_one_not():
    from search.tuner import memory_model

    packed = memory_model(config_of({"gpu": 0.25, "pack": "memory"}), 2, "packing-metered")
    fixed = memory_model(config_of({"gpu": 0.25}), 2)
    sgd = TrainSettings.from_config({"model": "small_cnn", "batch_size": 16})
    adam = sgd.model_copy(update={"optimizer": "adam", "batch_size": 64})
    for model in (packed, fixed):
        model.observe(sgd, 16, 64.0, limit_mb=20_000.0, card_mb=CARD_MB, context_mb=CONTEXT_MB)
    predicted = packed.predict(adam)
    assert predicted.borrowed and 0 < predicted.predicted_mb < 20_000
    assert packed.share(sgd.model_copy(update={"batch_size": 64})) == SHARE_STEP
    assert fixed.predict(adam) is None and fixed.predict(sgd) is None  # one batch: no line


def test_packed_a_suggestion_is_over_only_where_it_passes_a_whole_card_less_the_context():
    model = learned_model(name="packing-limit")
    fits_the_card = TrainSettings.from_config({**RESNET, "batch_size": 1024})  # 41 GB
    prediction = model.predict(fits_the_card)
    assert prediction.allowed_mb == CARD_MB - CONTEXT_MB and not prediction.over
    assert model.predict(fits_the_card.model_copy(update={"batch_size": 4096})).over
    budgeted = fits_the_card.model_copy(update={"memory_budget_mb": 30_000.0})
    assert model.predict(budgeted).allowed_mb == 30_000 - CONTEXT_MB
    fixed = learned_model()  # a fixed share: the limit the trials reported
    assert fixed.predict(fits_the_card).allowed_mb == 20_000 and fixed.predict(fits_the_card).over


def test_the_trials_resources_are_the_share_the_searchs_live_model_gives_their_config():
    resources = PackedResources("packing-live", cpu=2.0, default_gpu=0.25)
    config = {**RESNET, "batch_size": 32, TIMED_AGAINST_NOTE: json.dumps({"amp": False})}
    assert resources(config) == {"cpu": 2.0, "gpu": 0.25}  # no model yet: the fixed share
    model = learned_model(name="packing-live")
    assert resources(config) == {"cpu": 2.0, "gpu": model.share(TrainSettings.from_config(
        {**RESNET, "batch_size": 32}))}  # fmt: skip
    assert resources({**config, "optimizer": "adam"})["gpu"] == 0.25  # not predicted: fixed
    # Tune keeps a pickled copy of the function: the copy still asks the live model
    copy = pickle.loads(pickle.dumps(resources))
    assert copy(config) == resources(config) == {"cpu": 2.0, "gpu": 0.0625}


def test_a_resumed_search_packs_by_the_model_it_saved():
    saved = pickle.dumps(learned_model(name="packing-resumed"))
    LIVE_MODELS.pop("packing-resumed")  # a new process: nothing live
    restored = pickle.loads(saved)
    assert LIVE_MODELS["packing-resumed"] is restored


def test_a_model_saved_before_packing_restores_with_a_fixed_share():
    model = MemoryModel(on_gpu=True)
    state = {k: v for k, v in model.__dict__.items()
             if k not in ("_card_mb", "_context_mb", "packs_search")}  # fmt: skip
    old = MemoryModel.__new__(MemoryModel)
    old.__setstate__(pickle.loads(pickle.dumps(state)))
    assert old.packs_search == "" and old.share(TrainSettings.from_config(RESNET)) is None


def test_the_searcher_teaches_the_model_the_card_and_the_context_from_first_epochs():
    from search.optuna_search import build_sampler

    memory = MemoryModel(on_gpu=True, packs_search="packing-taught")
    space = {"batch_size": SpaceParam.parse({"choice": [16, 64]})}
    searcher = build_searcher(
        space, {"val_acc": "max"}, build_sampler("random", 2, 0), fixed_config=RESNET,
        grid=[{"batch_size": 16}, {"batch_size": 64}], memory=memory,
    )  # fmt: skip
    assert isinstance(searcher, InOrder)
    for trial_id in ("a", "b"):
        batch = searcher.suggest(trial_id)["batch_size"]
        searcher.on_trial_result(trial_id, {
            "epoch": 1, "physical_batch_size": batch, "peak_reserved_mb": 360.0 + 40 * batch,
            "memory_limit_mb": 19_900.0, "card_mb": CARD_MB, "card_context_mb": CONTEXT_MB,
        })  # fmt: skip
    settings = TrainSettings.from_config({**RESNET, "batch_size": 512})
    assert memory.share(settings) == learned_model().share(settings) == 0.375


def config_of(resources: dict, search: dict | None = None) -> SearchConfig:
    return SearchConfig.model_validate(
        {"name": "packed", "resources": resources, "search": search or {}, "source": "p.yaml"}
    )


@pytest.mark.parametrize(
    "resources, search, words",
    [
        ({"gpu": 0, "pack": "memory"}, {}, "resources.gpu is 0"),
        ({"gpu": 2, "pack": "memory"}, {}, "whole cards per trial"),
        ({"gpu": 0.25, "pack": "memory"}, {"predict_oom": False}, "predict_oom is false"),
    ],
)
def test_packing_where_there_is_nothing_to_pack_or_nothing_to_pack_by_is_refused(
    resources, search, words
):
    with pytest.raises(ConfigError) as caught:
        check_packing(config_of(resources, search))
    message = str(caught.value)
    assert "p.yaml" in message and "resources.pack" in message and words in message


def test_the_plan_says_trials_are_packed_by_memory_and_auto_without_cards_packs_nothing():
    packed = config_of({"gpu": "auto", "pack": "memory"})
    check_packing(packed)
    on_cards = packed.with_cards(2).resources
    assert on_cards.packs_by_memory
    assert on_cards.describe_gpu().startswith("the share of a GPU its predicted memory needs")
    assert not packed.with_cards(0).resources.packs_by_memory  # CPU trials: nothing to pack
    assert packed.with_cards(0).resources.describe_gpu() == (
        "no GPU (resources.gpu auto: no card here; resources.pack: memory packs nothing)"
    )


def test_a_trial_reports_its_cards_memory_and_its_context_and_nothing_on_cpu(fake_cuda):
    import torch

    from trainables.memory import MemoryBudget

    card = fake_cuda.cards[0]
    figures = MemoryBudget(torch.device("cuda:0"), gpu_share=0.25).card_figures()
    assert figures["card_mb"] == card.total / (1 << 20)
    assert figures["card_context_mb"] == (card.context + 32 * (1 << 20)) / (1 << 20)
    on_cpu = MemoryBudget(torch.device("cpu")).card_figures()
    assert all(math.isnan(value) for value in on_cpu.values())


RAY_LOGICAL_GPU = textwrap.dedent(
    """
    import json, os, sys, time
    import ray
    from ray import tune
    from search.feasibility import MemoryModel
    from search.packing import PackedResources
    from trainables.settings import TrainSettings

    model = MemoryModel(on_gpu=True, packs_search="packed-on-ray")
    for batch, peak in ((16, 1000.0), (64, 2920.0)):
        model.observe(TrainSettings.from_config({"model": "resnet50", "batch_size": batch}),
                      batch, peak, card_mb=81559.0, context_mb=552.0)

    def trial(config):
        bundle = tune.get_context().get_trial_resources().bundles[0]
        tune.report({"gpu": bundle.get("GPU", 0), "pid": os.getpid(), "started": time.time()})

    ray.init(address="local", num_cpus=3, num_gpus=1, include_dashboard=False,
             configure_logging=False)
    tuner = tune.Tuner(
        tune.with_resources(trial, PackedResources("packed-on-ray", 1, 0.25)),
        param_space={"model": "resnet50",
                     "batch_size": tune.grid_search([24, 32, 40, 512]),
                     "optimizer": tune.grid_search(["sgd", "adam"])},
        # one at a time, each finished trial's process offered to the next, as a search's
        tune_config=tune.TuneConfig(max_concurrent_trials=1, reuse_actors=True),
        run_config=tune.RunConfig(storage_path=sys.argv[1], verbose=0),
    )
    rows = [
        {"batch_size": r.config["batch_size"], "optimizer": r.config["optimizer"],
         **{key: r.metrics[key] for key in ("gpu", "pid", "started")}}
        for r in tuner.fit()
    ]
    print("ROWS", json.dumps(rows))
    """
)


@pytest.mark.ray
def test_on_ray_with_a_logical_card_each_trial_gets_its_share_and_like_needs_share_a_process(
    tmp_path,
):
    """A Ray of its own (one logical GPU; the shared test Ray has none): Tune asks the
    live model for each trial's resources as it creates the trial, and Ray gives them.
    Configs whose needs differ a little ask for the same share, so Tune hands a finished
    trial's process to the next instead of starting one (docs/RESULTS.md section 42)."""
    with ray_temp_dir() as ray_tmp:
        done = subprocess.run(
            [sys.executable, "-c", RAY_LOGICAL_GPU, str(tmp_path)], cwd=REPO,
            env={**cli_env(ray_tmp), "RAY_ADDRESS": ""}, capture_output=True, text=True,
            timeout=240,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout.split("ROWS", 1)[1])
    given = {(row["optimizer"], row["batch_size"]): row["gpu"] for row in rows}
    adam = {("adam", batch): 0.25 for batch in (24, 32, 40, 512)}  # not predicted: fixed
    assert given == {("sgd", 24): 0.0625, ("sgd", 32): 0.0625, ("sgd", 40): 0.0625,
                     ("sgd", 512): 0.375, **adam}  # fmt: skip
    in_order = sorted(rows, key=lambda row: row["started"])
    after_the_same_share = [
        (row["pid"], before["pid"])
        for before, row in itertools.pairwise(in_order)
        if row["gpu"] == before["gpu"]
    ]
    assert after_the_same_share  # the grid's order puts like shares one after another
    assert all(pid == previous for pid, previous in after_the_same_share)


def test_a_config_that_ran_out_in_its_share_asks_for_more_and_is_not_barred_from_a_larger():
    from search.optuna_search import build_sampler

    memory = learned_model(name="packing-refused")
    space = {"batch_size": SpaceParam.parse({"choice": [256, 512]})}
    searcher = build_searcher(
        space, {"val_acc": "max"}, build_sampler("random", 2, 0), fixed_config=RESNET,
        grid=[{"batch_size": 256}], memory=memory,
    )  # fmt: skip
    settings = TrainSettings.from_config({**RESNET, "batch_size": 256})
    before = memory.share(settings)
    searcher.suggest("a")
    limit = before * CARD_MB - CONTEXT_MB  # it ran out in the share it was given
    searcher.on_trial_complete("a", {
        "status": "oom", "oom_cause": "share", "physical_batch_size": 256,
        "peak_reserved_mb": math.nan, "memory_limit_mb": limit, "card_mb": CARD_MB,
        "card_context_mb": CONTEXT_MB,
    })  # fmt: skip
    assert memory.share(settings) > before
    assert searcher.forecast.failures == {}  # a larger share may hold it: not barred
    assert not searcher.forecast.runs_out(settings.model_copy(update={"batch_size": 512}))


def test_a_trial_that_will_not_train_asks_for_the_least_share_and_a_line_below_zero_for_none():
    from trainables.metrics import PREDICTED_FROM

    learned_model(name="packing-least")
    resources = PackedResources("packing-least", cpu=1.0, default_gpu=0.25)
    marked = {**RESNET, "batch_size": 100_000, PREDICTED_FROM: "over the card"}
    assert resources(marked)["gpu"] == SHARE_STEP
    falling = MemoryModel(on_gpu=True, packs_search="packing-falling")
    for batch, peak in ((16, 1000.0), (64, 200.0)):  # a line that falls with the batch
        falling.observe(TrainSettings.from_config({**RESNET, "batch_size": batch}), batch, peak,
                        card_mb=CARD_MB, context_mb=CONTEXT_MB)  # fmt: skip
    assert falling.share(TrainSettings.from_config({**RESNET, "batch_size": 512})) is None


def test_the_plan_says_when_a_concurrency_cap_keeps_packing_from_fitting_more_trials():
    from pathlib import Path

    from search.config import load_config
    from search.console import plan
    from tests.conftest import CONFIGS

    gpu = load_config(CONFIGS / "cats_dogs_gpu.yaml", ["resources.pack=memory"])
    assert "(at most 4 at once: search.max_concurrent_trials)" in plan(gpu, Path("x"), False)
    overrides = ["resources.pack=memory", "search.max_concurrent_trials=null"]
    uncapped = load_config(CONFIGS / "cats_dogs_gpu.yaml", overrides)
    assert "at most" not in plan(uncapped, Path("x"), False)
    assert "at most" not in plan(load_config(CONFIGS / "cats_dogs_gpu.yaml", []), Path("x"), False)
