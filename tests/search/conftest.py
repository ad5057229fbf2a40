"""Fixtures of the search's tests."""

import pytest

from search import startup


@pytest.fixture
def nothing_runs(monkeypatch, tmp_path):
    """Valid configs would start a search; record that instead (in the list returned)."""
    started = []
    monkeypatch.setattr(startup, "start", lambda *args: started.append(args) or 0)
    monkeypatch.chdir(tmp_path)
    return started
