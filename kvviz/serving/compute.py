"""Many requests, one real paged KV cache: transformers' continuous batching, step by step.

transformers 5.x ships a paged KV cache (`PagedAttentionCache`) behind `model.generate_batch` and
its `ContinuousBatchingManager`. A FIFO scheduler admits requests while the pool has blocks,
prefills them (in chunks when a prompt exceeds `max_batch_tokens`), decodes all running requests
in one forward pass, and frees a request's blocks when it finishes. Full blocks are hashed: a
request whose prompt starts like an earlier one takes those blocks instead of recomputing them
(prefix sharing), and unreferenced hashed blocks stay cached for reuse until the pool needs them.
A request that cannot grow when the pool is full is preempted (its blocks freed, recomputed later).

`serve` runs N requests through that real path, on the manager's own background loop, and yields
one plain `StepSnapshot` per forward pass; it returns a `ServingResult`.

What is real and what is modelled (transformers 5.24):
* real, public API: the manager (`init_continuous_batching`, `warmup`, `add_request`, `start`,
  `get_result`, `stop`) and each request's output (tokens, timestamps).
* real, read once per step on the loop's own thread (so the state is consistent) from public but
  undocumented attributes of the running batch processor: the requests in the step and their
  token counts (`inputs_and_outputs.requests_in_batch`), the scheduler's active and waiting
  requests, every request's block table, shared and cached blocks and the free count
  (`cache.cache_allocators["full_attention"]`, its `ledger`, `cache.pool`). One hook wraps the
  processor's public `update_batch` method on that one instance; nothing private is touched.
* modelled: if the allocator cannot be read (another transformers version, or a model with
  sliding-window layers), the pool is modelled with `kvviz.core.blocks.BlockPool` from the scheduler's
  per-request token counts, without sharing, and snapshots say `source="modelled"`. Always
  modelled: `unshared_blocks` (what the same requests would hold without prefix sharing) and the
  prefill time saved by reuse (estimated from this run's step times).
"""
from __future__ import annotations

import queue
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Generator

from transformers import GenerationConfig
from transformers.generation.configuration_utils import ContinuousBatchingConfig

from kvviz.core.blocks import BlockPool, cdiv
from kvviz.core.config import RunConfig
from kvviz.engine.loop import eos_token_ids, render_prompts
from kvviz.engine.models import LoadedModel
from kvviz.core.errors import KvvizError, UserError

FREE, SHARED, CACHED = "free", "shared", "cached"  # block owners that are not a request
FULL_ATTENTION = "full_attention"  # transformers' allocator name for full-attention layers
STATES = ("upcoming", "waiting", "preempted", "prefilling", "decoding", "finished")
STATUS_NAMES = {1: "prefilling", 2: "decoding"}  # RequestStatus.PREFILLING / DECODING
MIN_BLOCK_SIZE = 4  # transformers refuses smaller pages
MAX_REQUESTS = 10  # one colour each in the grid


@dataclass(frozen=True, kw_only=True)
class ServingConfig:
    block_size: int = 16  # tokens per block (transformers: ContinuousBatchingConfig.page_size)
    num_blocks: int = 32  # blocks in the pool (ContinuousBatchingConfig.num_blocks)
    max_new_tokens: int = 32  # per request (fewer when it emits EOS); greedy decoding
    arrival_every: int = 0  # request i is submitted after i * arrival_every steps (0: all at once)
    max_batch_tokens: int = 256  # tokens one forward pass may take; longer prefills are chunked
    prefix_sharing: bool = True  # let a request reuse the full blocks of a prefix already cached
    time_limit_s: float | None = None  # give up (RunTimeLimit, a TimeoutError) past this wall-clock time
    step_delay_ms: float = 0.0  # slow motion: pause the loop this long after each step (not timed)


@dataclass(frozen=True, kw_only=True)
class RequestView:
    """One request as the scheduler saw it after one step."""

    request_id: str
    state: str  # one of STATES
    step_tokens: int  # tokens this step computed for it (a prompt chunk, or 1 when decoding)
    cached_tokens: int  # tokens whose keys and values sit in the pool
    generated_tokens: int  # new tokens so far
    num_blocks: int  # length of its block table (shared blocks included)
    prefix_tokens_reused: int  # prompt tokens taken from cached blocks instead of computed

    @property
    def in_batch(self) -> bool:
        return self.step_tokens > 0


