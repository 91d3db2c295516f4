"""The hosted server as kvviz starts it (`python -m kvviz.app.launch`, KVVIZ_HOSTED=1, one server for
the module): Streamlit's own upload endpoint, reached straight over HTTP as a crafted client would
(not through a page's box), refuses a request over the policy's size, and what it holds is bounded
per session and per server (kvviz.app.uploads); a tab open across a restart is told so in a
sentence and reloads, in Chromium (kvviz.app.restart)."""
import asyncio
import http.cookiejar
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest
import requests
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager
from streamlit.runtime.uploaded_file_manager import UploadedFileRec
from starlette.exceptions import HTTPException

from bench.app_server import ROOT, free_port, server_env
from browser_kit import ARTIFACTS, launched_chromium, open_sidebar, require_chromium, tiny_as_default
from kvviz.app import hosted, launch, ui, uploads

CAPS = hosted.Policy(enabled=True)
MIB = 2**20
PORTS = range(9171, 9181)


def test_the_server_size_follows_the_policy():
    assert CAPS.server_upload_mib() == 12 and hosted.Policy().server_upload_mib() == ui.SERVER_MAX_UPLOAD_MIB
    box_mb = ui.uploader_limit_mb(CAPS.max_upload_bytes, CAPS.server_upload_mib())
    assert CAPS.max_upload_bytes < box_mb * 1e6 and (box_mb + 1) * MIB < CAPS.server_upload_mib() * MIB


def test_the_launcher_sets_it_on_the_command_line_in_hosted_mode_only():
    hosted_cmd = launch.command(CAPS, ["--server.port", "9000"])
    assert hosted_cmd[1:5] == ["-m", "streamlit", "run", "app.py"]
    assert hosted_cmd[5:] == ["--server.maxUploadSize", "12", "--client.showErrorDetails", "none",
                              "--server.port", "9000"]
    assert launch.command(hosted.Policy(), []) == [sys.executable, "-m", "streamlit", "run", "app.py"]


def rec(size: int) -> UploadedFileRec:
    return UploadedFileRec(file_id=uuid.uuid4().hex, name="x.json", type="application/json", data=b"0" * size)


def test_a_session_keeps_only_its_newest_uploads_within_two_caps():
    manager = MemoryUploadedFileManager("/upload")
    uploads.bound(manager, cap_bytes=1000)
    uploads.bound(manager, cap_bytes=1000)  # idempotent: wrapped once
    files = [rec(900) for _ in range(5)]
    for f in files:
        manager.add_file("s1", f)
    held = manager.file_storage["s1"]
    assert list(held) == [f.file_id for f in files[-2:]]  # the newest two: 1,800 <= 2 × 1,000
    manager.add_file("s2", rec(900))
    assert len(manager.file_storage["s2"]) == 1  # another session's files are its own


def test_the_server_refuses_uploads_past_its_total():
    manager = MemoryUploadedFileManager("/upload")
    uploads.bound(manager, cap_bytes=1000)
    for session in range(uploads.SERVER_FILES):
        manager.add_file(f"s{session}", rec(1000))
    with pytest.raises(HTTPException) as refused:
        manager.add_file("one more", rec(10))
    assert refused.value.status_code == 413
    manager.remove_session_files("s0")  # a session ends: room again
    manager.add_file("one more", rec(10))


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """`python -m kvviz.app.launch` in hosted mode (tiny default model), stopped by pid after the module."""
    require_chromium()
    cache = tmp_path_factory.mktemp("kvviz-cache-uploads")
    tiny_as_default(cache)
    port = free_port(PORTS)
    ARTIFACTS.mkdir(exist_ok=True)
    env = server_env({"KVVIZ_HOSTED": "1", "KVVIZ_CACHE_DIR": str(cache), "KVVIZ_TORCH_THREADS": "1"})
    with open(ARTIFACTS / "uploads-streamlit.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "kvviz.app.launch", "--server.port", str(port),
                                 "--server.headless", "true", "--server.address", "127.0.0.1"],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, proc, timeout_s=120)
            yield url, proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=20)


def wait_healthy(url: str, proc, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the server exited"
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"no answer from {url} within {timeout_s} s")


def xsrf_token(url: str) -> str:
    jar = http.cookiejar.CookieJar()
    urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar)).open(f"{url}/_stcore/health", timeout=10)
    return next(c.value for c in jar if c.name == "_streamlit_xsrf")


