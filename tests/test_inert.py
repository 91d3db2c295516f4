"""Every string from a file, a link or a server is inert, and every number from outside is bounded.

For each file format kvviz reads — a run trace, a Shrink record, a Shrink sweep, a vLLM watch, a
pasted vLLM log, a pasted config.json — every string field (and every dict key a file names) of a
real document is replaced, one field at a time, by a payload of Markdown, HTML and a spreadsheet
formula. The reader either refuses the file in a sentence or accepts it; the accepted payloads
all go in one document, which the page that shows such a file draws (Streamlit's AppTest, the
functions the pages call). Asserted: no Markdown or HTML of a payload reaches an element that
renders it (every Markdown element, alert, caption, label, help text, st.html and the HTML
reports), no CSV cell kvviz writes starts a formula, and no page ends in an exception.

Every number field is likewise replaced by values far out of range (2**64, 1e308, a 400-digit
literal, -1): the reader refuses in a sentence, or the page draws without an exception.
"""
from __future__ import annotations

import copy
import csv
import io
import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.core import assets
from kvviz.app import ui
from kvviz.core.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
TRACES = assets.TRACES
REPLAY = str(ROOT / "app_pages" / "replay.py")


# ------------------------------------------------------------------ payloads
def payload(i: int) -> str:
    """Markdown, Streamlit directives, LaTeX, HTML and a formula, all numbered `i`."""
    return (f'=HYPERLINK("https://x.invalid/{i}") «{i}» **b{i}** [l{i}](https://x.invalid/l{i}) '
            f"![m{i}](https://x.invalid/m{i}.png) <b>h{i}</b> :red[c{i}] $x{i}$ `k{i}`")


def markers(i: int) -> list[str]:
    """What payload `i` looks like where it was not escaped."""
    return [f"**b{i}**", f"[l{i}](", f"![m{i}](", f"<b>h{i}</b>", f":red[c{i}]", f"$x{i}$", f"`k{i}`"]


PAYLOAD_ID = re.compile(r"«(\d+)»")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
HUGE = {"2**64": str(2**64), "1e308": "1e308", "400 digits": "9" * 400, "-1": "-1"}


# ------------------------------------------------------------------ walking a document
def leaves(doc, path=()):
    """(pattern, kind) of every string or number leaf and every dict key; a list's items share
    one pattern ('*'), as do the decimal keys of a dict ('#')."""
    found = {}

    def walk(node, path):
        if isinstance(node, dict):
            numbered = node and all(isinstance(k, str) and k.isdecimal() for k in node)
            for key, value in node.items():
                step = "#" if numbered else key
                found.setdefault((*path, ("key", step)), "key")
                walk(value, (*path, step))
        elif isinstance(node, list):
            for item in node:
                walk(item, (*path, "*"))
        elif isinstance(node, str):
            found.setdefault(path, "str")
        elif isinstance(node, (int, float)) and not isinstance(node, bool):
            found.setdefault(path, "number")

    walk(doc, tuple(path))
    return list(found.items())


def replaced(doc, pattern, value):
    """A copy of `doc` with every leaf (or key) the pattern names set to `value`."""
    doc = copy.deepcopy(doc)

    def go(node, rest):
        if not rest:
            return value
        head, tail = rest[0], rest[1:]
        if isinstance(head, tuple):  # ("key", k): rename the key(s)
            if not isinstance(node, dict):
                return node
            keys = [k for k in node if k.isdecimal()] if head[1] == "#" else [head[1]]
            for k in [k for k in keys if k in node][:1]:
                node[value] = node.pop(k)
            return node
        if head == "*":
            return [go(item, tail) for item in node] if isinstance(node, list) else node
        if head == "#":
            return {k: go(v, tail) for k, v in node.items()} if isinstance(node, dict) else node
        if isinstance(node, dict) and head in node:  # (a key renamed before: nothing left to set)
            node[head] = go(node[head], tail)
        return node

    return go(doc, pattern)


