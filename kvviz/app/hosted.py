"""Hosted mode: what strangers on the internet may do with a shared kvviz. Pure; stdlib only.

Turned on by `KVVIZ_HOSTED=1`. Then only allowlisted models load, each at a pinned revision
(`KVVIZ_HOSTED_MODELS="default,org/name@revision,..."`; the embedded default needs no
revision), never with remote code and never from a local path; prompts, new tokens, batch,
sweeps and the no-cache race are capped; every run has a wall-clock limit; uploads are small;
and visitors see what went wrong in plain words, never internal error details.

Every page goes through one check, `Policy.check_limits`: Live, Sweep, Serving and Shrink runs,
the Planner's computations and the vLLM engine page's servers. What the last two may do:

- Planner: plain arithmetic, cheap at any size, but a public link should only answer questions
  about real deployments, and a crafted link should not make the server chew on absurd numbers.
  Every token count on the page (context T, max_model_len, the shared prompt, the what-if window)
  is capped at 1,048,576 (2^20: the longest contexts models are served at today), the batch at
  4,096 requests (vLLM's max_num_seqs is 256 by default) and TP × PP × DP at 512 GPUs. The page's
  widgets keep their full ranges, so a value over a cap, typed or carried by a link, is answered
  with the cap's sentence instead of being silently dropped; your own machine has no caps.
- vLLM engine: the server never contacts a host the operator did not name. Only the URLs in
  `KVVIZ_ENGINE_URLS` can be watched (none listed: the page is off); a link or widget naming any
  other URL gets one sentence and is never contacted; at most `max_engines` servers at once; and
  visitors cannot disconnect the shared watches (other visitors use them).

`KVVIZ_HOSTED_MAX_RUN_S` sets the wall-clock limit per run (default 60 s).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from kvviz.core.config import DEFAULT_MODEL
from kvviz.core.errors import UserError

UNHOSTED_UPLOAD_MIB = 80  # .streamlit/config.toml's server.maxUploadSize (Streamlit reads it as MiB)


@dataclass(frozen=True, kw_only=True)
class Policy:
    enabled: bool = False
    models: dict[str, str | None] = field(default_factory=lambda: {DEFAULT_MODEL: None})  # name -> revision
    max_prompt_tokens: int = 1024  # after the chat template
    max_prompt_chars: int = 4000  # what the prompt and system boxes accept (each)
    max_new_tokens: int = 128
    max_batch: int = 4
    max_sweep_points: int = 8
    max_recompute_tokens: int = 48  # the no-cache race stops here; the rest is extrapolated
    max_run_s: float = 60.0  # wall clock per generation, waiting in the queue excluded
    max_upload_bytes: int = 8 * 2**20
    max_pool_tokens: int = 4096  # Serving's pool: blocks × block size (SmolLM2-135M fp32: 180 MiB of cache)
    max_step_delay_ms: int = 1000  # Serving's slow motion per step (pauses are not counted in max_run_s)
    max_arrival_every: int = 16  # Serving: steps between two arrivals
    max_plan_tokens: int = 2**20  # the planner's context, max_model_len, shared prompt, window
    max_plan_requests: int = 4096  # the planner's batch (requests decoded together)
    max_plan_gpus: int = 512  # the planner's TP × PP × DP
    engine_urls: tuple[str, ...] = ()  # the vLLM servers visitors may watch (KVVIZ_ENGINE_URLS)
    max_engines: int = 4  # servers watched at once on the engine page

    def check_model(self, name: str) -> str | None:
        """The pinned revision of an allowed model; UserError for anything else."""
        if not self.enabled:
            return None
        if name not in self.models:
            raise UserError(f"this hosted kvviz only runs {', '.join(sorted(self.models))}")
        return self.models[name]

    def check_run(self, model: str, cfg) -> None:
        """Where a Live run starts, on the server: the model allowlisted and every cap respected
        (widgets cap their values too, but a crafted request could bypass them). UserError."""
        self.check_limits(model, batch=cfg.batch, new_tokens=cfg.max_new_tokens,
                          prompt_chars=max(len(text) for text in (cfg.system, *cfg.prompts)))

    def check_limits(self, model: str | None, *, batch: int = 1, new_tokens: int = 0, points: int = 1,
                     prompt_tokens: int = 0, prompt_chars: int = 0,
                     plan_tokens: dict[str, int] | None = None, plan_requests: int = 1,
                     plan_gpus: int = 1, engine_urls: list[str] | tuple[str, ...] = (),
                     pool_tokens: int = 0, step_delay_ms: int = 0, arrival_every: int = 0) -> None:
        """The one check every page goes through: Live, Sweep, Serving and Shrink runs (`model`
        allowlisted, batch, tokens, points, prompt), the Planner (`plan_tokens`: each token count
        by the name the page gives it; requests; GPUs; `model` None: nothing runs), the vLLM
        engine page (`engine_urls`, normalized) and Serving's pool and pacing (`pool_tokens`: blocks ×
        block size). UserError naming the first amount over its cap."""
        if not self.enabled:
            return
        if model is not None:
            self.check_model(model)
        if any(url not in self.engine_urls for url in engine_urls):
            raise UserError("this hosted kvviz only watches the vLLM servers its host lists; "
                            "any other server is never contacted")
        for what, value, cap in (("batch", batch, self.max_batch),
                                 ("new tokens", new_tokens, self.max_new_tokens),
                                 ("sweep points", points, self.max_sweep_points),
                                 *((name, value, self.max_plan_tokens)
                                   for name, value in (plan_tokens or {}).items()),
                                 ("the batch", plan_requests, self.max_plan_requests),
                                 ("TP × PP × DP", plan_gpus, self.max_plan_gpus),
                                 ("the number of vLLM servers", len(engine_urls), self.max_engines),
                                 ("the pool (blocks × block size, in tokens)", pool_tokens, self.max_pool_tokens),
                                 ("the pause per step (ms)", step_delay_ms, self.max_step_delay_ms),
                                 ("the steps between arrivals", arrival_every, self.max_arrival_every)):
            if value > cap:
                raise UserError(f"{what} is {value:,}; this hosted kvviz allows {cap:,}")
        if prompt_chars > self.max_prompt_chars:
            raise UserError(f"the prompt is {prompt_chars:,} characters; this hosted kvviz allows "
                            f"{self.max_prompt_chars:,}")
        self.check_prompt_tokens(prompt_tokens)

    def check_prompt_tokens(self, tokens: int) -> None:
        if self.enabled and tokens > self.max_prompt_tokens:
            raise UserError(f"the prompt is {tokens} tokens; this hosted kvviz allows "
                            f"{self.max_prompt_tokens}")

    def upload_limit_bytes(self, unhosted_bytes: int) -> int:
        """The largest upload accepted: the hosted cap, or `unhosted_bytes` on your own machine."""
        return self.max_upload_bytes if self.enabled else unhosted_bytes

    def server_upload_mib(self) -> int:
        """Streamlit's `server.maxUploadSize` (MiB) under this policy: hosted, the upload cap plus room
        for an upload box's rounding and the multipart envelope (12 for 8 MiB); else
        `.streamlit/config.toml`'s 80 (traces up to 64 MiB)."""
        return math.ceil(self.max_upload_bytes / 1e6) + 3 if self.enabled else UNHOSTED_UPLOAD_MIB

    def cap(self, name: str, value: int) -> int:
        """`value` limited by the hosted cap `max_<name>` (unchanged when not hosted)."""
        return min(value, getattr(self, f"max_{name}")) if self.enabled else value


