import json

from search.experiment import STATE_FILE, SearchState


def test_a_search_state_written_before_the_config_was_kept_still_loads(tmp_path):
    old = {"parent_run_id": "r1", "tracking_uri": "sqlite:///m.db", "experiment": "smoke"}
    (tmp_path / STATE_FILE).write_text(json.dumps(old))
    state = SearchState.load(tmp_path)
    assert state is not None and state.parent_run_id == "r1" and state.config == {}


def test_differences_name_each_changed_key_with_its_old_and_new_value(tmp_path):
    state = SearchState("r1", "u", "e", {"train": {"epochs": 9, "lr": 0.1}})
    state.save(tmp_path)
    loaded = SearchState.load(tmp_path)
    assert loaded.differences({"train": {"epochs": 3, "lr": 0.1}}) == [("train.epochs", 9, 3)]


def test_a_key_added_since_the_search_started_is_no_change_while_it_keeps_its_default():
    from search.config import SearchConfig

    now = SearchConfig(name="smoke").as_yaml_dict()
    saved = json.loads(json.dumps(now))
    del saved["resources"]["pack"]  # a search started before resources.pack existed
    state = SearchState("r1", "u", "e", saved)
    assert state.differences(now) == []
    packed = {**now, "resources": {**now["resources"], "pack": "memory"}}
    assert state.differences(packed) == [("resources.pack", None, "memory")]