def with_literal(doc, pattern, literal: str) -> str:
    """The JSON text of `doc` with the number leaves `pattern` names written as `literal`."""
    mark = "KVVIZ_NUMBER_MARK"
    return json.dumps(replaced(doc, pattern, mark)).replace(f'"{mark}"', literal)


# ------------------------------------------------------------------ what a page renders
PLAIN = {"text", "code", "json", "dataframe", "table", "arrow_table", "arrow_data_frame", "vega_lite_chart",
         "arrow_vega_lite_chart", "plotly_chart", "empty", "divider"}
NOT_RENDERED = {"value", "default", "raw_value", "raw_values", "id", "form_id", "spec", "datasets", "data",
                "url", "placeholder", "format", "file_name", "mime_type", "deploy_params"}
PLAIN_OPTIONS = {"selectbox", "multiselect", "select_slider", "slider"}


def strings_of(message, skip=frozenset()):
    """Every string field of a protobuf message, recursively, but the names in `skip`."""
    for field, value in message.ListFields():
        if field.name in skip or field.name in NOT_RENDERED:
            continue
        repeated = not isinstance(value, (str, bytes)) and not hasattr(value, "ListFields") and hasattr(value, "__len__")
        values = list(value) if repeated else [value]
        for v in values:
            if isinstance(v, str):
                yield field.name, v
            elif hasattr(v, "ListFields"):
                yield from strings_of(v, skip)


def nodes(node):
    yield node
    for child in getattr(node, "children", {}).values():
        yield from nodes(child)


def rendered(at: AppTest) -> list[tuple[str, str, str]]:
    """(element type, field, text) of every string an element renders as Markdown or HTML."""
    out = []
    for node in nodes(at._tree):
        kind, proto = getattr(node, "type", None), getattr(node, "proto", None)
        if proto is None or not hasattr(proto, "ListFields") or kind in PLAIN:
            continue
        skip = {"options"} if kind in PLAIN_OPTIONS else set()
        out += [(kind, name, text) for name, text in strings_of(proto, frozenset(skip))]
    return out


def autolinked(text: str, i: int) -> bool:
    """Whether payload `i`'s bare URL is still one GitHub-flavoured Markdown links (escaping its
    colon does not stop that: tests/test_inert.py's own finding)."""
    return re.search(rf"https\\?://x\\?\.invalid/[lm]?{i}\b", text) is not None


def leaks(texts: list[tuple[str, str, str]], ids) -> list[str]:
    """Each payload whose Markdown or HTML survived into rendered text, with where."""
    out = []
    for kind, field, text in texts:
        for i in ids:
            hits = [m for m in markers(i) if m in text] if kind != "html" else \
                [m for m in markers(i) if m == f"<b>h{i}</b>" and m in text]
            if kind != "html" and autolinked(text, i):
                hits.append("a bare URL GFM links")
            if hits:
                out.append(f"payload {i} in {kind}.{field}: {hits}")
    return out


def seen(texts, at: AppTest | None = None) -> set[int]:
    """Payload numbers that reached the page at all (escaped or in plain elements)."""
    found = {int(m) for _, _, text in texts for m in PAYLOAD_ID.findall(text)}
    if at is not None:
        for node in nodes(at._tree):
            if getattr(node, "type", None) in ("text", "code"):
                found |= {int(m) for m in PAYLOAD_ID.findall(str(node.value))}
            if getattr(node, "type", None) == "dataframe":
                found |= {int(m) for m in PAYLOAD_ID.findall(node.value.to_csv())}
    return found


def formula_cells(text: str) -> list[str]:
    """Cells of a CSV document that a spreadsheet would run as a formula."""
    return [cell for row in csv.reader(io.StringIO(text)) for cell in row
            if cell.startswith(FORMULA_START) and not NUMBER.match(cell)]


# ------------------------------------------------------------------ the formats
def refused(read, data) -> bool:
    """True when `read` refuses `data` in a sentence (a UserError); any other error fails."""
    try:
        read(data)
    except UserError:
        return True
    return False


