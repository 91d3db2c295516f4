"""One generation on the device at a time, first come first served, with queue positions."""
from __future__ import annotations

import threading


class DeviceQueue:
    """A FIFO lock: `join`, then poll `try_take` until it is your turn, then `release`.

    Invariant: at most one holder; only the first waiter may take the device. Polling (rather
    than blocking) lets a waiting Streamlit session redraw its position and be cancelled.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._waiting: list[object] = []
        self._holder: object | None = None

    def join(self, ticket: object) -> None:
        with self._mutex:
            self._waiting.append(ticket)

    def position(self, ticket: object) -> int:
        """1 for the next in line; 0 when `ticket` holds the device or is not queued."""
        with self._mutex:
            return self._waiting.index(ticket) + 1 if ticket in self._waiting else 0

    def try_take(self, ticket: object) -> bool:
        with self._mutex:
            if self._holder is None and self._waiting and self._waiting[0] is ticket:
                self._holder = self._waiting.pop(0)
            return self._holder is ticket

    def release(self, ticket: object) -> None:
        """Give the device back, or leave the line if still waiting."""
        with self._mutex:
            if self._holder is ticket:
                self._holder = None
            elif ticket in self._waiting:
                self._waiting.remove(ticket)

    @property
    def held(self) -> bool:
        """True while some session holds the device."""
        return self._holder is not None

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)
