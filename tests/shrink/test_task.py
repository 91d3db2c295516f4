"""The shrink task file (kvviz.shrink.task): an answer is right only with every value (as RULER scores
it), a file is checked on load and round-trips, and the shipped task spreads every format over every
depth and is exactly what its recorded recipe generates (RULER-style items: test_ruler.py)."""
import json
import re

import pytest

from kvviz.core.errors import UserError
from kvviz.shrink import ruler, task
from tests.shrink.test_ruler import count_words


def test_an_answer_is_right_only_with_every_value():
    item = task.TaskItem(context="c", question="q", answers=("1234567", "7654321"))
    assert item.is_right(" 1,234,567 and 7654321.") and item.share_found(" 1234567.") == 0.5
    assert not item.is_right(" 1234567.") and not item.is_right("")
    assert task.TaskItem.expecting(["ABCDE"]).is_right("abcde")  # RULER compares lower case


def test_a_task_file_is_checked(tmp_path):
    bad = tmp_path / "t.json"
    for text, words in (('{"items": [{"context": 1}]}', "is not a kvviz shrink task"),
                        (task.to_json([], "nothing"), "a task holds 1 to"),
                        (json.dumps({"items": [{"context": "c", "question": "q", "answer_prefix": "", "answers": ["1"],
                                                "depth": 7}]}), "is not a kvviz shrink task")):
        bad.write_text(text)
        with pytest.raises(UserError, match=words):
            task.load(bad)
    items = ruler.generate(2, 300, count_words, seed=4)
    bad.write_text(task.to_json(items, "made here"))
    assert task.load(bad) == items and task.made_with(bad) == "made here"


def test_the_shipped_task_spreads_every_format_over_every_depth():
    """assets/shrink_task.json: at least 50 items, every format, each format's depths evenly
    spread from the start of the haystack to its end."""
    items = task.load()
    assert len(items) >= 50 and {i.task for i in items} == set(ruler.TASKS)
    for fmt in ruler.TASKS:
        depths = [i.depth for i in items if i.task == fmt]
        assert depths == [round(d, 4) for d in ruler.depths(len(depths))]


@pytest.mark.slow
def test_the_shipped_task_is_its_recipe_unfiltered(default_lm):
    """The shipped task is exactly what its recorded command generates with the default model's
    tokenizer: nothing dropped for what a model answers."""
    items, note = task.load(), task.made_with()
    args = dict(re.findall(r"--([\w-]+) (\d+)", note.split(":")[0]))
    count = lambda text: len(default_lm.tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    assert ruler.generate(int(args["per-task"]), int(args["tokens"]), count, seed=int(args["seed"])) == items
