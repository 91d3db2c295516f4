"""kill -9 mid-write: every file kvviz writes (kvviz.core.files.write_atomic, used by Trace.save,
Recording.save and the default model's marker) is afterwards the old complete file or the new
complete one, a stray temp file is never read as data, and the app's loaders still serve.

A child process saves a large trace (several MiB) and a vLLM watch over and over, each save
tagged with its generation; the test kills it with SIGKILL at a spread of moments (bounded
waits, the child killed in `finally` whatever happens), then loads what is left."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.core import assets, files
from kvviz.core.trace import Trace
from kvviz.vllm.trace import Recording

pytestmark = pytest.mark.slow  # kills writer processes mid-write, repeatedly: make test, not make check

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = assets.TRACES / "smollm2-135m-cpu-fp32.json"  # a real run, replayable
NUM_EVENTS = len(Trace.load(EXAMPLE).events)
PAD = 6 * 2**20  # padding in the trace's meta: ≈ 6 MiB a save, so a write takes a while
CHILD = r"""
import sys, time
from pathlib import Path
from kvviz.core import files
from kvviz.core.trace import Trace
import msgspec
from kvviz.vllm.trace import NoteRecord, Recording

folder, example, pad = Path(sys.argv[1]), Trace.load(sys.argv[2]), int(sys.argv[3])
gen = 0
while True:
    gen += 1
    trace = Trace(msgspec.structs.replace(example.meta, config={"gen": gen}, prompt_pieces=[["x" * pad]]))
    trace.events.extend(example.events)
    trace.save(folder / "run.json")
    Recording({"urls": ["http://127.0.0.1:8000"], "gen": gen},
              notes=[NoteRecord(i * 0.1, "http://127.0.0.1:8000", f"note {gen}.{i}") for i in range(20000)]
              ).save(folder / "vllm-watch.json")
    files.write_atomic(folder / "kvviz-converted.json", '{"gen": %d, "pad": "%s"}' % (gen, "x" * 2**20))
    (folder / "generation").write_text(str(gen))  # progress, for the parent (not data)
"""


def start_child(folder: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(folder), str(EXAMPLE), str(PAD)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_for_generation(folder: Path, child: subprocess.Popen, at_least: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if child.poll() is not None:
            pytest.fail(f"the writer died by itself: {child.stderr.read().decode()[-2000:]}")
        try:
            gen = int((folder / "generation").read_text() or 0)
        except (OSError, ValueError):
            gen = 0
        if gen >= at_least:
            return gen
        time.sleep(0.02)
    pytest.fail(f"the writer did not reach generation {at_least} within {timeout_s} s")


def wait_for_temp(folder: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(files.is_temp(p) for p in folder.iterdir()):
            return
    pytest.fail(f"no write was seen in progress within {timeout_s} s")


def kill(child: subprocess.Popen) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    child.stderr.close()


def check_left_files(folder: Path, last_done: int) -> tuple[int, list[str]]:
    """Every data file loads cleanly and is one whole generation (the last one completed or the
    one being written); returns that generation and the temp files left."""
    trace = Trace.load(folder / "run.json")
    assert len(trace.events) == NUM_EVENTS and len(trace.meta.prompt_pieces[0][0]) == PAD
    gen = trace.meta.setting("gen")
    assert last_done <= gen <= last_done + 1, (gen, last_done)
    watch = Recording.load(folder / "vllm-watch.json")
    assert len(watch.notes) == 20000 and watch.meta["gen"] in (gen - 1, gen)
    import json
    marker = json.loads((folder / "kvviz-converted.json").read_text())
    assert marker["gen"] in (gen - 1, gen) and len(marker["pad"]) == 2**20
    temps = [p.name for p in folder.iterdir() if files.is_temp(p)]
    data = {p.name for p in folder.iterdir() if not files.is_temp(p)}
    assert data <= {"run.json", "vllm-watch.json", "kvviz-converted.json", "generation"}, data
    assert all(not name.endswith(".json") for name in temps)  # no loader's *.json glob picks one up
    return gen, temps


def test_kill_9_mid_write_leaves_old_or_new_complete_files(tmp_path, monkeypatch):
    folder = tmp_path / "runs"
    folder.mkdir()
    temps_seen, kills = [], 0
    for at_temp, delay_s in ((True, 0), (True, 0.002), (True, 0.005), (True, 0.0),
                             (False, 0.013), (False, 0.047), (False, 0.11), (False, 0.23)):
        (folder / "generation").unlink(missing_ok=True)
        child = start_child(folder)
        try:
            done = wait_for_generation(folder, child, 1, timeout_s=120)
            if at_temp:  # kill while a temp file exists: inside a write, between mkstemp and replace
                wait_for_temp(folder, timeout_s=30)
            time.sleep(delay_s)
            done = int((folder / "generation").read_text() or done)
            child.send_signal(signal.SIGKILL)
            kills += 1
        finally:
            kill(child)
        gen, temps = check_left_files(folder, done)
        temps_seen += temps
    assert kills == 8
    # the kills really landed inside writes: some left a temp file, which the loaders ignored
    assert temps_seen, "no kill landed mid-write; the test proves nothing (make the files larger)"

    # the app's loaders still serve: the Replay page lists and draws the trace left behind
    from kvviz.app import ui
    monkeypatch.setattr(ui, "example_traces",
                        lambda: {p.stem: p for p in sorted(folder.glob("*.json")) if p.stem == "run"})
    monkeypatch.delenv("KVVIZ_HOSTED", raising=False)
    at = AppTest.from_file(str(ROOT / "app_pages" / "replay.py"), default_timeout=120).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.metric


def test_write_atomic_replaces_whole_and_keeps_permissions(tmp_path):
    path = tmp_path / "a.json"
    files.write_atomic(path, "old")
    files.write_atomic(path, b"new")
    assert path.read_bytes() == b"new"
    assert path.stat().st_mode & 0o777 == 0o666 & ~_umask()
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]
    with pytest.raises(OSError):
        files.write_atomic(tmp_path / "missing" / "b.json", "x")
    assert files.is_temp(tmp_path / ".kvviz-a.json-x1y2.tmp") and not files.is_temp(path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
