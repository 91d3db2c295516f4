"""Every path that writes an answer stops at the end of the turn (kvviz.engine.models.stop_token_ids):
the Live engine (cached, no cache, the race of both), Shrink (both sides, alone and taking turns),
Serving, `kvviz record` and `kvviz shrink`. On a tiny model whose generation config names an
end-of-turn token besides EOS, and on the real default model, whose answers used to run on into a
turn it invented ("…in 1952.\\nsystem\\n\\nuser\\n"). The Sweep alone runs past EOS on purpose: each
point measures exactly its new tokens, and no answer is shown (tests/sweep/test_compute.py)."""
import json
import re

import pytest
from tiny import save_tiny, tiny_lm

from kvviz.core import assets
from kvviz import cli
from kvviz.core.config import RunConfig
from kvviz.core.trace import Trace
from kvviz.engine import loop, race
from kvviz.engine.models import stop_token_ids
from kvviz.serving import compute as serving
from kvviz.shrink import compute as shrink
from kvviz.shrink import trace as shrink_trace

PROMPT, NEW = "What is a KV cache?", 10
ROLE_LINE = re.compile(r"^\s*(system|user|assistant)\s*$", re.MULTILINE | re.IGNORECASE)


def role_debris(text: str) -> list[str]:
    """Lines that are only a chat role's name: what a run past the end of its turn writes once the
    special tokens around it are skipped."""
    return [m.group(1) for m in ROLE_LINE.finditer(text)]


def test_role_debris_finds_the_reported_answer():
    assert role_debris("The lighthouse got an electric lamp in 1952.\nsystem\n\nuser\n") == ["system", "user"]
    assert role_debris("The user asked about the system clock.\nIt is right.") == []


def free_tokens(lm) -> list[int]:
    events = loop.generate(lm, RunConfig(prompts=(PROMPT,), max_new_tokens=NEW, stop_on_eos=False))
    return [e.token_ids[0] for e in events]


@pytest.fixture(scope="module")
def turn():
    """(a tiny Llama whose generation config ends a turn at the token its greedy answer writes at
    step `end`, the answer without any stop, end)."""
    lm = tiny_lm("llama")
    free = free_tokens(lm)
    end = next(i for i in range(2, NEW - 2) if free[i] not in free[:i] and 0 not in free[:i + 1])
    lm.model.generation_config.eos_token_id = [0, free[end]]
    return lm, free, end


def test_the_configured_token_is_a_stop(turn):
    lm, free, end = turn
    assert stop_token_ids(lm.model, lm.tokenizer) == {0, free[end]}


def test_live_engine_and_race_stop_at_the_end_of_the_turn(turn):
    lm, free, end = turn
    cfg = RunConfig(prompts=(PROMPT,), max_new_tokens=NEW)
    runs = {mode: list(loop.generate(lm, cfg, mode)) for mode in loop.MODES}
    for events in runs.values():
        assert [e.token_ids[0] for e in events] == free[:end + 1] and events[-1].finished == (True,)
    raced = list(race.interleave(loop.generate(lm, cfg, "cached"), loop.generate(lm, cfg, "recompute")))
    assert [e.step for e in raced if e.mode == "cached"] == list(range(end + 1))
    assert max(e.step for e in raced if e.mode == "recompute") <= end


def test_shrink_stops_each_side_at_the_end_of_its_turn(turn):
    lm, free, end = turn
    ids = shrink.prompt_ids(lm.tokenizer, PROMPT)
    assert shrink.run(lm, ids, NEW, shrink.ShrinkMode()).tokens == free[:end + 1]
    result = shrink.compare(lm, ids, NEW, shrink.ShrinkMode(press="StreamingLLM", ratio=0.75))
    assert result.full.tokens == free[:end + 1]
    stops = stop_token_ids(lm.model, lm.tokenizer)
    shrunk = result.shrunk.tokens
    assert not stops & set(shrunk[:-1]) and (shrunk[-1] in stops or len(shrunk) == NEW)
    assert 0 < result.bytes_ratio() < 1  # compared at the last step both made


