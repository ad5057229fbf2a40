"""The reference pages are what the code would write: the configuration reference from the
settings' own comments, and the metric schema of docs/ARCHITECTURE.md from the schema."""

from pydantic import BaseModel, Field

from search.reference import (
    ARCHITECTURE,
    CONFIGURATION,
    configuration_reference,
    field_notes,
    main,
    metric_schema,
)
from trainables.metrics import METRICS, STATUS_ORDER
from trainables.settings import TRAIN_KEYS


def test_the_reference_pages_in_docs_are_what_the_code_would_write(capsys):
    assert main(["--check"]) == 0, capsys.readouterr().out + (
        " (run `python -m search.reference` and commit the pages)"
    )


def test_every_key_a_trial_reads_is_in_the_configuration_reference():
    page = CONFIGURATION.read_text()
    assert all(f"`train.{key}`" in page for key in TRAIN_KEYS - {"data", "gap_epochs"})


def test_every_metric_and_status_is_in_the_architecture_page():
    page = ARCHITECTURE.read_text()
    assert all(f"| `{name}` |" in page for name in METRICS)
    assert all(f"`{status}`" in page for status in STATUS_ORDER)


class Example(BaseModel):
    # a note above,
    # on two lines
    first: int = 1  # and one at its end
    # --- a group's heading, not a note ---
    second: int = Field(2, gt=0)
    third: str = "x"  # fmt: skip


def test_a_fields_note_is_its_comments_above_and_at_its_end_without_pragmas_or_headings():
    assert field_notes(Example) == {
        "first": "a note above, on two lines and one at its end",
        "second": "",
        "third": "",
    }


def test_a_changed_comment_or_metric_changes_what_the_pages_say(monkeypatch):
    import trainables.metrics as metrics

    before = metric_schema()
    monkeypatch.setitem(metrics.METRICS, "new_metric", metrics.MetricSpec("something new"))
    monkeypatch.setattr("search.reference.METRICS", metrics.METRICS)
    assert metric_schema() != before and "| `new_metric` |  | something new |" in metric_schema()


def test_a_setting_is_written_with_its_default_rule_and_comment():
    assert "`train.epochs` | `5` | whole number > 0 | passes over the training split |" in (
        configuration_reference()
    )