def strings_accepted(doc, read) -> tuple[list[dict], list, list]:
    """(documents holding every accepted payload: one for the values, one for the keys (a renamed
    key hides the values below it), one for each payload accepted alone only; the payloads'
    numbers; the patterns refused)."""
    accepted, refusals, docs = [], [], []
    found = list(enumerate(leaves(doc)))
    for kind in ("str", "key"):
        combined = copy.deepcopy(doc)
        for i, (pattern, _) in [f for f in found if f[1][1] == kind]:
            attempt = replaced(combined, pattern, payload(i))
            if not refused(read, json.dumps(attempt)):
                combined = attempt
            else:
                alone = replaced(doc, pattern, payload(i))
                if refused(read, json.dumps(alone)):
                    refusals.append(pattern)
                    continue
                docs.append(alone)
            accepted.append(i)
        docs.insert(0, combined)
    return docs, accepted, refusals


def refusal_text(read, data) -> str:
    try:
        read(data)
    except UserError as err:
        return str(err)
    raise AssertionError("not refused")


def replay_page(tmp_path, monkeypatch, data: str | bytes, name: str = "payload") -> AppTest:
    path = tmp_path / f"{name}.json"
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    monkeypatch.setattr(ui, "example_traces", lambda: {name: path})
    return AppTest.from_file(REPLAY, default_timeout=180).run()


def read_trace(data):
    from kvviz.core.trace import Trace, check_run_meta
    trace = Trace.from_json(data)
    check_run_meta(trace)
    return trace


def read_shrink_record(data):
    from kvviz.shrink import trace
    return trace.from_json(data)


def read_sweep(data):
    from kvviz.shrink import sweep
    return sweep.from_json(data)


def read_watch(data):
    from kvviz.vllm.trace import Recording
    return Recording.from_json(data)


def small_trace() -> dict:
    """The shipped trace, its events cut to the first 12 (the page's figures stay consistent)."""
    doc = json.loads((TRACES / "smollm2-135m-cpu-fp32.json").read_text())
    keep = {e.get("step") for e in doc["events"] if e.get("step", 0) < 12}
    doc["events"] = [e for e in doc["events"] if e.get("step") in keep]
    return doc


def watch_doc() -> dict:
    from vllm_payloads import recording_of_capture
    rec = recording_of_capture()
    rec.batches, rec.scrapes = rec.batches[:60], rec.scrapes[:20]
    for batch in rec.batches:  # every request tagged, so that session_id is a field too
        for event in batch.batch.events:
            if hasattr(event, "session_id"):
                event.session_id = "client-session"
    rec.meta["servers"] = {"http://127.0.0.1:8000": {"model": "m", "model_root": "/x", "version": "0.32.0",
                                                     "sources": {"0": {"endpoint": "tcp://*:5557"}}}}
    rec.notes.append(__import__("kvviz.vllm.trace", fromlist=["NoteRecord"]).NoteRecord(1.0, "http://127.0.0.1:8000", "a note"))
    return json.loads(rec.to_json())


FILES = {  # format -> (a real document, the reader the pages use)
    "trace": (small_trace, read_trace),
    "shrink record": (lambda: json.loads((TRACES / "smollm2-135m-shrink-snapkv.json").read_text()), read_shrink_record),
    "shrink sweep": (lambda: json.loads((assets.FOLDER / "shrink_sweep_smollm2.json").read_text()), read_sweep),
    "vllm watch": (watch_doc, read_watch),
}


@pytest.fixture(scope="module")
def accepted_files():
    """format -> (the document holding every accepted payload, their numbers, the patterns refused)."""
    return {fmt: strings_accepted(doc(), read) for fmt, (doc, read) in FILES.items()}


