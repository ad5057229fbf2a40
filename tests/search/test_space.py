import pytest
from ray.tune.search.sample import Categorical, Float, Integer

from search.space import SpaceParam, grid_points


def test_each_kind_becomes_the_matching_tune_domain():
    assert isinstance(SpaceParam.parse({"choice": [1, 2]}).to_tune(), Categorical)
    assert isinstance(SpaceParam.parse({"grid": ["sgd", "adam"]}).to_tune(), Categorical)
    uniform = SpaceParam.parse({"uniform": [0.1, 0.9]}).to_tune()
    assert isinstance(uniform, Float) and (uniform.lower, uniform.upper) == (0.1, 0.9)
    log = SpaceParam.parse({"loguniform": [1e-4, 1e-1]}).to_tune()
    assert isinstance(log, Float) and "LogUniform" in type(log.get_sampler()).__name__


def test_randint_includes_both_ends_although_tunes_upper_bound_is_exclusive():
    domain = SpaceParam.parse({"randint": [2, 5]}).to_tune()
    assert isinstance(domain, Integer) and (domain.lower, domain.upper) == (2, 6)
    drawn = {domain.sample() for _ in range(300)}
    assert drawn == {2, 3, 4, 5}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([16, 32], "must be one of"),
        ({"choice": []}, "non-empty list"),
        ({"choice": [1, 1]}, "lists a value twice"),
        ({"uniform": [1.0]}, "[low, high]"),
        ({"uniform": [2.0, 1.0]}, "low < high"),
        ({"loguniform": [0.0, 1.0]}, "low > 0"),
        ({"randint": [1.5, 4]}, "whole numbers"),
        ({"choice": [1], "grid": [2]}, "must be one of"),
        ({"normal": [0, 1]}, "unknown kind 'normal'"),
    ],
)
def test_a_malformed_entry_names_the_rule_it_broke(raw, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        SpaceParam.parse(raw)


def test_grid_points_are_every_combination_of_the_grid_entries_only():
    space = {
        "optimizer": SpaceParam.parse({"grid": ["sgd", "adam"]}),
        "batch_size": SpaceParam.parse({"grid": [8, 16, 32]}),
        "lr": SpaceParam.parse({"loguniform": [1e-3, 1e-1]}),
    }
    points = grid_points(space)
    assert len(points) == 6
    assert {"optimizer": "adam", "batch_size": 32} in points
    assert all(set(point) == {"optimizer", "batch_size"} for point in points)
    assert grid_points({"lr": space["lr"]}) == []


def test_an_entry_round_trips_to_the_yaml_it_came_from():
    for raw in ({"choice": [1, 2]}, {"uniform": [0.5, 1.5]}, {"randint": [1, 3]}):
        assert SpaceParam.parse(raw).as_yaml() == raw
