"""The hosted server as kvviz starts it (`python -m kvviz.app.launch`, KVVIZ_HOSTED=1, one server for
the module; the launcher's command line alone: tests/app/test_launch.py): Streamlit's own upload
endpoint, reached straight over HTTP as a crafted client would (not through a page's box), refuses a
request over the policy's size, and what it holds is bounded per session, per visitor and per server,
shared fairly (kvviz.app.uploads); a tab open across a restart is told so in a sentence and reloads,
in Chromium (kvviz.app.restart; it stays here to share this module's server and browser, the
script's own checks are in tests/app/test_restart.py)."""
import asyncio
import concurrent.futures
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

from bench.app_server import IDLE, ROOT, free_port, server_env
from browser_kit import ARTIFACTS, launched_chromium, open_sidebar, require_chromium, tiny_as_default
from kvviz.core import assets
from kvviz.app import hosted, ui, uploads

CAPS = hosted.Policy(enabled=True)
MIB = 2**20
PORTS = range(9171, 9181)


def test_the_server_size_follows_the_policy():
    assert CAPS.server_upload_mib() == 12 and hosted.Policy().server_upload_mib() == ui.SERVER_MAX_UPLOAD_MIB
    box_mb = ui.uploader_limit_mb(CAPS.max_upload_bytes, CAPS.server_upload_mib())
    assert CAPS.max_upload_bytes < box_mb * 1e6 and (box_mb + 1) * MIB < CAPS.server_upload_mib() * MIB


def rec(size: int) -> UploadedFileRec:
    return UploadedFileRec(file_id=uuid.uuid4().hex, name="x.json", type="application/json", data=b"0" * size)


def bounded_manager(clients: dict[str, str] | None = None, cap_bytes: int = 1000) -> MemoryUploadedFileManager:
    """A manager bounded as in hosted mode; `clients`: session -> client address (else its own)."""
    manager = MemoryUploadedFileManager("/upload")
    uploads.bound(manager, cap_bytes=cap_bytes, client_of=lambda s: (clients or {}).get(s, s))
    return manager


def held(manager) -> dict[str, int]:
    return {s: sum(len(f.data) for f in files.values()) for s, files in manager.file_storage.items() if files}


def test_a_session_keeps_only_its_newest_uploads_within_two_caps():
    manager = bounded_manager()
    uploads.bound(manager, cap_bytes=1000)  # idempotent: wrapped once
    files = [rec(900) for _ in range(5)]
    for f in files:
        manager.add_file("s1", f)
    assert list(manager.file_storage["s1"]) == [f.file_id for f in files[-2:]]  # the newest two: 1,800 <= 2 × 1,000
    assert uploads.notice("s1", manager) is None  # its own box's older file: nothing to tell
    manager.add_file("s2", rec(900))
    assert len(manager.file_storage["s2"]) == 1  # another session's files are its own


def test_one_visitor_s_tabs_share_one_budget_and_a_tab_refused_is_told_why():
    """Issue 41: four tabs of one visitor, two full uploads each, filled the whole server."""
    tabs = {f"tab{i}": "203.0.113.7" for i in range(4)}
    manager = bounded_manager({**tabs, "other": "198.51.100.2"})
    for tab in tabs:
        for _ in range(2):
            manager.add_file(tab, rec(1000))  # never an HTTP error
    assert held(manager) == {"tab0": 2000, "tab1": 1000}  # CLIENT_FILES uploads' worth, the first kept
    told = uploads.notice("tab3", manager)
    assert told.startswith("This upload was not kept: your open kvviz tabs hold 0.0 MiB of uploads already")
    assert uploads.notice("tab0", manager) is None  # the tab whose uploads were kept
    manager.add_file("other", rec(1000))  # another visitor is never refused for it
    assert held(manager)["other"] == 1000 and uploads.notice("other", manager) is None
    manager.remove_session_files("tab0")  # a tab closes: its visitor has room again
    manager.add_file("tab3", rec(1000))
    assert held(manager)["tab3"] == 1000 and uploads.notice("tab3", manager) is None


