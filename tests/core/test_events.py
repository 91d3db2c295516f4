"""The records the engine yields (kvviz.core.events): frozen, built by keyword only, the optional
measurements None (or empty) unless recorded, and every field a scalar, a tuple or another record,
never a tensor or a list that could change under a reader."""
import dataclasses
import types
import typing

import pytest

from kvviz.core import events
from kvviz.core.events import BlockStat, LayerStat, StepEvent

RECORDS = (LayerStat, BlockStat, StepEvent)
PLAIN = {int, float, str, bool, type(None), LayerStat, BlockStat}


def plain(hint) -> bool:
    """Whether a field's type is built only of scalars, records, tuples and None."""
    if hint in PLAIN:
        return True
    origin = typing.get_origin(hint)
    return origin in (tuple, typing.Union, types.UnionType) and all(
        plain(arg) for arg in typing.get_args(hint) if arg is not Ellipsis)


def test_every_field_is_a_scalar_a_tuple_or_a_record():
    for record in RECORDS:
        hints = typing.get_type_hints(record, vars(events))
        assert hints and all(plain(h) for h in hints.values()), {f: h for f, h in hints.items() if not plain(h)}


def test_records_are_frozen_and_built_by_keyword_only():
    layer = LayerStat(layer=0, k_bytes=8, v_bytes=8, tokens=1, forward_ms=0.5)
    assert (layer.state_bytes, layer.storage_bytes, layer.formula_bytes) == (0, None, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        layer.k_bytes = 0
    for record in RECORDS:
        with pytest.raises(TypeError):
            record(*range(len(dataclasses.fields(record))))


def test_a_step_s_optional_measurements_are_absent_unless_recorded():
    step = StepEvent(mode="cached", phase="prefill", step=0, token_ids=(5,), texts=("a",), finished=(False,),
                     step_ms=1.0, seq_len=4, positions=4, kv_bytes=64, formula_bytes=64, layers=(), blocks=None)
    assert (step.cuda_allocated_bytes, step.cuda_reserved_bytes, step.storage_bytes, step.attention) == (None,) * 4
    assert step.cache_note == "" and dataclasses.replace(step, step=1) != step
