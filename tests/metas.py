"""Run metas for tests, read the one way a trace file's meta is read (kvviz.core.meta.read_meta)."""
from kvviz.core.meta import RunMeta, as_dict, read_meta, upgraded_meta


def meta_of(fields: dict | RunMeta, **changes) -> RunMeta:
    """A RunMeta from a meta's plain fields (an older file's parallel lists upgraded, as when a
    file loads), with `changes` on top."""
    plain = as_dict(fields) if isinstance(fields, RunMeta) else dict(fields)
    return read_meta(upgraded_meta({**plain, **changes}))
