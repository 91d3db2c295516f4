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