@pytest.mark.slow
@pytest.mark.parametrize("fmt", list(FILES))
def test_every_string_field_is_read_or_refused_in_a_sentence(fmt, accepted_files):
    doc, _ = FILES[fmt]
    _, accepted, refusals = accepted_files[fmt]
    strings = [p for p, kind in leaves(doc()) if kind in ("str", "key")]
    assert len(accepted) + len(refusals) == len(strings)
    assert accepted, f"no string field of a {fmt} accepts text: the test would see nothing"


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["trace", "shrink record", "vllm watch"])
def test_replay_of_a_file_full_of_payloads_renders_none(fmt, accepted_files, tmp_path, monkeypatch):
    docs, accepted, _ = accepted_files[fmt]
    reached = set()
    for n, doc in enumerate(docs):
        at = replay_page(tmp_path, monkeypatch, json.dumps(doc), f"payload{n}")
        assert not at.exception, [e.value for e in at.exception]
        texts = rendered(at)
        assert not leaks(texts, accepted)
        reached |= seen(texts, at)
    assert reached & set(accepted), "no payload reached the page: the test saw nothing"


@pytest.mark.slow
def test_a_sweep_full_of_payloads_renders_none(accepted_files):
    docs, accepted, _ = accepted_files["shrink sweep"]

    def page(data):
        from kvviz.shrink import panel, sweep
        panel.draw_sweep(sweep.from_json(data), "uploaded")

    reached = set()
    for doc in docs:
        at = AppTest.from_function(page, args=(json.dumps(doc),), default_timeout=60).run()
        assert not at.exception, [e.value for e in at.exception]
        texts = rendered(at)
        assert not leaks(texts, accepted)
        reached |= seen(texts, at)
    assert reached & set(accepted)


@pytest.mark.slow
def test_reports_of_files_full_of_payloads_hold_no_markup(accepted_files):
    from kvviz.live import report as live_report
    from kvviz.shrink import report as shrink_report
    trace_docs, trace_ids, _ = accepted_files["trace"]
    html = "".join(live_report.html_report(read_trace(json.dumps(doc))) for doc in trace_docs)
    record_docs, record_ids, _ = accepted_files["shrink record"]
    for doc in record_docs:
        rec = read_shrink_record(json.dumps(doc))
        html += shrink_report.html_report(rec.result, rec.prompt_pieces, rec.model)
    assert not leaks([("html", "report", html)], trace_ids + record_ids)
    assert {int(m) for m in PAYLOAD_ID.findall(html)} & set(trace_ids + record_ids)


@pytest.mark.slow
def test_csv_downloads_of_files_full_of_payloads_start_no_formula(accepted_files):
    from kvviz.live import report as live_report
    from kvviz.vllm import request_views
    from kvviz.vllm.trace import states_at
    trace_docs, _, _ = accepted_files["trace"]
    tables = [t for doc in trace_docs for t in live_report.csv_tables(read_trace(json.dumps(doc))).values()]
    watch_docs, _, _ = accepted_files["vllm watch"]
    for doc in watch_docs:
        for state in states_at(read_watch(json.dumps(doc))).values():
            tables.append(request_views.csv_bytes(request_views.requests_frame(state)).decode())
    assert any(PAYLOAD_ID.search(t) for t in tables), "no payload reached a CSV: the test saw nothing"
    assert [formula_cells(t) for t in tables] == [[] for _ in tables]


