"""The server's loaded model: at most one at a time, shared by every session. Pure; stdlib only.

A page asks `get` whether its model is already loaded (which never loads anything, so opening
a link costs nothing) and calls `load` when the visitor asks for it. Loading a different model
replaces the one held. In hosted mode kvviz calls `load` only while holding the device queue
(kvviz.app.ui), and every run holds the queue too, so a load can never replace a model while a run
is using it: the second model waits for the run to end.
"""
from __future__ import annotations

import threading
from typing import Callable, Generic, Hashable, TypeVar

Model = TypeVar("Model")


class ModelStore(Generic[Model]):
    """One (key, model) pair; `load` is serialised, so two sessions never load at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: Hashable | None = None
        self._model: Model | None = None
        self.num_loads = 0  # models loaded since the server started

    def get(self, key: Hashable) -> Model | None:
        """The model loaded for `key`, or None; never loads."""
        return self._model if self._key == key and self._model is not None else None

    def load(self, key: Hashable, loader: Callable[[], Model]) -> Model:
        """The model for `key`, loading it with `loader` (and dropping the one held) if needed.

        The held model is dropped before the new one loads, so memory holds one at a time;
        a failed load leaves nothing held.
        """
        with self._lock:
            if self._key == key and self._model is not None:
                return self._model
            self._key, self._model = None, None
            model = loader()
            self._key, self._model = key, model
            self.num_loads += 1
            return model

    @property
    def loaded_key(self) -> Hashable | None:
        return self._key
