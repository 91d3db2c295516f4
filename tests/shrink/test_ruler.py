"""RULER-style items (kvviz.shrink.ruler) and the task file (kvviz.shrink.task): depths spread
evenly, needles where the depth says, lengths within the target, answers scored as RULER does (all
values present), and the shipped task reproduced from its own recipe, unfiltered."""
import json
import re

import pytest

from kvviz.core.errors import UserError
from kvviz.shrink import ruler, task


def count_words(text: str) -> int:
    """A stand-in tokenizer: one token per word or punctuation mark."""
    return len(re.findall(r"\w+|[^\w\s]", text))


def test_depths_spread_evenly_and_needles_sit_there():
    items = ruler.generate(5, 600, count_words, seed=1)
    assert [i.task for i in items] == [t for t in ruler.TASKS for _ in range(5)]
    for fmt in ruler.TASKS:
        assert [i.depth for i in items if i.task == fmt] == [0, 0.25, 0.5, 0.75, 1.0]
    for item in items:
        assert count_words(item.context + item.question) <= 600
        assert count_words(item.context + item.question) > 600 - 2 * count_words(ruler.NOISE)
        assert all(a in item.context for a in item.answers)
    singles = [i for i in items if i.task == "niah_single"]
    where = [i.context.index(i.answers[0]) / len(i.context) for i in singles]
    assert where == sorted(where) and where[0] < 0.1 and where[-1] > 0.9  # start to end, in order


def test_each_format_asks_what_ruler_asks():
    by = {i.task: i for i in ruler.generate(1, 400, count_words, seed=2)}
    multikey = by["niah_multikey"]
    assert multikey.context.count("One of the special magic numbers for") == ruler.NEEDLES
    assert len(multikey.answers) == 1 and multikey.question.startswith("What is the special magic number for")
    multivalue = by["niah_multivalue"]
    assert len(set(multivalue.answers)) == ruler.NEEDLES and multivalue.question.startswith("What are all")
    vt = by["vt"]
    chain = re.findall(r"VAR (\w+) = (VAR \w+|\d+)\.", vt.context)
    assert [name for name, _ in chain] == list(vt.answers) and chain[0][1].isdigit()
    assert all(value == f"VAR {prev}" for (_, value), (prev, _) in zip(chain[1:], chain))
    assert f"value {chain[0][1]}" in vt.question


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
    """kvviz/assets/shrink_task.json: at least 50 items, every format, each format's depths evenly
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