def parse_models(text: str) -> dict[str, str | None]:
    """"default,org/name@rev" -> {"default": None, "org/name": "rev"}; every Hub id needs a revision."""
    models: dict[str, str | None] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, _, revision = item.partition("@")
        if name != DEFAULT_MODEL and not revision:
            raise UserError(f"KVVIZ_HOSTED_MODELS: {name!r} needs a pinned revision (name@revision)")
        if name.startswith((".", "/", "~")):
            raise UserError(f"KVVIZ_HOSTED_MODELS: {name!r} is a local path; hosted mode allows Hub ids")
        models[name] = revision or None
    return models or {DEFAULT_MODEL: None}


def policy_from_env(env: dict | None = None) -> Policy:
    env = os.environ if env is None else env
    if env.get("KVVIZ_HOSTED", "") not in ("1", "true", "yes"):
        return Policy()
    return Policy(enabled=True, models=parse_models(env.get("KVVIZ_HOSTED_MODELS", DEFAULT_MODEL)),
                  max_run_s=parse_run_s(env.get("KVVIZ_HOSTED_MAX_RUN_S", "")),
                  engine_urls=tuple(engine_urls(env)))


def parse_run_s(text: str) -> float:
    """`KVVIZ_HOSTED_MAX_RUN_S` as seconds (empty: 60); a host's typo fails loudly at start."""
    if not text.strip():
        return Policy.max_run_s
    try:
        seconds = float(text)
    except ValueError:
        raise UserError(f"KVVIZ_HOSTED_MAX_RUN_S: {text[:40]!r} is not a number of seconds") from None
    if not 0 < seconds <= 24 * 3600:
        raise UserError(f"KVVIZ_HOSTED_MAX_RUN_S: {text[:40]!r} must be between 0 and 86400 seconds")
    return seconds


def engine_urls(env: dict | None = None) -> list[str]:
    """The vLLM servers a hosted kvviz may watch (`KVVIZ_ENGINE_URLS="http://a:8000,http://b:8000"`).

    Empty means the Engine page is off in hosted mode: visitors never make kvviz contact a host
    the operator did not name.
    """
    env = os.environ if env is None else env
    return [u.strip().rstrip("/") for u in env.get("KVVIZ_ENGINE_URLS", "").split(",") if u.strip()]