def test_serving_stops_at_the_end_of_the_turn(turn):
    lm, free, end = turn
    ids = serving.encode_requests(lm.tokenizer, [PROMPT], chat=True)
    result = serving.run_serving(lm, ids, serving.ServingConfig(max_new_tokens=NEW, block_size=4, num_blocks=32))
    assert list(result.requests[0].output_ids) == free[:end + 1]


@pytest.fixture(scope="module")
def turn_dir(turn, tmp_path_factory):
    """The tiny Llama as a local folder, its generation config naming the end-of-turn token."""
    lm, free, end = turn
    folder = save_tiny(tmp_path_factory.mktemp("tiny-turn"))
    config = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**config, "eos_token_id": [0, free[end]]}))
    return folder


@pytest.mark.slow
def test_the_commands_stop_at_the_end_of_the_turn(turn, turn_dir, tmp_path, capsys):
    _, free, end = turn
    trace = tmp_path / "run.json"
    assert cli.main(["record", "--model", str(turn_dir), "--prompt", PROMPT, "--max-new-tokens", str(NEW),
                     "--recompute", "--out", str(trace)]) == 0
    for mode in loop.MODES:
        assert [e.token_ids[0] for e in Trace.load(trace).events_of(mode)] == free[:end + 1]
    pair = tmp_path / "shrink.json"
    assert cli.main(["shrink", "--press", "Knorm", "--model", str(turn_dir), "--prompt", PROMPT,
                     "--max-new-tokens", str(NEW), "--out", str(pair)]) == 0, capsys.readouterr().err
    assert shrink_trace.from_json(pair.read_bytes()).result.full.tokens == free[:end + 1]


@pytest.mark.slow
def test_the_default_model_ends_its_answer_at_the_turn(default_lm):
    """SmolLM2-Instruct writes <|im_end|> at the end of its turn: the Live engine and both Shrink
    sides stop there, before max_new_tokens, with no role's name after the answer."""
    stops = stop_token_ids(default_lm.model, default_lm.tokenizer)
    assert default_lm.tokenizer.convert_tokens_to_ids("<|im_end|>") in stops
    ids = shrink.prompt_ids(default_lm.tokenizer, shrink.DEFAULT_PROMPT)
    result = shrink.compare(default_lm, ids, 48, shrink.ShrinkMode(press="SnapKV", ratio=0.5))
    for run in (result.full, result.shrunk):
        assert run.tokens[-1] in stops and len(run.tokens) < 48 and not role_debris(run.text), run.text
    assert "1952" in result.full.text
    events = list(loop.generate(default_lm, RunConfig(prompts=("What is the capital of France?",), max_new_tokens=64)))
    text = "".join(e.texts[0] for e in events)
    assert events[-1].token_ids[0] in stops and len(events) < 64 and "Paris" in text and not role_debris(text), text


def shipped_answers() -> dict[str, list[str]]:
    """Every answer in assets/traces/: a run trace's text per mode and sequence, a shrink
    file's two sides (a vLLM watch holds events, no answer)."""
    from kvviz.vllm.trace import FORMAT as WATCH, peek_format
    answers = {}
    for path in sorted(assets.TRACES.glob("*.json")):
        data = path.read_bytes()
        if peek_format(data) == WATCH:
            continue
        if shrink_trace.is_record(data):
            rec = shrink_trace.from_json(data).result
            answers[path.name] = [rec.full.text, rec.shrunk.text]
            continue
        trace = Trace.load(path)
        answers[path.name] = ["".join(e.texts[i] for e in trace.events_of(mode))
                              for mode in loop.MODES for i in range(trace.meta.batch)]
    return answers


def test_every_shipped_answer_ends_at_its_turn():
    answers = shipped_answers()
    assert len(answers) >= 2 and all(any(a.strip() for a in texts) for texts in answers.values())
    assert {name: [role_debris(a) for a in texts] for name, texts in answers.items()} == \
        {name: [[] for _ in texts] for name, texts in answers.items()}
