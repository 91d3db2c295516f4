"""What-if routing: a recorded request stream replayed through a model of each replica's prefix
cache, under another routing policy. Modelled, not measured. Pure.

The model is vLLM 0.32's block pool (`vllm/v1/core/block_pool.py`, `kv_cache_manager.py`) for one
full-attention cache group, one request at a time in arrival order:

- a replica has `num_blocks - 1` usable blocks (vLLM keeps block 0 as its null block), all free
  and empty at the start (the stream's servers began with an empty or cleared prefix cache);
- a block is named by the chain of its tokens (its parent's name and its own tokens), as vLLM's
  hash is, so equal prefixes have equal names on every replica;
- a request reuses the longest run of cached blocks from its first, at most (prompt − 1) // block
  blocks (vLLM computes the prompt's last token again); those leave the free queue;
- it then takes ceil((prompt + output − 1) / block) − hits blocks from the FRONT of the free queue
  (the least recently freed; a block taken that held a cached prefix is evicted), and caches each
  block its tokens fill (the last output token is never computed, so never cached);
- when it ends, all its blocks go back to the END of the free queue in reverse order (the
  request's last block is evicted first, its first block last), still cached.

Replaying the routing that really happened must give every request the `cached_tokens` vLLM
reported: that is the model's test (tests/vllm/test_fleet.py, on real servers).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kvviz.core.errors import UserError
from kvviz.vllm.request_log import Reply

ROUND_ROBIN, LEAST_LOADED, LONGEST_PREFIX, AS_ROUTED = "round-robin", "least-loaded", "longest-prefix", "as routed"
POLICIES = (AS_ROUTED, ROUND_ROBIN, LEAST_LOADED, LONGEST_PREFIX)
POLICY_WORDS = {
    AS_ROUTED: "the replica each request really went to",
    ROUND_ROBIN: "replicas in turn, whatever the prompt",
    LEAST_LOADED: "the replica with the fewest requests in flight when it arrived (the recorded "
                  "durations), then the fewest prompt tokens sent so far",
    LONGEST_PREFIX: "the replica whose modelled cache holds the longest prefix of the prompt, "
                    "ties to the least loaded",
}


def block_names(ids: list[int], block_size: int) -> list[int]:
    """The name of every whole block of `ids`: a chain over tokens, like vLLM's hash."""
    names, parent = [], 0
    for i in range(len(ids) // block_size):
        parent = hash((parent, tuple(ids[i * block_size:(i + 1) * block_size])))
        names.append(parent)
    return names


@dataclass(kw_only=True)
class ModelPool:
    """One replica's blocks: which name each holds, which are free (in eviction order)."""

    num_usable: int
    block_size: int
    names: dict[int, int] = field(default_factory=dict)  # block id -> the name it caches
    cached: dict[int, list[int]] = field(default_factory=dict)  # name -> block ids caching it
    free: deque[int] = field(default_factory=deque)  # front: evicted first
    in_free: set[int] = field(default_factory=set)
    num_evicted: int = 0

    def __post_init__(self) -> None:
        self.free.extend(range(1, self.num_usable + 1))
        self.in_free.update(self.free)

    def match(self, chain: list[int], prompt_tokens: int) -> int:
        """Blocks of `chain` cached from the first, as vLLM would reuse them."""
        usable = max(0, (prompt_tokens - 1) // self.block_size)
        n = 0
        while n < min(usable, len(chain)) and self.cached.get(chain[n]):
            n += 1
        return n

    def serve(self, prompt: list[int], output: list[int]) -> int:
        """Run one request to its end; the tokens it found cached."""
        ids = prompt + output
        computed = max(len(prompt), len(ids) - 1)  # the last output token is never computed
        chain = block_names(ids[:computed], self.block_size)
        hits = self.match(chain, len(prompt))
        blocks = [self.cached[name][0] for name in chain[:hits]]
        for block in blocks:
            self.take(block)
        need = -(-computed // self.block_size) - hits
        if need > len(self.free):
            raise UserError(f"a request of {computed} tokens needs {need} blocks, {len(self.free)} free: "
                             "the model runs one request at a time and cannot queue it")
        for i in range(need):
            block = self.free[0]
            self.take(block)
            self.evict(block)
            if hits + i < len(chain):
                self.cache(block, chain[hits + i])
            blocks.append(block)
        for block in reversed(blocks):
            self.free.append(block)
            self.in_free.add(block)
        return hits * self.block_size

    def take(self, block: int) -> None:
        if block in self.in_free:
            self.free.remove(block)  # vLLM's queue is a linked list; a deque costs O(n) here
            self.in_free.discard(block)

    def evict(self, block: int) -> None:
        name = self.names.pop(block, None)
        if name is not None:
            self.cached[name].remove(block)
            if not self.cached[name]:
                del self.cached[name]
            self.num_evicted += 1

    def cache(self, block: int, name: int) -> None:
        self.names[block] = name
        self.cached.setdefault(name, []).append(block)


@dataclass(frozen=True)
class Routed:
    name: str
    replica: int
    cached_tokens: int  # modelled
    prompt_tokens: int


def replay(replies: list[Reply], urls: list[str], policy: str, num_usable: list[int], block_size: int) -> list[Routed]:
    """The stream (in order of sending) under `policy`, replica i with num_usable[i] blocks; each
    request's modelled cached tokens. Replies without token ids are skipped (the log must carry
    them: return_token_ids)."""
    pools = [ModelPool(num_usable=n, block_size=block_size) for n in num_usable]
    stream = [r for r in sorted(replies, key=lambda r: r.sent_s) if r.prompt_token_ids is not None]
    sent_tokens, ends = [0] * len(urls), [[] for _ in urls]
    out = []
    for i, reply in enumerate(stream):
        prompt, output = list(reply.prompt_token_ids), list(reply.output_token_ids or [])
        k = choose(policy, i, reply, urls, pools, prompt, sent_tokens, ends)
        cached = pools[k].serve(prompt, output)
        sent_tokens[k] += len(prompt)
        ends[k].append(reply.done_s)
        out.append(Routed(reply.name, k, cached, len(prompt)))
    return out


def choose(policy: str, i: int, reply: Reply, urls: list[str], pools: list[ModelPool], prompt: list[int],
           sent_tokens: list[int], ends: list[list[float]]) -> int:
    if policy == AS_ROUTED:
        return urls.index(reply.url) if reply.url in urls else 0
    if policy == ROUND_ROBIN:
        return i % len(urls)

    def load(k: int) -> tuple:
        return sum(1 for end in ends[k] if end > reply.sent_s), sent_tokens[k], k

    if policy == LEAST_LOADED:
        return min(range(len(urls)), key=load)
    if policy == LONGEST_PREFIX:
        chain = block_names(prompt, pools[0].block_size)
        return min(range(len(urls)), key=lambda k: (-pools[k].match(chain, len(prompt)), *load(k)))
    raise UserError(f"unknown routing policy {policy!r}; one of {', '.join(POLICIES)}")


def policy_summary(routed: list[Routed]) -> dict:
    """Hit rate (cached / prompt tokens) and tokens recomputed (prompt − cached), modelled."""
    prompt = sum(r.prompt_tokens for r in routed)
    cached = sum(r.cached_tokens for r in routed)
    return {"requests": len(routed), "prompt_tokens": prompt, "cached_tokens": cached,
            "recomputed_tokens": prompt - cached, "hit_rate": cached / prompt if prompt else None}