async def upload_statuses(url: str, sizes: list[int]) -> list[int]:
    """Open a session as a browser would (websocket, one script run), then PUT files of `sizes` bytes
    straight to Streamlit's upload endpoint; their HTTP statuses."""
    import websockets
    xsrf = xsrf_token(url)
    async with websockets.connect(url.replace("http", "ws") + "/_stcore/stream", subprotocols=["streamlit", xsrf],
                                  additional_headers={"Cookie": f"_streamlit_xsrf={xsrf}", "Origin": url},
                                  max_size=None, open_timeout=10) as ws:
        hello = BackMsg()
        hello.rerun_script.query_string = ""
        hello.rerun_script.page_script_hash = ""
        await ws.send(hello.SerializeToString())
        session_id = await asyncio.wait_for(new_session_id(ws), timeout=60)
        return [await asyncio.to_thread(put, url, xsrf, session_id, size) for size in sizes]


async def new_session_id(ws) -> str:
    while True:
        msg = ForwardMsg()
        msg.ParseFromString(await ws.recv())
        if msg.WhichOneof("type") == "new_session":
            return msg.new_session.initialize.session_id


def put(url: str, xsrf: str, session_id: str, size: int) -> int:
    response = requests.put(f"{url}/_stcore/upload_file/{session_id}/{uuid.uuid4().hex}",
                            files={"file": ("trace.json", b"{" + b" " * (size - 2) + b"}", "application/json")},
                            headers={"X-Xsrftoken": xsrf}, cookies={"_streamlit_xsrf": xsrf}, timeout=60)
    return response.status_code


@pytest.mark.slow
def test_a_direct_upload_over_the_cap_is_refused_by_the_server(launched):
    url, proc = launched
    cmdline = open(f"/proc/{proc.pid}/cmdline", "rb").read().split(b"\0")  # the launcher exec'd Streamlit
    assert [b"--server.maxUploadSize", b"12"] == cmdline[cmdline.index(b"--server.maxUploadSize"):][:2]
    statuses = asyncio.run(upload_statuses(url, [5 * MIB, 13 * MIB, 60 * 10**6]))
    assert statuses == [204, 413, 413], statuses


def test_every_way_kvviz_starts_streamlit_goes_through_the_launcher():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("run", "present"):
        recipe = makefile.split(f"\n{target}: ", 1)[1].split("\n\n", 1)[0]
        assert "-m kvviz.app.launch" in recipe and "streamlit run" not in recipe, recipe
    docker_cmd = [line for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("CMD")]
    assert docker_cmd and '"-m", "kvviz.app.launch"' in docker_cmd[0]
    assert "MAX_UPLOAD_SIZE" not in (ROOT / "Dockerfile").read_text()  # no second value to drift
    assert "uploads.apply(rules)" in (ROOT / "app.py").read_text()  # hosts that run `streamlit run` themselves


@pytest.fixture(scope="module")
def browser():
    yield from launched_chromium()


@pytest.mark.slow
@pytest.mark.browser
def test_a_tab_open_across_a_restart_is_told_and_reloads_once(launched, browser):
    url, _ = launched
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        page.goto(url + "/replay", timeout=60_000)  # a light first page; Serving needs code it has not loaded
        page.wait_for_function("() => window.kvvizReloadOnRestart === true", timeout=60_000)  # installed
        page.get_by_test_id("stExpandSidebarButton").wait_for(timeout=60_000)  # hosted: the sidebar starts closed
        open_sidebar(page)
        page.evaluate("window.beforeRestart = true")
        page.route("**/static/js/**", lambda route: route.abort())  # the files gone, as after a restart
        page.get_by_test_id("stSidebarNav").get_by_text("Serving").click()  # needs element code not loaded yet
        page.wait_for_selector("#kvviz-restart-note", timeout=30_000)
        assert page.inner_text("#kvviz-restart-note") == "kvviz was restarted on the server: reloading this page…"
        assert "Failed to fetch" not in page.inner_text("body")
        page.unroute("**/static/js/**")  # the server is back
        page.wait_for_function("() => window.beforeRestart === undefined && window.kvvizReloadOnRestart === true",
                               timeout=60_000)  # reloaded, and the listener is back
        page.evaluate("window.afterReload = true")
        page.evaluate("window.dispatchEvent(new Event('vite:preloadError', {cancelable: true}))")  # again, at once
        assert page.inner_text("#kvviz-restart-note") == "kvviz was restarted on the server: reload this page to go on."
        page.wait_for_timeout(1500)  # past the reload delay: no second reload within 30 s
        assert page.evaluate("window.afterReload") is True
    finally:
        page.close()
