"""The server's loaded model, shared by every session: one model at a time, with its variants. Pure; stdlib only.

A page asks `get` whether its model is already loaded (which never loads anything, so opening
a link costs nothing) and calls `load` when the visitor asks for it. Keys of one *family* (the same
model under another attention implementation, kvviz.app.ui) are held side by side: the loader
builds a variant from a `sibling` (sharing its weights), so two visitors alternating the Live
page's "Attention over the cache" never reload or swap the model the other uses. Loading a key of
another family replaces everything held. In hosted mode kvviz calls `load` only while holding
the device queue (kvviz.app.ui), and every run holds the queue too, so a load can never replace a
model while a run is using it: the second model waits for the run to end.
"""
from __future__ import annotations

import threading
from typing import Callable, Generic, Hashable, TypeVar

Model = TypeVar("Model")


class ModelStore(Generic[Model]):
    """Models of one family by key; `load` is serialised, so two sessions never load at once."""

    def __init__(self, family: Callable[[Hashable], Hashable] = lambda key: key) -> None:
        self._lock = threading.Lock()
        self._family_of = family
        self._family: Hashable | None = None
        self._models: dict[Hashable, Model] = {}
        self._key: Hashable | None = None  # the last key loaded
        self.num_loads = 0  # loader calls since the server started (a variant built from a sibling counts)

    def get(self, key: Hashable) -> Model | None:
        """The model loaded for `key`, or None; never loads."""
        return self._models.get(key)

    def sibling(self, key: Hashable) -> Model | None:
        """A held model of `key`'s family (another variant of the same weights), or None."""
        if self._family is None or self._family_of(key) != self._family:
            return None
        return next(iter(self._models.values()), None)

    def load(self, key: Hashable, loader: Callable[[], Model]) -> Model:
        """The model for `key`, loading it with `loader` if needed; a key of another family first
        drops every model held, so memory holds one model (and its variants); a failed load of
        another family leaves nothing held."""
        with self._lock:
            if key in self._models:
                return self._models[key]
            if self._family_of(key) != self._family:
                self._family, self._models, self._key = None, {}, None
            model = loader()
            self._family, self._key = self._family_of(key), key
            self._models[key] = model
            self.num_loads += 1
            return model

    @property
    def loaded_key(self) -> Hashable | None:
        return self._key
