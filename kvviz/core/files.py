"""Writing a file so that a crash never leaves half of one. Pure; stdlib only.

Every file kvviz writes (traces, vLLM watches, the converted model's marker) goes through
`write_atomic`: the bytes go to a temp file in the same folder, are flushed and fsync'd, then
`os.replace` puts it over the final name (atomic on POSIX and Windows within one filesystem) and
the folder is fsync'd so the rename itself survives a power cut. A `kill -9` at any instant leaves
under the final name either the old complete file or the new complete one; at worst a stray temp
file, hidden and ending in `.tmp` (`is_temp`), which no loader reads: kvviz lists `*.json` only.
"""
from __future__ import annotations

import contextlib
import os
import tempfile

TEMP_PREFIX = ".kvviz-"
TEMP_SUFFIX = ".tmp"


def write_atomic(path: str | os.PathLike, data: bytes | str) -> None:
    """Replace `path` by `data` (str: UTF-8) all at once; OSError if the folder is not writable.

    The new file gets ordinary permissions (0666 less the umask), not mkstemp's 0600.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f"{TEMP_PREFIX}{os.path.basename(path)}-",
                               suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    sync_folder(folder)


def sync_folder(folder: str | os.PathLike) -> None:
    """fsync a folder (its entries: a rename into it), where the OS allows it (not on Windows)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def sync_tree(folder: str | os.PathLike) -> None:
    """fsync every file in `folder` and the folder itself: before a folder written by others
    (save_pretrained) is vouched for and renamed into place."""
    for entry in os.scandir(folder):
        if entry.is_file(follow_symlinks=False):
            fd = os.open(entry.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    sync_folder(folder)


def is_temp(path: str | os.PathLike) -> bool:
    """True for a temp file `write_atomic` left behind when killed: never data."""
    name = os.path.basename(path)
    return name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX)