@dataclass(frozen=True, kw_only=True)
class StepSnapshot:
    """The pool and the requests after one forward pass."""

    step: int  # 1-based forward pass
    time_s: float  # since the run started
    step_ms: float  # this pass, with its scheduling and bookkeeping
    block_owners: tuple[str, ...]  # per block of the pool: a request id, SHARED, CACHED or FREE
    requests: tuple[RequestView, ...]
    num_free_blocks: int  # as the allocator counts them
    unshared_blocks: int  # modelled: blocks the same requests would hold without sharing
    source: str  # "real" (read from transformers' allocator) or "modelled" (kvviz.core.blocks)

    @property
    def num_blocks(self) -> int:
        return len(self.block_owners)

    @property
    def num_used_blocks(self) -> int:
        """Blocks referenced by at least one request."""
        return sum(o not in (FREE, CACHED) for o in self.block_owners)

    @property
    def num_shared_blocks(self) -> int:
        return self.block_owners.count(SHARED)

    @property
    def num_cached_blocks(self) -> int:
        """Unreferenced blocks kept for their prefix (reusable, evicted when the pool needs them)."""
        return self.block_owners.count(CACHED)

    def get_usage(self) -> float:
        return self.num_used_blocks / self.num_blocks if self.num_blocks else 0.0

    def step_tokens(self) -> int:
        return sum(r.step_tokens for r in self.requests)


@dataclass(frozen=True, kw_only=True)
class RequestResult:
    request_id: str
    prompt_tokens: int
    output_ids: tuple[int, ...]
    text: str  # decoded output: untrusted model text, show with st.text / st.code only
    arrival_step: int  # submitted after this many steps
    prefix_tokens_reused: int
    queued_ms: float  # submitted -> start of the first step that computed it
    ttft_ms: float  # submitted -> end of the step that produced its first token
    total_ms: float  # submitted -> end of the step that finished it