# ------------------------------------------------------------------ the planner's pasted texts
PLANNER = str(ROOT / "app_pages" / "planner.py")
CONFIG = {  # a Llama-3.1 config.json (its sizes made small: quick to build), every field it has
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16", "hidden_act": "silu",
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0, "tie_word_embeddings": False, "bos_token_id": 128000, "eos_token_id": 128001,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "quantization_config": {"quant_method": "bitsandbytes", "bnb_4bit_quant_type": "nf4", "load_in_4bit": True,
                            "bnb_4bit_compute_dtype": "bfloat16"},
    "transformers_version": "4.43.0", "name": "x", "_name_or_path": "meta-llama/Llama-3.1-8B",
}
LOG_LINES = [  # a start-up log with every figure the reader takes (tests/planner/test_vllm_log.py's sources)
    "(APIServer pid=1) INFO 07-06 22:50:34 [api_utils.py:273] non-default args: {'model_tag': 'x', 'dtype': "
    "'bfloat16', 'max_model_len': 131072, 'block_size': 16, 'tensor_parallel_size': 1, 'kv_cache_dtype': 'fp8', "
    "'max_num_batched_tokens': 8192, 'max_num_seqs': 256, 'gpu_memory_utilization': 0.9}",
    "(EngineCore pid=107) INFO 07-06 22:50:46 [core.py:114] Initializing a V1 LLM engine (v0.24.0) with config: model='x'",
    "(EngineCore pid=107) INFO [gpu_worker.py:508] Model loading took 14.99 GiB memory",
    "(EngineCore pid=107) INFO Memory profiling takes 18.17 seconds. Total non KV cache memory: 17.12GiB; torch peak "
    "memory increase: 1.89GiB; non-torch forward increase memory: 0.25GiB; weights memory: 14.99GiB.",
    "(EngineCore pid=107) INFO Estimated CUDA graph memory: 0.84 GiB total",
    "(EngineCore pid=107) INFO 07-06 22:52:09 [gpu_worker.py:508] Available KV cache memory: 5.98 GiB",
    "(EngineCore pid=107) INFO 07-06 22:52:09 [kv_cache_utils.py:2146] GPU KV cache size: 567,978 tokens",
    "(EngineCore pid=107) INFO 07-06 22:52:09 [kv_cache_utils.py:2147] Maximum concurrency for 131,072 tokens per "
    "request: 4.33x",
    "# GPU blocks: 35498, # CPU blocks: 2048",
]
FIGURE = re.compile(r"-?[0-9][0-9,]*(?:\.[0-9]+)?")


def read_config(text):
    from kvviz.planner import frames
    return frames.model_from_pasted_config(text)


def read_log(text):
    from kvviz.planner import vllm_log
    return vllm_log.parse_log(text)


def planner_page(config: str = "", log: str = "", hosted: bool = False, monkeypatch=None) -> AppTest:
    if hosted:
        monkeypatch.setenv("KVVIZ_HOSTED", "1")
    at = AppTest.from_file(PLANNER, default_timeout=120)
    if config:
        at.session_state["plan_source"] = "Paste config.json"
        at.session_state["plan_config"] = config
    if log:
        at.session_state["plan_vllm_log"] = log
    return at.run()


@pytest.fixture(scope="module")
def accepted_config():
    return strings_accepted(CONFIG, lambda data: read_config(data))


@pytest.mark.slow
def test_a_pasted_config_full_of_payloads_renders_none(accepted_config):
    docs, accepted, refusals = accepted_config
    assert accepted and len(accepted) + len(refusals) == len([p for p, k in leaves(CONFIG) if k in ("str", "key")])
    reached = set()
    for doc in docs:
        at = planner_page(config=json.dumps(doc))
        assert not at.exception, [e.value for e in at.exception]
        texts = rendered(at)
        assert not leaks(texts, accepted)
        reached |= seen(texts, at)
    assert reached & set(accepted)
    for i, (pattern, kind) in enumerate(leaves(CONFIG)):  # each refusal: a sentence quoting none of it
        if pattern in refusals:
            text = refusal_text(read_config, json.dumps(replaced(CONFIG, pattern, payload(i))))
            assert f"«{i}»" not in text and "x.invalid" not in text, (pattern, text)


def log_with_payloads() -> tuple[str, list[int]]:
    """The log with every figure of every line, one line at a time, replaced by a payload."""
    lines, ids = list(LOG_LINES), []
    for n, line in enumerate(LOG_LINES):
        lines[n] = FIGURE.sub(lambda m: payload(1000 + n), line) + " " + payload(2000 + n)
        ids += [1000 + n, 2000 + n]
    return "\n".join(LOG_LINES + lines), ids


@pytest.mark.slow
def test_a_pasted_log_full_of_payloads_renders_none():
    log, ids = log_with_payloads()
    read_log(log)  # still a log: its real lines are read
    at = planner_page(log=log)
    assert not at.exception, [e.value for e in at.exception]
    assert not leaks(rendered(at), ids)


# ------------------------------------------------------------------ numbers from outside
LIBRARY_WORDS = ("Exceeds the limit", "integer string conversion", "Traceback", "Expected `", "AxiosError",
                 "object has no attribute", "OverflowError", "cannot convert float")


