"""HTTP to a vLLM server: its base URL checked, `/metrics`, `/kv_event_sources`, `/version`,
`/v1/models`. Stdlib only; every failure becomes an `EngineError` whose message names the URL and
says what went wrong, fit to show a user as is. Only the URL the user gave is contacted.
"""
from __future__ import annotations

import ipaddress
import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from kvviz.core.errors import UserError

DEFAULT_URL = "http://127.0.0.1:8000"
TIMEOUT_S = 3.0
MAX_BYTES = 16 * 2**20  # a /metrics page is ~60 KB; anything this big is not one


class EngineError(UserError):
    """Something about an engine URL that stops kvviz reading it; the message is for the user."""


class EngineUnreachable(EngineError):
    """Nothing answers at the URL (refused, timed out, unknown host): worth retrying."""


class NotVllm(EngineError):
    """Something answers, but it is not a vLLM server (or not one kvviz can read)."""


class EventsDisabled(EngineError):
    """A vLLM server started without KV events (`--kv-events-config`)."""


def normalize_url(url: str) -> str:
    """'localhost:8000/' -> 'http://localhost:8000'; EngineError for anything but http(s)://host."""
    url = url.strip()
    if not url:
        raise EngineError("enter the base URL of a vLLM server, e.g. http://127.0.0.1:8000")
    if "://" not in url:
        url = "http://" + url
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EngineError(f"{url!r} is not an http(s) URL with a host, e.g. http://127.0.0.1:8000")
    if parts.query or parts.fragment or parts.username:
        raise EngineError(f"{url!r}: give only scheme, host, port (and path), no query or credentials")
    try:
        parts.port
    except ValueError:
        raise EngineError(f"{url!r} has an invalid port") from None
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def url_host(url: str) -> str:
    return urllib.parse.urlsplit(url).hostname or ""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def get_text(url: str, path: str, timeout_s: float = TIMEOUT_S) -> str:
    """GET url+path as text, every failure an EngineError saying which."""
    full = url + path
    try:
        with urllib.request.urlopen(full, timeout=timeout_s) as resp:  # noqa: S310 (checked scheme)
            body = resp.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise NotVllm(f"{full} answered HTTP {exc.code} ({exc.reason}); is this a vLLM server?") from None
    except urllib.error.URLError as exc:
        raise EngineUnreachable(f"cannot reach {url}: {reason_text(exc.reason)}") from None
    except (TimeoutError, socket.timeout):
        raise EngineUnreachable(f"{url} did not answer within {timeout_s:g} s") from None
    except OSError as exc:
        raise EngineUnreachable(f"cannot reach {url}: {exc}") from None
    except ValueError:  # urllib refusing the URL ("Invalid IPv6 URL"): said in kvviz's words
        raise EngineUnreachable(f"cannot reach {url}: it is not a URL urllib can open") from None
    if len(body) > MAX_BYTES:
        raise NotVllm(f"{full} sent more than {MAX_BYTES // 2**20} MiB; not a vLLM endpoint")
    return body.decode("utf-8", "replace")


def reason_text(reason) -> str:
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused (is the server running, on this port?)"
    if isinstance(reason, socket.gaierror):
        return "unknown host"
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return "timed out"
    return str(reason)


def get_json(url: str, path: str, timeout_s: float = TIMEOUT_S):
    text = get_text(url, path, timeout_s)
    try:
        return json.loads(text)
    except ValueError:
        raise NotVllm(f"{url}{path} did not answer JSON; is this a vLLM server?") from None


@dataclass(frozen=True)
class ServerInfo:
    """What a vLLM server says about itself."""

    url: str
    version: str
    model: str  # the served model name
    model_root: str  # what it loaded: a local folder or a Hub id
    sources: dict  # DP rank (str) -> resolved KV-event publisher settings


def server_info(url: str, timeout_s: float = TIMEOUT_S) -> ServerInfo:
    """Version, model and KV-event sources; NotVllm / EventsDisabled / EngineUnreachable."""
    version = get_json(url, "/version", timeout_s)
    if not isinstance(version, dict) or "version" not in version:
        raise NotVllm(f"{url}/version did not say a vLLM version; is this a vLLM server?")
    models = get_json(url, "/v1/models", timeout_s)
    data = models.get("data") if isinstance(models, dict) else None
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    sources = event_sources(url, timeout_s)
    return ServerInfo(url, str(version["version"]), str(first.get("id", "")),
                      str(first.get("root", "")), sources)


def event_sources(url: str, timeout_s: float = TIMEOUT_S) -> dict:
    """`/kv_event_sources`: {rank: settings}; EventsDisabled when it lists no zmq publisher."""
    try:
        sources = get_json(url, "/kv_event_sources", timeout_s)
    except NotVllm:
        raise NotVllm(f"{url} has no /kv_event_sources endpoint; kvviz reads vLLM 0.32 or newer") from None
    if not isinstance(sources, dict):
        raise NotVllm(f"{url}/kv_event_sources did not answer an object; is this vLLM 0.32?")
    live = {str(k): v for k, v in sources.items() if isinstance(v, dict) and v.get("publisher") == "zmq"
            and v.get("enable_kv_cache_events")}
    if not live:
        raise EventsDisabled(
            f"{url} publishes no KV-cache events. Start vLLM with --enable-prefix-caching and "
            "--kv-events-config '{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\","
            "\"endpoint\":\"tcp://127.0.0.1:5557\",\"replay_endpoint\":\"tcp://127.0.0.1:5558\"}'")
    return live
