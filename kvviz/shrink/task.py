"""The quality sweep's built-in task: facts planted in a long context, one question each.

Modelled on RULER's needle-in-a-haystack items (the task the kvpress leaderboard scores presses
on): filler sentences with a few "special magic numbers" planted among them, a question about one
of them, and the start of the answer given ("The special magic number for teal mentioned in the
text above is"), so a right answer is the number within a few tokens. An answer is right when the
planted number appears in the generated text (commas ignored).

`candidates` generates items from a seed (pure, no model); scripts/make_shrink_task.py runs them on
the default model with the full cache and ships, in kvviz/assets/shrink_task.json, only items it
answers right: at ratio 0 the default model scores 100 % by construction, so a lower score at a
higher ratio is what the shrinking cost.
"""
from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from kvviz.core.errors import UserError

ASSET = Path(__file__).resolve().parent.parent / "assets" / "shrink_task.json"
KEYS = ("amber", "cobalt", "ivory", "saffron", "teal", "crimson", "olive", "silver", "coral", "indigo",
        "violet", "jade")
FILLER = ("The town sits by a wide grey river.", "Most mornings the market opens early.",
          "In spring the hills turn green and the lambs are born.", "The old bridge was rebuilt after the flood.",
          "Children walk to school along the canal.", "The bakery on the corner sells rye bread.",
          "Fishing boats leave the harbour before dawn.", "The library closes at six on Saturdays.",
          "A brass band plays in the park on Sundays.", "The station clock is always two minutes fast.",
          "Gulls follow the ferry across the bay.", "The museum keeps a map of the old walls.")
NEEDLES, FILLER_PER_NEEDLE = 3, 3
MAX_ITEMS, MAX_CHARS = 64, 20_000  # bounds on a task file


@dataclass(frozen=True)
class TaskItem:
    """One question: the context (facts among filler), the question, the answer's start, the answer."""

    context: str
    question: str
    answer_prefix: str
    answer: str

    @property
    def prompt(self) -> str:
        return f"{self.context}\n\n{self.question}"

    def is_right(self, generated: str) -> bool:
        return self.answer in generated.replace(",", "")


def candidate(rng: random.Random) -> TaskItem:
    """One item: NEEDLES numbers for different keys, each after FILLER_PER_NEEDLE filler sentences."""
    keys = rng.sample(KEYS, NEEDLES)
    numbers = rng.sample(range(1000, 10000), NEEDLES)
    filler = rng.sample(FILLER, NEEDLES * FILLER_PER_NEEDLE)
    sentences = []
    for i, (key, number) in enumerate(zip(keys, numbers)):
        sentences += filler[i * FILLER_PER_NEEDLE:(i + 1) * FILLER_PER_NEEDLE]
        sentences.append(f"The special magic number for {key} is: {number}.")
    asked = rng.randrange(NEEDLES)
    key = keys[asked]
    return TaskItem(" ".join(sentences), f"What is the special magic number for {key} mentioned in the text above?",
                    f"The special magic number for {key} mentioned in the text above is", str(numbers[asked]))


def candidates(seed: int, n: int) -> list[TaskItem]:
    rng = random.Random(seed)
    return [candidate(rng) for _ in range(n)]


def to_json(items: list[TaskItem], checked_with: str) -> str:
    return json.dumps({"format": "kvviz-shrink-task", "checked_with": checked_with,
                       "items": [asdict(i) for i in items]}, indent=1)


def load(path: Path | str | None = None) -> list[TaskItem]:
    """The task's items (default: the built-in task, ASSET); UserError in one sentence for a file
    that is not a task."""
    path = ASSET if path is None else path
    try:
        doc = json.loads(Path(path).read_text())
        items = [TaskItem(**{k: str(item[k]) for k in ("context", "question", "answer_prefix", "answer")})
                 for item in doc["items"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{path} is not a kvviz shrink task ({type(exc).__name__})") from None
    if not 0 < len(items) <= MAX_ITEMS or any(len(i.prompt) > MAX_CHARS for i in items):
        raise UserError(f"{path}: a task holds 1 to {MAX_ITEMS} items of at most {MAX_CHARS:,} characters")
    return items
