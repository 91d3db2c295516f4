"""The sibling index (kvviz.vllm.siblings) answers what a scan of every sibling would, on random
streams of adds, replacements and drops, rebuilds included."""
import random
from dataclasses import dataclass

import pytest

from kvviz.vllm import siblings
from kvviz.vllm.siblings import SiblingIndex, common_start


@dataclass(eq=False)
class Life:
    block_hash: int
    parent: int | None
    tokens: tuple
    owner: str = ""


class Scan:
    """The reference: every sibling indexed, latest stored last, scanned per question."""

    def __init__(self):
        self.lives: dict[tuple, Life] = {}  # (parent, hash) -> life, in the order last stored

    def add(self, life):
        self.lives.pop((life.parent, life.block_hash), None)
        self.lives[(life.parent, life.block_hash)] = life

    def drop(self, life):
        if self.lives.get((life.parent, life.block_hash)) is life:
            del self.lives[(life.parent, life.block_hash)]

    def after(self, parent):
        return [life for (p, _), life in self.lives.items() if p == parent]

    def same_tokens(self, parent, tokens):
        same = [life for life in self.after(parent) if life.tokens == tokens]
        return same[-1] if same else None

    def closest(self, parent, tokens):
        best, common = None, -1
        for life in self.after(parent):
            n = common_start(life.tokens, tokens)
            if n >= common:
                best, common = life, n
        return best, max(common, 0)


def random_tokens(rng, size):
    """Tokens from a tiny alphabet, some shorter than a block, so that prefixes collide."""
    return tuple(rng.randrange(3) for _ in range(rng.choice([size, size, size, rng.randrange(size + 1)])))


@pytest.mark.parametrize("seed", range(8))
def test_the_index_answers_what_a_scan_of_every_sibling_answers(seed, monkeypatch):
    monkeypatch.setattr(siblings, "REBUILD_SLACK", seed % 3)  # rebuild often
    rng = random.Random(seed)
    index, scan, made = SiblingIndex(), Scan(), []
    size = rng.choice([2, 4, 8])
    for step in range(1000):
        roll = rng.random()
        if roll < 0.5 or not made:
            life = Life(rng.randrange(60), rng.choice([None, 1, 2, 3]), random_tokens(rng, size), f"r{step}")
            index.add(life)
            scan.add(life)
            made.append(life)
        elif roll < 0.75:
            life = rng.choice(made)  # a stale life too: dropping it must change nothing
            index.drop(life)
            scan.drop(life)
        else:
            parent, tokens = rng.choice([None, 1, 2, 3, 4]), random_tokens(rng, size)
            assert index.same_tokens(parent, tokens) is scan.same_tokens(parent, tokens)
            got, want = index.closest(parent, tokens), scan.closest(parent, tokens)
            assert got[1] == want[1] and got[0] is want[0], (step, parent, tokens)


def test_siblings_after_one_parent_are_answered_from_the_tree_without_a_scan():
    index = SiblingIndex()
    lives = [Life(i, 7, (1, 1, 1, i // 100, i % 100, 0), f"r{i}") for i in range(3000)]
    for life in lives:
        index.add(life)
    assert index.closest(7, (1, 1, 1, 5, 9, 9)) == (lives[509], 5)
    assert index.closest(7, (1, 1, 2, 0, 0, 0)) == (lives[-1], 2)  # a tie: the latest
    assert index.same_tokens(7, lives[42].tokens) is lives[42]
    assert index.closest(8, (1,)) == (None, 0)
    index.drop(lives[509])
    assert index.closest(7, (1, 1, 1, 5, 9, 9)) == (lives[599], 4)
