"""RULER-style items (kvviz.shrink.ruler): depths spread evenly, needles where the depth says,
lengths within the target, each format asking what RULER asks (the task file: test_task.py)."""
import re


from kvviz.shrink import ruler


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


