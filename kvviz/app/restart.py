"""A tab left open across a server restart or upgrade: told in a sentence, and reloaded once.

Streamlit's page loads the code for an element type the first time it draws one. After the server
restarted (or was upgraded: new file names), that load fails and Streamlit would show the browser's
"Failed to fetch dynamically imported module". Its loader announces the failure first, as a
cancelable `vite:preloadError` event on the window: kvviz answers it with a banner and one reload
(at most one every 30 s, so a server that stays down is not reloaded in a loop: the banner then
asks the visitor to reload). A fixed script; no text from anyone goes through it. kvviz.app.ui.presenter_style puts it on every
page inside the page's one stylesheet element (a second element would add a gap at the top).
"""
from __future__ import annotations

RELOAD_AFTER_MS = 1000  # long enough to read the banner
RELOAD_SCRIPT = """<script>
(() => {
  if (window.kvvizReloadOnRestart) return;
  window.kvvizReloadOnRestart = true;
  window.addEventListener("vite:preloadError", (event) => {
    event.preventDefault();
    if (window.kvvizReloading) return;  // one banner and one reload, however many files failed
    const last = Number(sessionStorage.getItem("kvvizReloadedAt") || 0);
    const again = Date.now() - last > 30000;
    let note = document.getElementById("kvviz-restart-note");
    if (!note) {
      note = document.createElement("div");
      note.id = "kvviz-restart-note";
      note.setAttribute("role", "alert");
      note.style.cssText = "position:fixed;top:0;left:0;right:0;z-index:1000000;padding:0.8rem;" +
        "background:#FFF4E5;color:#1F2933;font:1rem sans-serif;text-align:center";
      document.body.appendChild(note);
    }
    note.textContent = again ? "kvviz was restarted on the server: reloading this page…"
                             : "kvviz was restarted on the server: reload this page to go on.";
    if (again) {
      window.kvvizReloading = true;
      sessionStorage.setItem("kvvizReloadedAt", String(Date.now()));
      setTimeout(() => location.reload(), RELOAD_AFTER_MS);
    }
  });
})();
</script>""".replace("RELOAD_AFTER_MS", str(RELOAD_AFTER_MS))

