"""Token text for a watched engine's blocks (kvviz.vllm.tokens), from a small word-level
tokenizer.json written here: only a loopback server's own folder or the allowlist is opened,
ids a tokenizer cannot decode are shown as ids, and the chat endpoint's ids come from the
model's template."""
import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from kvviz.vllm import tokens

VOCAB = {"[UNK]": 0, "system": 1, "user": 2, "assistant": 3, "you": 4, "are": 5, "kind": 6, "hello": 7}
TEMPLATE = ("{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
            "{% if add_generation_prompt %}assistant{% endif %}")


@pytest.fixture
def folder(tmp_path):
    """A model folder with a tokenizer.json of VOCAB (words split on whitespace)."""
    tok = Tokenizer(models.WordLevel(VOCAB, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / "tokenizer.json"))
    return tmp_path


def test_a_loopback_server_s_own_tokenizer_decodes_its_blocks(folder, tmp_path_factory):
    text = tokens.block_text_fn("http://127.0.0.1:8000", str(folder))
    assert text([4, 5, 6]) == "you are kind"
    assert text([4, -1]) == "4 -1"  # an id no vocabulary has: the ids as they are
    assert tokens.tokenizer_file("http://localhost:8000", str(folder)) == folder / "tokenizer.json"
    assert tokens.tokenizer_file("http://10.0.0.7:8000", str(folder)) is None  # another machine's path
    assert tokens.tokenizer_file("http://127.0.0.1:8000", "") is None
    assert tokens.block_text_fn("http://127.0.0.1:8000", str(tmp_path_factory.mktemp("empty"))) is None


def test_a_file_that_is_no_tokenizer_shows_ids(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{}")
    assert tokens.block_text_fn("http://127.0.0.1:8000", str(tmp_path)) is None


def test_a_named_model_is_decoded_only_from_the_allowlist(folder):
    allowlist = {"tiny-words": folder}
    assert tokens.allowlisted_text_fn("tiny-words", allowlist)([7, 4]) == "hello you"
    assert tokens.allowlisted_text_fn("other", allowlist) is None


def test_the_chat_ids_follow_the_model_s_template(folder):
    allowlist = {"tiny-words": folder}
    assert not tokens.has_chat_template("tiny-words", allowlist) and tokens.chat_ids(
        "tiny-words", "you are kind", "hello", allowlist) is None
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE}))
    assert tokens.has_chat_template("tiny-words", allowlist)
    # "system you are kind user hello assistant"
    assert tokens.chat_ids("tiny-words", "you are kind", "hello", allowlist) == [1, 4, 5, 6, 2, 7, 3]
    assert tokens.chat_ids("tiny-words", "", "hello", allowlist) == [2, 7, 3]  # no system turn
    assert tokens.chat_ids("other", "you", "hello", allowlist) is None


def test_the_template_file_wins_over_the_config_s(folder):
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE}))
    (folder / "chat_template.jinja").write_text("{{ messages[-1]['content'] }}")
    assert tokens.chat_template(folder) == "{{ messages[-1]['content'] }}"
    (folder / "chat_template.jinja").unlink()
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": [{"name": "tool_use"}]}))
    assert tokens.chat_template(folder) is None  # a list of named templates: not one kvviz renders