def numbers_accepted(doc, read, literal: str) -> tuple[list[str], list, list[str]]:
    """(JSON texts holding every number field the reader accepts as `literal`: all at once, then
    each accepted alone only; the patterns accepted; the refusal sentences)."""
    accepted, sentences, texts = [], [], []
    combined = copy.deepcopy(doc)
    marks = {}
    for i, (pattern, kind) in enumerate(leaves(doc)):
        if kind != "number":
            continue
        mark = f"KVVIZ_MARK_{i}"
        attempt = replaced(combined, pattern, mark)
        text = json.dumps(attempt)
        for m in [*marks, mark]:
            text = text.replace(f'"{m}"', literal)
        try:
            read(text)
            combined, marks[mark] = attempt, pattern
            accepted.append(pattern)
            continue
        except UserError:
            pass
        alone = with_literal(doc, pattern, literal)
        try:
            read(alone)
            texts.append(alone)
            accepted.append(pattern)
        except UserError as err:
            sentences.append(str(err))
    text = json.dumps(combined)
    for m in marks:
        text = text.replace(f'"{m}"', literal)
    return [text, *texts], accepted, sentences


NUMBER_FILES = ["trace", "shrink record", "shrink sweep", "vllm watch"]


@pytest.mark.slow
@pytest.mark.parametrize("fmt", NUMBER_FILES)
@pytest.mark.parametrize("huge", list(HUGE))
def test_every_number_field_out_of_range_is_refused_in_a_sentence_or_drawn(fmt, huge, tmp_path, monkeypatch):
    doc, read = FILES[fmt]
    texts, accepted, sentences = numbers_accepted(doc(), read, HUGE[huge])
    assert not [s for s in sentences if any(w in s for w in LIBRARY_WORDS)]
    for n, text in enumerate(texts[:6]):
        if fmt == "shrink sweep":
            def page(data):
                from kvviz.shrink import panel, sweep
                panel.draw_sweep(sweep.from_json(data), "uploaded")
            at = AppTest.from_function(page, args=(text,), default_timeout=60).run()
        else:
            at = replay_page(tmp_path, monkeypatch, text, f"numbers{n}")
        assert not at.exception, (huge, [e.value for e in at.exception])
        assert not [e.value for e in at.error if any(w in e.value for w in LIBRARY_WORDS)]


def log_lines_with(figure: str) -> list[str]:
    """The log, once per figure of each line, that figure written as `figure`."""
    out = []
    for n, line in enumerate(LOG_LINES):
        for match in FIGURE.finditer(line):
            changed = line[:match.start()] + figure + line[match.end():]
            out.append("\n".join(LOG_LINES[:n] + [changed] + LOG_LINES[n + 1:]))
    return out


LOG_HUGE = {**HUGE, "309 digits, a decimal": "9" * 309 + ".5", "5,000 digits": "9" * 5000, "0": "0"}


@pytest.mark.parametrize("huge", list(LOG_HUGE))
def test_every_figure_of_a_pasted_log_out_of_range_is_refused_in_a_sentence(huge):
    from kvviz.planner import vllm_log
    for log in log_lines_with(LOG_HUGE[huge]):
        try:
            facts = read_log(log)
        except vllm_log.LogError as err:
            assert not any(w in str(err) for w in LIBRARY_WORDS), str(err)
            continue
        for name, (low, high) in vllm_log.BOUNDS.items():  # what is read is within the bounds
            value = getattr(facts, name)
            assert value is None or low <= value <= high, (name, value)


@pytest.mark.slow
def test_a_share_link_whose_pasted_log_holds_a_huge_figure_is_a_sentence():
    """Issue 41: a 309-digit KV figure overflowed to infinity and round(inf) crashed the page;
    a 5,000-digit count showed Python's 'Exceeds the limit (4300 digits)'."""
    for figure in ("9" * 309 + ".5", "9" * 5000):
        at = AppTest.from_file(PLANNER, default_timeout=120)
        at.query_params["plan_vllm_log"] = f"Available KV cache memory: {figure} GiB\nGPU KV cache size: {figure} tokens"
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        shown = [w.value for w in at.warning] + [e.value for e in at.error]
        assert any("characters long" in s for s in shown), shown
        assert not [s for s in shown if any(w in s for w in LIBRARY_WORDS)]


