"""A client's request log (kvviz.vllm.request_log): read strictly, each bad line named, and tailed
by whole lines while it is being written."""
import json

import pytest

from kvviz.vllm.request_log import LogTail, RequestLogError, parse_lines


def test_the_request_log_is_read_strictly_and_tailed_by_whole_lines(tmp_path):
    good = {"name": "a", "url": "http://h:1", "sent_s": 1.0, "done_s": 2.0, "prompt_tokens": 10,
            "cached_tokens": 0}
    with pytest.raises(RequestLogError, match="line 2 of the request log"):
        parse_lines(json.dumps(good) + "\n" + json.dumps({**good, "prompt_tokens": -1}))
    with pytest.raises(RequestLogError, match="line 1 .* answered before it was sent"):
        parse_lines(json.dumps({**good, "done_s": 0.5}))
    path = tmp_path / "log.jsonl"
    tail = LogTail(path)
    assert tail.read_new() == []  # not written yet
    path.write_text(json.dumps(good) + "\n" + json.dumps(good)[:10])  # a line still being written
    assert [r.name for r in tail.read_new()] == ["a"]
    with open(path, "a") as f:
        f.write(json.dumps(good)[10:] + "\n")
    assert [r.name for r in tail.read_new()] == ["a"] and tail.read_new() == []
