"""A run that fails midway, in the visitor's words (kvviz.app.failures): out of memory said plainly
whoever asks, hosted visitors given no internals (the details go to the log), your own machine
given the error's type and first line, Markdown-inert and cut short."""
import logging

from kvviz.app import ui
from kvviz.app.failures import failure_message


def test_running_out_of_memory_is_one_plain_sentence_hosted_or_not():
    for exc in (MemoryError(), RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")):
        for hide in (True, False):
            text = failure_message(exc, hide_details=hide)
            assert text.startswith("The device ran out of memory during this run") and "CUDA" not in text


def test_hosted_visitors_read_no_internals_and_the_log_keeps_them(caplog):
    try:
        raise KeyError("/srv/kvviz/secret/path.py")
    except KeyError as exc:
        with caplog.at_level(logging.ERROR, logger="kvviz"):
            text = failure_message(exc, hide_details=True)
    assert text == "Generation stopped because of an internal error. What was produced is kept."
    assert "secret" not in text
    assert caplog.records[-1].message == "generation failed" and caplog.records[-1].exc_info[0] is KeyError


def test_your_own_machine_reads_the_type_and_first_line_inert_and_cut_short():
    text = failure_message(ValueError("bad **shape** [1, 2]\nTraceback line two"), hide_details=False)
    assert text == f"Generation stopped: ValueError: {ui.inert('bad **shape** [1, 2]')}"
    assert "line two" not in text and "\\*\\*shape\\*\\*" in text
    long = failure_message(RuntimeError("x" * 1000), hide_details=False)
    assert long == "Generation stopped: RuntimeError: " + "x" * 300