@dataclass(frozen=True, kw_only=True)
class ServingResult:
    config: ServingConfig
    snapshots: tuple[StepSnapshot, ...]
    requests: tuple[RequestResult, ...]
    num_blocks: int  # of the real pool (num_blocks rounded up to whole sectors)
    source: str  # "real" when every snapshot was read from the allocator, else "modelled"
    prefill_ms_per_token: float | None  # estimate: slope of step time vs tokens computed
    total_s: float

    @property
    def prefix_tokens_reused(self) -> int:
        return sum(r.prefix_tokens_reused for r in self.requests)

    @property
    def peak_used_blocks(self) -> int:
        return max((s.num_used_blocks for s in self.snapshots), default=0)

    @property
    def num_preempted(self) -> int:
        """Requests the scheduler evicted at least once to let others grow (recomputed later)."""
        return len({v.request_id for s in self.snapshots for v in s.requests if v.state == "preempted"})

    @property
    def prefix_blocks_reused(self) -> int:
        return sum(r.prefix_tokens_reused // self.config.block_size for r in self.requests)

    @property
    def prefill_ms_saved(self) -> float | None:
        """Estimated prefill time the reused prefix blocks saved (modelled from this run)."""
        if self.prefill_ms_per_token is None:
            return None
        return self.prefix_tokens_reused * self.prefill_ms_per_token


def parse_requests(text: str, limit: int = MAX_REQUESTS) -> list[str]:
    """One request per non-empty line, at most `limit` of them."""
    prompts = [line.strip() for line in text.splitlines() if line.strip()]
    if not prompts:
        raise UserError("type at least one request, one per line")
    if len(prompts) > limit:
        raise UserError(f"at most {limit} requests, one per line (got {len(prompts)})")
    return prompts


def encode_requests(tokenizer, prompts: list[str], system: str = "", chat: bool = True) -> list[list[int]]:
    """Token ids of each request, read as the live page reads a prompt (chat template if any)."""
    if not prompts or any(not p.strip() for p in prompts):
        raise UserError("every request needs a non-empty prompt")
    texts = render_prompts(tokenizer, RunConfig(prompts=tuple(prompts), system=system, chat_template=chat))
    return [tokenizer(t, add_special_tokens=not chat)["input_ids"] for t in texts]


def check_fits(token_ids: list[list[int]], cfg: ServingConfig) -> None:
    """Refuse requests that could never fit the pool, which would stall the real scheduler."""
    if cfg.block_size < MIN_BLOCK_SIZE:
        raise UserError(f"block size must be at least {MIN_BLOCK_SIZE} tokens (transformers' minimum)")
    if cfg.num_blocks < 1 or cfg.max_new_tokens < 1:
        raise UserError("the pool needs at least one block and each request one new token")
    for i, ids in enumerate(token_ids):
        need = cdiv(len(ids) + cfg.max_new_tokens, cfg.block_size)
        if need > cfg.num_blocks:
            raise UserError(f"request {i} alone needs {need} blocks ({len(ids)} prompt + "
                             f"{cfg.max_new_tokens} new tokens, {cfg.block_size} per block) but the "
                             f"pool has {cfg.num_blocks}: enlarge the pool or shorten the prompt")


def expected_steps(token_ids: list[list[int]], cfg: ServingConfig) -> int:
    """About how many forward passes the run takes without preemption: the last arrival (or the
    prompt chunks of all at once) plus the decode steps. Only sizes a chart's axis up front."""
    arrivals = (len(token_ids) - 1) * cfg.arrival_every
    prefill = cdiv(sum(len(ids) for ids in token_ids), cfg.max_batch_tokens)
    return max(arrivals, prefill) + cfg.max_new_tokens + 1


def unshared_blocks_bound(token_ids: list[list[int]], cfg: ServingConfig) -> int:
    """Most blocks the requests could hold together without sharing (every one at full length)."""
    return sum(cdiv(len(ids) + cfg.max_new_tokens, cfg.block_size) for ids in token_ids)


def request_ids(n: int) -> list[str]:
    return [f"r{i}" for i in range(n)]


def start_manager(lm: LoadedModel, cfg: ServingConfig):
    """A continuous-batching manager over a pool of exactly `num_blocks` blocks, greedy, no graphs."""
    eos = sorted(eos_token_ids(lm))
    gen = GenerationConfig(do_sample=False, max_new_tokens=cfg.max_new_tokens, eos_token_id=eos or None,
                           pad_token_id=lm.tokenizer.pad_token_id)
    cb = ContinuousBatchingConfig(
        page_size=cfg.block_size, num_blocks=cfg.num_blocks, max_batch_tokens=cfg.max_batch_tokens,
        allow_block_sharing=cfg.prefix_sharing, scheduler_type="fifo", use_cuda_graph=False,
        use_async_batching=False, auto_switch_to_flash=False)
    manager = lm.model.init_continuous_batching(generation_config=gen, continuous_batching_config=cb)
    manager.warmup()  # creates manager.batch_processor (and its PagedAttentionCache) now
    return manager


def read_pool(cache) -> tuple[tuple[str, ...], int]:
    """(owner of every block, free count) read from transformers' full-attention allocator."""
    if list(cache.cache_allocators) != [FULL_ATTENTION]:
        raise KeyError("only a pool of full-attention blocks is read; others are modelled")
    alloc = cache.cache_allocators[FULL_ATTENTION]
    base = cache.pool.num_reserved_sectors * alloc.blocks_per_sector  # ids start after trash sectors
    owners = [FREE] * alloc.num_blocks
    for block in alloc.ledger.cached_blocks:
        owners[block - base] = CACHED
    holders: dict[int, set[str]] = {}
    for rid, table in alloc.block_table.items():
        for block in table:
            holders.setdefault(block - base, set()).add(rid)
    for i, rids in holders.items():
        owners[i] = next(iter(rids)) if len(rids) == 1 else SHARED
    free = cache.pool.num_free_sectors * alloc.blocks_per_sector + cache.pool.count_free_blocks(alloc.index)
    return tuple(owners), free


def block_table_lengths(cache) -> dict[str, int]:
    try:
        return {rid: len(t) for rid, t in cache.cache_allocators[FULL_ATTENTION].block_table.items()}
    except (AttributeError, KeyError):
        return {}


class StepRecorder:
    """Runs on the manager's loop thread, wrapped around one batch processor's `update_batch`.

    After each step it submits the requests due by then and puts one StepSnapshot on `out`
    (or the exception that prevented it; generation itself goes on).
    """

    def __init__(self, manager, token_ids: list[list[int]], cfg: ServingConfig, out: queue.Queue):
        self.manager, self.proc, self.cfg, self.out = manager, manager.batch_processor, cfg, out
        self.ids = dict(zip(request_ids(len(token_ids)), token_ids))
        self.arrival = {rid: i * cfg.arrival_every for i, rid in enumerate(self.ids)}
        self.upcoming = list(self.ids)  # not submitted yet, in order
        self.seen: dict[str, int] = {}  # request id -> prompt tokens reused when first computed
        self.generated: dict[str, int] = {}
        self.submitted_s: dict[str, float] = {}  # request id -> submission time since t0
        self.last_batch: dict[str, bool] = {}  # request id -> step produced a token for it
        self.step, self.source, self.model = 0, "real", None
        self.t0 = self.t_last = time.perf_counter()
        self.paused_s = 0.0  # slow-motion pauses, left out of every time reported

    def clock_s(self) -> float:
        """Seconds since the run started, pauses excluded."""
        return time.perf_counter() - self.t0 - self.paused_s

    def install(self) -> None:
        update = self.proc.update_batch

        def update_and_record() -> None:
            batch = self.read_batch()
            update()
            self.after_step(batch)

        self.proc.update_batch = update_and_record

    def read_batch(self) -> dict[str, int]:
        """Tokens each request computes in the step about to be applied; notes prefix reuse."""
        batch = {}
        for future in self.proc.inputs_and_outputs.requests_in_batch:
            state, n = future.state, future.query_length
            batch[state.request_id] = n
            self.last_batch[state.request_id] = future.has_new_token
            self.seen.setdefault(state.request_id, state.position_offset - n)  # past tokens = reused
        return batch

    def submit_due(self) -> None:
        """Submit requests whose arrival step has come (or the next one, if nothing is left to run)."""
        due = [r for r in self.upcoming if self.arrival[r] <= self.step]
        if not due and self.upcoming and not self.proc.scheduler.has_pending_requests():
            due = self.upcoming[:1]
        for rid in due:
            self.upcoming.remove(rid)
            self.submitted_s[rid] = self.clock_s()
            self.manager.add_request(self.ids[rid], request_id=rid, max_new_tokens=self.cfg.max_new_tokens)

    def after_step(self, batch: dict[str, int]) -> None:
        self.step += 1
        now = time.perf_counter()
        step_ms = (now - self.t_last) * 1000
        try:
            self.submit_due()
            self.out.put(self.snapshot(batch, step_ms, self.clock_s()))
        except Exception as exc:  # noqa: BLE001 - reported to the caller, generation goes on
            self.out.put(exc)
        self.pause()
        self.t_last = time.perf_counter()

    def pause(self) -> None:
        """Slow motion: hold the loop after a step, so a watcher sees each one (not timed)."""
        if self.cfg.step_delay_ms > 0:
            started = time.perf_counter()
            time.sleep(self.cfg.step_delay_ms / 1000)
            self.paused_s += time.perf_counter() - started

    def snapshot(self, batch: dict[str, int], step_ms: float, time_s: float) -> StepSnapshot:
        sched = self.proc.scheduler
        active, waiting = dict(sched.active_requests), dict(sched.waiting_requests)
        tokens = {rid: s.position_offset for rid, s in active.items()}
        owners, free = self.pool_state(tokens)
        lengths = block_table_lengths(self.proc.cache) if self.source == "real" else self.model_lengths()
        views = tuple(self.view(rid, active, waiting, batch, tokens, lengths) for rid in self.ids)
        unshared = sum(cdiv(n, self.cfg.block_size) for n in tokens.values())
        return StepSnapshot(step=self.step, time_s=time_s, step_ms=step_ms, block_owners=owners, requests=views,
                            num_free_blocks=free, unshared_blocks=unshared, source=self.source)

    def pool_state(self, tokens: dict[str, int]) -> tuple[tuple[str, ...], int]:
        if self.source == "real":
            try:
                return read_pool(self.proc.cache)
            except (AttributeError, KeyError, TypeError, IndexError):
                self.source = "modelled"
        return self.model_pool(tokens)

    def model_pool(self, tokens: dict[str, int]) -> tuple[tuple[str, ...], int]:
        """The pool modelled by kvviz.core.blocks from each running request's token count (no sharing)."""
        if self.model is None:
            self.model = BlockPool(num_blocks=self.cfg.num_blocks, block_size=self.cfg.block_size)
        names = list(self.ids)
        for seq, rid in enumerate(names):
            if rid not in tokens:
                self.model.free(seq)
        for rid, n in tokens.items():
            try:
                self.model.grow(names.index(rid), n)
            except MemoryError:  # the real pool fit it by sharing, which is not modelled
                pass
        owners = [FREE] * self.model.num_blocks
        for seq, blocks in self.model.owned.items():
            for b in blocks:
                owners[b] = names[seq]
        return tuple(owners), self.model.num_free_blocks

    def model_lengths(self) -> dict[str, int]:
        names = list(self.ids)
        return {names[seq]: len(b) for seq, b in self.model.owned.items()} if self.model else {}

    def view(self, rid, active, waiting, batch, tokens, lengths) -> RequestView:
        state = self.state_of(rid, active, waiting)
        if rid in active:
            s = active[rid]
            self.generated[rid] = len(s.initial_tokens) + len(s.generated_tokens) - len(self.ids[rid])
        elif state == "finished" and rid in batch and self.last_batch.get(rid):
            self.generated[rid] = self.generated.get(rid, 0) + 1  # its last token, never cached
        return RequestView(request_id=rid, state=state, step_tokens=batch.get(rid, 0),
                           cached_tokens=tokens.get(rid, 0), generated_tokens=self.generated.get(rid, 0),
                           num_blocks=lengths.get(rid, 0), prefix_tokens_reused=max(self.seen.get(rid, 0), 0))

    def state_of(self, rid: str, active: dict, waiting: dict) -> str:
        if rid in self.upcoming:
            return "upcoming"
        if rid in active:
            return STATUS_NAMES.get(int(active[rid].status), "waiting")
        if rid in waiting or rid not in self.seen:
            return "preempted" if rid in self.seen else "waiting"
        return "finished"


def drain(q: queue.Queue) -> list:
    items = []
    while True:
        try:
            items.append(q.get_nowait())
        except queue.Empty:
            return items


def serve(lm: LoadedModel, token_ids: list[list[int]], cfg: ServingConfig,
          ) -> Generator[StepSnapshot, None, ServingResult]:
    """Run the requests through transformers' continuous batching; yield a snapshot per step."""
    check_fits(token_ids, cfg)
    start = time.perf_counter()
    manager = start_manager(lm, cfg)
    out: queue.Queue = queue.Queue()
    snapshots, outputs, done = [], {}, False
    try:
        recorder = StepRecorder(manager, token_ids, cfg, out)
        recorder.install()
        recorder.submit_due()
        recorder.t_last = time.perf_counter()  # step 1 is timed from here
        manager.start()
        while len(outputs) < len(token_ids):
            check_time(cfg, start)
            collect_output(manager, outputs)
            for snap in take_snapshots(out, snapshots):
                yield snap
        done = True
    finally:
        manager.stop(block=True, timeout=30, hard_stop=not done)
        manager.destroy()
    for snap in take_snapshots(out, snapshots):
        yield snap
    return build_result(lm, cfg, recorder, snapshots, outputs, time.perf_counter() - start - recorder.paused_s)


def check_time(cfg: ServingConfig, start: float) -> None:
    if cfg.time_limit_s is not None and time.perf_counter() - start > cfg.time_limit_s:
        raise RunTimeLimit(f"stopped at the limit of {cfg.time_limit_s:.0f} s per run")


class RunTimeLimit(UserError, TimeoutError):
    """A run stopped at the host's wall-clock limit (hosted mode): a limit, worded for the visitor."""


class ServingFailed(KvvizError, RuntimeError):
    """Continuous batching failed inside transformers; the message may quote it (never shown hosted)."""


def collect_output(manager, outputs: dict) -> None:
    """Wait briefly for one finished request; raise if it failed or the loop died."""
    result = manager.get_result(timeout=0.05)
    if result is not None and result.is_finished():
        if result.error is not None:
            raise ServingFailed(f"request {result.request_id} failed in continuous batching: {result.error}")
        outputs[result.request_id] = result
    elif result is None and not manager.is_running():
        raise ServingFailed("the continuous-batching loop stopped before every request finished")


def take_snapshots(out: queue.Queue, snapshots: list) -> list[StepSnapshot]:
    new = drain(out)
    for item in new:
        if isinstance(item, Exception):
            raise ServingFailed(f"could not read the paged cache after a step: {item!r}") from item
    snapshots.extend(new)
    return new


def build_result(lm, cfg, recorder: StepRecorder, snapshots, outputs, total_s: float) -> ServingResult:
    results = tuple(request_result(lm, rid, outputs[rid], recorder, snapshots) for rid in recorder.ids)
    source = "real" if all(s.source == "real" for s in snapshots) else "modelled"
    num_blocks = snapshots[0].num_blocks if snapshots else cfg.num_blocks
    return ServingResult(config=cfg, snapshots=tuple(snapshots), requests=results, num_blocks=num_blocks,
                         source=source,
                         prefill_ms_per_token=prefill_ms_per_token(snapshots), total_s=total_s)


def request_result(lm, rid: str, output, recorder: StepRecorder, snapshots) -> RequestResult:
    """Tokens from transformers' output; times from the step clock (a preempted request is
    re-queued by transformers as a new request object, which resets its own timestamps)."""
    ids = tuple(int(t) for t in output.generated_tokens)
    submitted = recorder.submitted_s.get(rid, 0.0)
    views = [(s, v) for s in snapshots for v in s.requests if v.request_id == rid]
    started = next((s.time_s - s.step_ms / 1000 for s, v in views if v.in_batch), submitted)
    first = next((s.time_s for s, v in views if v.generated_tokens > 0), submitted)
    done = next((s.time_s for s, v in views if v.state == "finished"), first)
    queued_ms, ttft_ms, total_ms = (max(t - submitted, 0.0) * 1000 for t in (started, first, done))
    return RequestResult(request_id=rid, prompt_tokens=len(recorder.ids[rid]), output_ids=ids,
                         text=lm.tokenizer.decode(ids, skip_special_tokens=True), arrival_step=recorder.arrival[rid],
                         prefix_tokens_reused=max(recorder.seen.get(rid, 0), 0), queued_ms=queued_ms,
                         ttft_ms=ttft_ms, total_ms=total_ms)


def prefill_ms_per_token(snapshots) -> float | None:
    """Extra step time per token computed (least-squares slope over this run's steps); an estimate."""
    points = [(s.step_tokens(), s.step_ms) for s in snapshots if s.step_tokens() > 0]
    if len({x for x, _ in points}) < 2:
        return None
    slope = statistics.linear_regression([x for x, _ in points], [y for _, y in points]).slope
    return slope if slope > 0 else None


def run_serving(lm: LoadedModel, token_ids: list[list[int]], cfg: ServingConfig,
                on_step: Callable[[StepSnapshot], None] | None = None) -> ServingResult:
    """`serve` to the end, calling `on_step` with each snapshot as it arrives."""
    steps = serve(lm, token_ids, cfg)
    try:
        while True:
            snap = next(steps)
            if on_step:
                on_step(snap)
    except StopIteration as stop:
        return stop.value
    finally:
        steps.close()
