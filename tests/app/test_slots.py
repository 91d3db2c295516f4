"""kvviz.app.slots.Slot: the first draw goes into its own container (which a rerun re-sends with
the previous run's element still in it), every later one replaces the element it drew."""
from kvviz.app.slots import Slot


class Recorder:
    """Stands in for a Streamlit DeltaGenerator: records each call, returns a new handle."""

    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def __getattr__(self, method: str):
        def call(*args, **kwargs):
            self.log.append((self.name, method, args))
            return Recorder(f"{self.name}.{method}", self.log)
        return call


def test_a_slot_draws_into_its_container_once_then_replaces_its_element():
    log: list = []
    slot = Slot(Recorder("page", log))
    assert log == [("page", "container", ())]  # the container is sent when the slot is made
    slot.caption("first")
    slot.caption("second")
    slot.vega_lite_chart({"mark": "bar"})
    assert log[1:] == [("page.container", "caption", ("first",)),
                       ("page.container.caption", "caption", ("second",)),
                       ("page.container.caption.caption", "vega_lite_chart", ({"mark": "bar"},))]


def test_a_slot_returns_the_element_it_drew():
    log: list = []
    drawn = Slot(Recorder("page", log)).code(" ")
    assert drawn.name == "page.container.code"


def test_a_text_element_drawn_again_as_it_stands_is_not_sent_again():
    log: list = []
    slot = Slot(Recorder("page", log))
    first = slot.metric("Tokens", "3 × 1", None, help="generated")
    assert slot.metric("Tokens", "3 × 1", None, help="generated") is first  # unchanged: nothing sent
    slot.metric("Tokens", "4 × 1", None, help="generated")  # a new value
    slot.metric("Tokens", "4 × 1", None, help="another help")  # a new help
    slot.caption("4 × 1")  # another element
    slot.metric("Tokens", "4 × 1", None, help="another help")  # back: sent again, it had been replaced
    assert [(method, args) for _, method, args in log[1:]] == [
        ("metric", ("Tokens", "3 × 1", None)), ("metric", ("Tokens", "4 × 1", None)),
        ("metric", ("Tokens", "4 × 1", None)), ("caption", ("4 × 1",)), ("metric", ("Tokens", "4 × 1", None))]


def test_charts_and_other_elements_are_always_sent():
    import pandas as pd
    log: list = []
    slot = Slot(Recorder("page", log))
    vega = {"mark": "bar", "datasets": {"table": pd.DataFrame({"x": [1, 2]})}}
    slot.vega_lite_chart(vega)
    slot.vega_lite_chart(vega)  # a chart's data is never compared: it is sent each time asked
    slot.empty()
    slot.empty()
    slot.markdown("a", help=pd.DataFrame({"x": [1]}))  # arguments that cannot be compared: sent
    slot.markdown("a", help=pd.DataFrame({"x": [1]}))
    assert [method for _, method, _ in log[1:]] == ["vega_lite_chart"] * 2 + ["empty"] * 2 + ["markdown"] * 2
