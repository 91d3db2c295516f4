"""`python -m kvviz.app.launch [streamlit options]`: `streamlit run app.py` from the repository root
with the options the hosted policy sets (`make run`, `make present` and the Docker image start kvviz
this way). In hosted mode (`KVVIZ_HOSTED=1`): `server.maxUploadSize` from `Policy.server_upload_mib`,
so Streamlit's upload endpoint refuses a larger request before it reaches memory, and
`client.showErrorDetails=none`. Options given after them win. Your own machine: none added."""
from __future__ import annotations

import os
import sys

from kvviz.app.hosted import Policy, policy_from_env


def streamlit_options(policy: Policy) -> list[str]:
    if not policy.enabled:
        return []
    return ["--server.maxUploadSize", str(policy.server_upload_mib()), "--client.showErrorDetails", "none"]


def command(policy: Policy, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "streamlit", "run", "app.py", *streamlit_options(policy), *extra]


def main(argv: list[str] | None = None) -> None:
    args = command(policy_from_env(), sys.argv[1:] if argv is None else argv)
    os.execv(args[0], args)  # the same process: a supervisor's pid stays Streamlit's


if __name__ == "__main__":
    main()
