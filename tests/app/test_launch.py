"""`python -m kvviz.app.launch` (kvviz.app.launch): `streamlit run app.py` with the hosted policy's
options on the command line in hosted mode only, the caller's options after them, the process
replaced by Streamlit's; and every way kvviz starts Streamlit (make run / present, the Docker image)
goes through it. The launched server refusing a large upload: tests/app/test_uploads.py."""
import sys

from bench.app_server import ROOT
from kvviz.app import hosted, launch

CAPS = hosted.Policy(enabled=True)


def test_the_launcher_sets_it_on_the_command_line_in_hosted_mode_only():
    hosted_cmd = launch.command(CAPS, ["--server.port", "9000"])
    assert hosted_cmd[1:5] == ["-m", "streamlit", "run", "app.py"]
    assert hosted_cmd[5:] == ["--server.maxUploadSize", "12", "--client.showErrorDetails", "none",
                              "--server.port", "9000"]
    assert launch.command(hosted.Policy(), []) == [sys.executable, "-m", "streamlit", "run", "app.py"]


def test_every_way_kvviz_starts_streamlit_goes_through_the_launcher():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("run", "present"):
        recipe = makefile.split(f"\n{target}: ", 1)[1].split("\n\n", 1)[0]
        assert "-m kvviz.app.launch" in recipe and "streamlit run" not in recipe, recipe
    docker_cmd = [line for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("CMD")]
    assert docker_cmd and '"-m", "kvviz.app.launch"' in docker_cmd[0]
    assert "MAX_UPLOAD_SIZE" not in (ROOT / "Dockerfile").read_text()  # no second value to drift
    assert "uploads.apply(rules)" in (ROOT / "app.py").read_text()  # hosts that run `streamlit run` themselves


def test_main_replaces_the_process_with_streamlit_and_passes_the_options_on(monkeypatch):
    execs = []
    monkeypatch.setattr(launch.os, "execv", lambda path, args: execs.append((path, args)))
    monkeypatch.setenv("KVVIZ_HOSTED", "1")
    monkeypatch.delenv("KVVIZ_HOSTED_MODELS", raising=False)
    launch.main(["--server.port", "9001"])
    monkeypatch.delenv("KVVIZ_HOSTED")
    launch.main([])
    hosted_args, own_args = execs[0][1], execs[1][1]
    assert [path for path, _ in execs] == [sys.executable, sys.executable]  # argv[0] is what runs
    assert hosted_args[-2:] == ["--server.port", "9001"] and "--client.showErrorDetails" in hosted_args
    assert own_args == [sys.executable, "-m", "streamlit", "run", "app.py"]
