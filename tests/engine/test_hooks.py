"""Forward hooks on the decoder layers (kvviz.engine.hooks): the layer list found by its length,
one time per layer per pass, the newest token's attention per layer (eager attention only), and
every hook gone when the block ends. (The MPS clock reads that wait for the device:
tests/scripts/test_gpu_check.py.)"""
import pytest
import torch

from kvviz.core.errors import UserError
from kvviz.engine import hooks
from tiny import tiny_model


def forward(model, tokens: int = 5, batch: int = 2) -> None:
    with torch.inference_mode():
        model(input_ids=torch.randint(3, 300, (batch, tokens)), use_cache=False)


def hook_count(layers) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in layers.modules())


def test_the_decoder_layers_are_the_list_of_that_many_layers():
    model = tiny_model("llama")
    assert hooks.find_decoder_layers(model, 2) is model.model.layers
    with pytest.raises(UserError, match="no list of 3 decoder layers found in LlamaForCausalLM"):
        hooks.find_decoder_layers(model, 3)
    assert hooks.attention_module(model.model.layers[0]) is model.model.layers[0].self_attn
    assert hooks.attention_module(torch.nn.Linear(2, 2)) is None


def test_each_layer_is_timed_once_per_pass_and_the_hooks_go_with_the_block():
    model = tiny_model("llama")
    layers = model.model.layers
    with hooks.timed_layers(layers, use_cuda_events=False) as timer:
        assert hook_count(layers) == 0  # wrapped, not hooked: torch's fast call path stays
        forward(model)
        first = timer.take_ms()
        second = timer.take_ms()  # taken: cleared until the next pass
    assert len(first) == 2 and all(ms > 0 for ms in first) and second == [0.0, 0.0]
    assert hook_count(layers) == 0 and not any("forward" in layer.__dict__ for layer in layers)


def test_a_forward_wrapped_by_someone_else_is_timed_and_then_given_back():
    """accelerate (a device map) wraps a layer's forward on the instance: it runs inside the timing
    and is the layer's forward again after the block."""
    model = tiny_model("llama")
    layer, calls = model.model.layers[0], []
    theirs = layer.forward

    def wrapped(*args, **kwargs):
        calls.append(1)
        return theirs(*args, **kwargs)
    layer.forward = wrapped
    with hooks.timed_layers(model.model.layers, use_cuda_events=False) as timer:
        forward(model)
        assert all(ms > 0 for ms in timer.take_ms()) and calls == [1]
    assert layer.__dict__["forward"] is wrapped and "forward" not in model.model.layers[1].__dict__


def test_the_newest_token_s_attention_per_layer_needs_eager_attention():
    model = tiny_model("llama")
    model.set_attn_implementation("eager")
    with hooks.attention_rows(model.model.layers) as rows:
        forward(model, tokens=5, batch=2)
        taken = rows.take(written=5, static=False)
        assert rows.take(written=5, static=False) == ()  # cleared
        forward(model, tokens=5, batch=2)
        cut = rows.take(written=3, static=True)  # a static cache's rows cover its preallocated length
    assert len(taken) == 2 and all(len(layer) == 5 for seq in taken for layer in seq)  # [seq][layer][position]
    assert all(sum(layer) == pytest.approx(1, abs=1e-3) for seq in taken for layer in seq)  # a softmax row
    assert all(row == tuple(round(x, hooks.ATTENTION_DECIMALS) for x in row) for seq in taken for row in seq)
    assert all(len(layer) == 3 for seq in cut for layer in seq)
    assert hook_count(model.model.layers) == 0
    model.set_attn_implementation("sdpa")
    with hooks.attention_rows(model.model.layers) as rows:
        forward(model)
        assert rows.take(written=5, static=False) == ()  # sdpa returns no weights


def test_rounded_rows_are_python_s_round_bit_for_bit():
    """The rows' one-pass rounding (hooks.rounded) against `round(x, 4)` on every value: random
    float32 weights, and the exact ties x * 10**4 = n + 1/2 (odd multiples of 1/32: 0.03125 ->
    0.0312, half to even) with their float32 neighbours on either side."""
    ties = torch.arange(1, 32, 2, dtype=torch.float32) / 32
    near = torch.cat([ties, torch.nextafter(ties, torch.zeros(())), torch.nextafter(ties, torch.ones(()))])
    values = torch.cat([near, torch.rand(200_000, generator=torch.Generator().manual_seed(0)),
                        torch.tensor([0.0, 1.0, 5e-5, 1.5e-4, 0.99995], dtype=torch.float32)])
    got = hooks.rounded(values.reshape(1, -1))[0]
    want = [round(x, hooks.ATTENTION_DECIMALS) for x in values.tolist()]
    assert got == want and all(type(x) is float for x in got)
    assert hooks.rounded(torch.tensor([[0.03125]]))[0] == [0.0312]  # a tie goes to the even digit, as round does