def test_the_server_ceiling_refuses_in_a_sentence_and_makes_room_when_a_tab_closes():
    manager = bounded_manager()  # every session its own client
    for i in range(uploads.SERVER_FILES // 2):
        manager.add_file(f"v{i}", rec(1000))
        manager.add_file(f"v{i}", rec(1000))
    manager.add_file("late", rec(10))  # the ceiling: not an HTTPException, a sentence for the tab
    assert "late" not in held(manager)
    assert uploads.notice("late", manager).startswith("This upload was not kept: this server keeps at most")
    manager.remove_session_files("v1")  # a tab closes: room again, its notes and address forgotten
    manager.add_file("late", rec(10))
    assert held(manager)["late"] == 10 and uploads.notice("late", manager) is None
    assert "v1" not in manager.kvviz_shares.clients


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


async def upload_statuses(url: str, sizes: list[int], forwarded: str | None = None) -> list[int]:
    """Open a session as a browser would (websocket, one script run), then PUT files of `sizes` bytes
    straight to Streamlit's upload endpoint; their HTTP statuses. `forwarded`: the visitor's address
    as a trusted proxy on loopback forwards it (X-Forwarded-For)."""
    import websockets
    xsrf = xsrf_token(url)
    headers = {"Cookie": f"_streamlit_xsrf={xsrf}", "Origin": url, **({"X-Forwarded-For": forwarded} if forwarded else {})}
    async with websockets.connect(url.replace("http", "ws") + "/_stcore/stream", subprotocols=["streamlit", xsrf],
                                  additional_headers=headers,
                                  max_size=None, open_timeout=10) as ws:
        hello = BackMsg()
        hello.rerun_script.query_string = ""
        hello.rerun_script.page_script_hash = ""
        await ws.send(hello.SerializeToString())
        session_id = await asyncio.wait_for(new_session_id(ws), timeout=60)
        reading = asyncio.create_task(read_until_closed(ws))
        statuses = [await asyncio.to_thread(put, url, xsrf, session_id, size) for size in sizes]
        await ws.close()
        await reading
        return statuses


async def read_until_closed(ws) -> None:
    """Read what the server sends, as a browser does, until the socket closes. Left unread, the
    session's script run piled its messages up and the server never answered the client's close:
    each call waited out the client's close timeout (10 s; 60 of the shared-uploads test's 70 s)."""
    import websockets
    try:
        async for _ in ws:
            pass
    except websockets.ConnectionClosed:
        pass


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
    statuses = uploaded(url, [5 * MIB, 13 * MIB, 60 * 10**6])  # on its own thread: a browser test's loop may run here
    assert statuses == [204, 413, 413], statuses


@pytest.fixture(scope="module")
def browser():
    yield from launched_chromium()


@pytest.mark.slow
@pytest.mark.browser
def test_a_tab_open_across_a_restart_is_told_and_reloads_once(launched, browser):
    url, _ = launched
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        page.goto(url + "/engine", timeout=60_000)  # hosted: a sentence and a link; Serving needs code not loaded yet
        page.wait_for_function("() => window.kvvizReloadOnRestart === true", timeout=60_000)  # installed
        page.get_by_test_id("stExpandSidebarButton").wait_for(timeout=60_000)  # hosted: the sidebar starts closed
        open_sidebar(page)
        page.evaluate("window.beforeRestart = true")
        # The note shows for RELOAD_AFTER_MS before the page reloads itself: a loaded machine's
        # polling can miss that second, so the page keeps the note's first text where it survives
        # the reload (sessionStorage).
        page.evaluate("""new MutationObserver((_, seen) => {
            const note = document.getElementById("kvviz-restart-note");
            if (note) { sessionStorage.setItem("noteSeen", note.textContent); seen.disconnect(); }
        }).observe(document.body, {childList: true, subtree: true, characterData: true})""")
        page.route("**/static/js/**", lambda route: route.abort())  # the files gone, as after a restart
        page.get_by_test_id("stSidebarNav").get_by_text("Serving").click()  # needs element code not loaded yet
        page.wait_for_function("() => sessionStorage.getItem('noteSeen') !== null", timeout=90_000)
        assert page.evaluate("sessionStorage.getItem('noteSeen')") == "kvviz was restarted on the server: reloading this page…"
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


EXAMPLE = assets.TRACES / "smollm2-135m-cpu-fp32.json"


def uploaded(url: str, sizes: list[int], forwarded: str | None = None) -> list[int]:
    """`upload_statuses` on a thread of its own (playwright's sync API holds this thread's loop)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, upload_statuses(url, sizes, forwarded)).result(timeout=120)


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.long("eight full uploads from another visitor, then this visitor's tab in Chromium")
def test_another_visitor_cannot_fill_the_uploads_and_a_refused_tab_is_told_under_its_box(launched, browser, tmp_path):
    """Issue 41: another visitor's four tabs, two full uploads each, took the whole server and this
    visitor's upload got HTTP 413 ("AxiosError ..." in the box); now that visitor holds its own
    share only, and this visitor's tab past its own share is told why in a sentence."""
    url, _ = launched
    full = CAPS.max_upload_bytes
    for _ in range(4):
        assert uploaded(url, [full, full], forwarded="203.0.113.7") == [204, 204]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(url + "/replay?replay_source=Upload+a+file", timeout=60_000)
        page.wait_for_selector(IDLE, timeout=60_000)
        page.locator("input[type=file]").set_input_files(str(EXAMPLE))
        page.get_by_text("Recorded with", exact=False).first.wait_for(timeout=60_000)  # kept and replayed
        assert "AxiosError" not in page.inner_text("body")
        assert uploaded(url, [full, full]) == [204, 204]  # this visitor's other tabs: 20 MiB
        assert uploaded(url, [4 * MIB]) == [204]
        bigger = tmp_path / "bigger.json"  # the box lets its first file go: 20 + 4.5 MiB, past 24
        bigger.write_bytes(b"{" + b" " * (4 * MIB + MIB // 2) + b"}")
        page.locator("input[type=file]").set_input_files(str(bigger))
        warning = page.get_by_text("This upload was not kept: your open kvviz tabs hold", exact=False)
        warning.wait_for(timeout=30_000)
        box, told = page.get_by_test_id("stFileUploader").bounding_box(), warning.bounding_box()
        assert told["y"] >= box["y"] + box["height"] - 1 and told["height"] > 0  # under the box, on screen
        assert "AxiosError" not in page.inner_text("body")
    finally:
        page.screenshot(path=str(ARTIFACTS / "uploads-shared.png"))
        page.close()
