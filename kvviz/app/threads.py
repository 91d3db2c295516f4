"""How many CPU threads torch may use in the dashboard's server process, and how soon the
interpreter passes from the drawing thread to the model's.

On a small machine the Streamlit server and the browser drawing the page share the cores with
torch. Torch's default (one thread per core) makes every decode step wait for its slowest
thread, and the thread that loses its core to the server or the browser stalls the step: on
2 cores the live page ran at half the headless speed until torch kept one core free. Measured
with `python -m bench --only live-threads --reps 3` (2026-12-03, the 2-core development machine under
heavy load from other sessions, load average ≈ 15): the page in Chromium decoded 1.21 tok/s wall
clock with this policy (1 thread) against 0.55 with torch's default (2), compute-only 1.64 vs
0.66. So the default leaves one core to the rest, and `KVVIZ_TORCH_THREADS=N` overrides it
(`KVVIZ_TORCH_THREADS=0` keeps torch's own choice); rerun that benchmark on your machine.
"""
from __future__ import annotations

import os
import sys
from kvviz.core.errors import UserError

ENV = "KVVIZ_TORCH_THREADS"

# The live page's model runs on a worker thread while the script thread draws (kvviz.engine.pump).
# Torch lets go of the interpreter inside each operation; when the operation returns while the
# drawing thread holds the interpreter, the model waits until the holder is asked to let go: after
# Python's switch interval, 5 ms by default, for every operation, so one chart frame could stall
# a 3 ms decode step several times over. At 0.5 ms the fast model's page decoded at 0.923 and 0.988
# of headless where 5 ms read 0.797 and 0.952 (`python -m bench --only live-browser-fast`, the two
# settings run one after the other, twice, in opposite orders; 2026-12-07).
SWITCH_INTERVAL_S = 0.0005


def torch_threads(cores: int, torch_default: int, env: dict | None = None) -> int:
    """Threads for torch: `$KVVIZ_TORCH_THREADS` if set (0 = torch's default), else all but one core.

    UserError for a setting that is not a whole number ≥ 0.
    """
    env = os.environ if env is None else env
    raw = env.get(ENV, "").strip()
    if raw:
        if not raw.isdigit():
            raise UserError(f"{ENV}={raw!r}: expected a whole number of threads (0 = torch's default)")
        return int(raw) or torch_default
    return max(1, min(torch_default, cores - 1))


_TORCH_DEFAULT: list[int] = []  # torch's own choice, read once before this module changes it


def apply_torch_threads(env: dict | None = None) -> int:
    """Set torch's intra-op threads by the policy above; returns the number in force.

    torch keeps the setting for every thread started afterwards (Streamlit runs each script
    run on a fresh thread), so calling this once per server process is enough; calling it
    again is cheap and changes nothing.
    """
    import torch
    if not _TORCH_DEFAULT:
        _TORCH_DEFAULT.append(torch.get_num_threads())
    threads = torch_threads(os.cpu_count() or 1, _TORCH_DEFAULT[0], env)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


def apply_switch_interval() -> float:
    """Let a thread waiting for the interpreter have it after SWITCH_INTERVAL_S (process-wide)."""
    if sys.getswitchinterval() != SWITCH_INTERVAL_S:
        sys.setswitchinterval(SWITCH_INTERVAL_S)
    return sys.getswitchinterval()