def with_setting(name: str, value: int) -> str:
    """The log with its non-default arg `name` set to `value`."""
    return re.sub(rf"'{name}': [0-9]+", f"'{name}': {value}", "\n".join(LOG_LINES))


def test_a_pasted_log_s_settings_are_read_within_the_page_s_bounds(monkeypatch):
    """Issue 41: the log's max_model_len, block size and TP were planned past the page's caps."""
    from kvviz.app import hosted
    from kvviz.planner import vllm_log
    caps = hosted.Policy(enabled=True)
    long_context = with_setting("max_model_len", caps.max_plan_tokens * 4)
    assert read_log(long_context).max_model_len == caps.max_plan_tokens * 4  # your own machine: planned
    monkeypatch.setenv("KVVIZ_HOSTED", "1")
    with pytest.raises(vllm_log.LogError, match=f"this hosted kvviz allows {caps.max_plan_tokens:,}"):
        read_log(long_context)
    with pytest.raises(vllm_log.LogError, match="TP × PP × DP is 4,096; this hosted kvviz allows 512"):
        read_log(with_setting("tensor_parallel_size", 64).replace("Initializing", "pipeline_parallel_size=64 Initializing"))
    for name, value in (("tensor_parallel_size", 65), ("block_size", 2**17)):
        with pytest.raises(vllm_log.LogError, match=f"{name} = {value:,}; kvviz plans with {name} from 1"):
            read_log(with_setting(name, value))


@pytest.mark.slow
def test_a_hosted_planner_page_says_why_it_will_not_plan_a_pasted_log(monkeypatch):
    from kvviz.app import hosted
    caps = hosted.Policy(enabled=True)
    at = planner_page(log=with_setting("max_model_len", caps.max_plan_tokens * 4), hosted=True, monkeypatch=monkeypatch)
    assert not at.exception
    shown = [w.value for w in at.warning]
    assert any(ui.inert(f"this hosted kvviz allows {caps.max_plan_tokens:,}") in s for s in shown), shown


@pytest.mark.slow
@pytest.mark.parametrize("huge", list(HUGE) + ["1.5", "0"])
def test_every_number_of_a_pasted_config_is_refused_in_kvviz_s_words_or_read(huge):
    """Issue 41: a transformers fragment quoted a pasted config's value ("… with value 1e308 …")."""
    for pattern, kind in leaves(CONFIG):
        if kind != "number":
            continue
        try:
            read_config(with_literal(CONFIG, pattern, HUGE.get(huge, huge)))
        except UserError as err:
            text = str(err)
            assert not any(w in text for w in LIBRARY_WORDS), text
            assert "with value" not in text and (HUGE.get(huge, huge) not in text or "it is" in text), text


def test_a_sweep_file_cannot_multiply_its_chart_rows_or_hold_2_64_bytes():
    """Issue 41: 500 full-cache rows × 500 curves became 251,000 chart rows (+458 MB), and
    `bytes` = 2**64 passed validation and crashed the chart."""
    from kvviz.core.trace import TraceError
    doc = json.loads((assets.FOLDER / "shrink_sweep_smollm2.json").read_text())
    full = next(r for r in doc["rows"] if r["kind"] == "full")
    press = next(r for r in doc["rows"] if r["kind"] == "press")
    many = {**doc, "rows": [full, full] + [{**press, "press": f"p{i}"} for i in range(100)]}
    with pytest.raises(TraceError, match="more than one full-cache row"):
        read_sweep(json.dumps(many))
    with pytest.raises(TraceError, match="expected a list of length <= 200|length <= 200"):
        read_sweep(json.dumps({**doc, "rows": [full] + [{**press, "press": f"p{i}"} for i in range(500)]}))
    with pytest.raises(TraceError, match=r"\$\.rows\[0\]\.bytes: expected a whole number <= "):
        read_sweep(json.dumps({**doc, "rows": [{**full, "bytes": 2**64}]}))
