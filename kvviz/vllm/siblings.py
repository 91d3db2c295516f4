"""The blocks seen after each prefix, indexed so that a request's miss is explained without a scan.

`kvviz.vllm.reasons` asks two questions about the first block a request had to compute: did a
block after the same parent hold the very same tokens (another hash: extra keys), and which
block after that parent shared the longest run of first tokens (where the prompt diverged)? Both
are answered from this index in time proportional to one block's tokens, however many siblings
the parent has: thousands of requests under one system prompt, or a crafted file of 45,000
blocks after one parent, cost the same per request as two.

Per parent, a radix tree over the siblings' tokens: every node keeps the entries of the lives
below it in the order they were stored, so its latest is the last one still indexed. A life
leaves the index when a newer life of the same hash after the same parent replaces it, or when
the block log drops it (`drop`); its entries stay where they are, marked, and are removed when
they reach a list's end, or when a parent's tree holds more removed entries than indexed ones
and is rebuilt (amortized: each life is inserted at most twice per removal it pays for).

The latest wins a tie: "diverged from request X" names the most recent of the blocks that
shared the most tokens.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from kvviz.vllm.events import BlockHash

REBUILD_SLACK = 32  # removed entries a tree may carry beyond its indexed ones before a rebuild


class _Entry:
    """One life in the index; `indexed` turns False when it leaves."""

    __slots__ = ("life", "indexed")

    def __init__(self, life):
        self.life, self.indexed = life, True


class _Node:
    """A radix-tree node: the tokens on the edge into it, its children by next token, and the
    entries of every life whose tokens pass through it (oldest first)."""

    __slots__ = ("label", "kids", "entries")

    def __init__(self, label: tuple, entries: list[_Entry]):
        self.label, self.kids, self.entries = label, {}, entries

    def latest(self) -> _Entry | None:
        entries = self.entries
        while entries and not entries[-1].indexed:
            entries.pop()
        return entries[-1] if entries else None


class _Tree:
    """The siblings after one parent. Most parents have one child (a chain): until a second
    arrives the tree is that one entry, without nodes."""

    __slots__ = ("single", "root", "same", "num_indexed", "num_removed")

    def __init__(self):
        self.single: _Entry | None = None
        self.root: _Node | None = None
        self.same: dict[tuple, list[_Entry]] = {}  # tokens -> entries, oldest first
        self.num_indexed = self.num_removed = 0

    def insert(self, entry: _Entry) -> None:
        self.num_indexed += 1
        if self.root is None:
            if self.single is None or not self.single.indexed:
                self.single = entry
                return
            self.root, first, self.single = _Node((), []), self.single, None
            self.grow(first)
        self.grow(entry)

    def grow(self, entry: _Entry) -> None:
        tokens = entry.life.tokens
        self.same.setdefault(tokens, []).append(entry)
        node, i = self.root, 0
        node.entries.append(entry)
        while i < len(tokens):
            child = node.kids.get(tokens[i])
            if child is None:
                node.kids[tokens[i]] = _Node(tokens[i:], [entry])
                return
            m = run(child.label, tokens, i)
            if m < len(child.label):
                child = split(node, child, m)
            child.entries.append(entry)
            node, i = child, i + m

    def entries(self) -> list[_Entry]:
        """Every entry indexed, oldest first."""
        if self.root is None:
            return [self.single] if self.single is not None and self.single.indexed else []
        return [e for e in self.root.entries if e.indexed]

    def same_tokens(self, tokens: tuple) -> _Entry | None:
        if self.root is None:
            single = self.single
            return single if single is not None and single.indexed and single.life.tokens == tokens else None
        entries = self.same.get(tokens)
        while entries and not entries[-1].indexed:
            entries.pop()
        if entries is not None and not entries:
            del self.same[tokens]
        return entries[-1] if entries else None

    def closest(self, tokens: tuple) -> tuple[_Entry | None, int]:
        """The latest entry sharing the longest run of first tokens with `tokens`, and that run."""
        if self.root is None:
            single = self.single
            if single is None or not single.indexed:
                return None, 0
            return single, run(single.life.tokens, tokens, 0)
        node, i = self.root, 0
        best = node.latest()
        while best is not None and i < len(tokens):
            child = node.kids.get(tokens[i])
            found = child.latest() if child is not None else None
            if found is None:
                break
            best, m = found, run(child.label, tokens, i)
            i += m
            if m < len(child.label):
                break
            node = child
        return best, i if best is not None else 0


def run(label: tuple, tokens: tuple, start: int) -> int:
    """How many of `label`'s first tokens equal `tokens[start:]`'s."""
    n, end = 0, min(len(label), len(tokens) - start)
    while n < end and label[n] == tokens[start + n]:
        n += 1
    return n


def common_start(a: tuple, b: tuple) -> int:
    """How many first tokens `a` and `b` share."""
    return run(a, b, 0)


def split(parent: _Node, child: _Node, m: int) -> _Node:
    """Cut `child`'s edge after `m` tokens; the new middle node holds what `child` held."""
    middle = _Node(child.label[:m], [e for e in child.entries if e.indexed])
    child.label = child.label[m:]
    middle.kids[child.label[0]] = child
    parent.kids[middle.label[0]] = middle
    return middle


@dataclass
class SiblingIndex:
    """Lives by parent (None: blocks that start a sequence), one per (parent, hash), the latest."""

    trees: dict[BlockHash | None, _Tree] = field(default_factory=dict)
    entries: dict[tuple, _Entry] = field(default_factory=dict)  # (parent, hash) -> its indexed entry

    def add(self, life) -> None:
        """Index `life` after its parent, replacing an earlier life of its hash there."""
        key = (life.parent, life.block_hash)
        old = self.entries.get(key)
        if old is not None:
            self.remove(old)
        entry = self.entries[key] = _Entry(life)
        tree = self.trees.get(life.parent)
        if tree is None:
            tree = self.trees[life.parent] = _Tree()
        tree.insert(entry)

    def drop(self, life) -> None:
        """Forget `life` if it is the one indexed for its (parent, hash)."""
        key = (life.parent, life.block_hash)
        entry = self.entries.get(key)
        if entry is not None and entry.life is life:
            del self.entries[key]
            self.remove(entry)

    def remove(self, entry: _Entry) -> None:
        entry.indexed = False
        parent = entry.life.parent
        tree = self.trees[parent]
        tree.num_indexed -= 1
        tree.num_removed += 1
        if tree.num_indexed == 0:
            del self.trees[parent]
        elif tree.num_removed > tree.num_indexed + REBUILD_SLACK:
            self.trees[parent] = rebuilt(tree)

    def same_tokens(self, parent, tokens: tuple):
        """The latest life after `parent` holding exactly `tokens`, or None."""
        tree = self.trees.get(parent)
        entry = tree.same_tokens(tokens) if tree is not None else None
        return entry.life if entry is not None else None

    def closest(self, parent, tokens: tuple):
        """(the latest life after `parent` sharing the most first tokens with `tokens`, how many);
        (None, 0) when the parent has no sibling indexed."""
        tree = self.trees.get(parent)
        if tree is None:
            return None, 0
        entry, common = tree.closest(tokens)
        return (entry.life, common) if entry is not None else (None, 0)


def rebuilt(tree: _Tree) -> _Tree:
    """The same indexed entries in a fresh tree."""
    fresh = _Tree()
    for entry in tree.entries():
        fresh.insert(entry)
    return fresh
