import json

import numpy as np
import pytest

from impl.model import f32cache
from impl.model.llama import Llama
from impl.model.session import Session

SHA = "ab" * 32


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(f32cache.ENV_DIR, str(tmp_path / "w"))
    return tmp_path / "w"


def test_a_model_rebuilt_from_the_cache_computes_the_same_bits(tiny, cache_dir):
    entry = f32cache.store(SHA, tiny.config, tiny.state(), '{"tok": 1}')
    assert entry is not None and (entry / "weights.f32").exists()
    config, state, tok = f32cache.load(SHA)
    assert config == tiny.config and tok == '{"tok": 1}'
    again = Llama.from_state(config, state)
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    assert np.array_equal(Session(tiny).prefill(ids), Session(again).prefill(ids))


def test_a_changed_byte_or_other_weights_make_the_entry_ignored(tiny, cache_dir):
    entry = f32cache.store(SHA, tiny.config, tiny.state(), "{}")
    assert f32cache.load("cd" * 32) is None  # keyed by the GGUF's sha256
    data = entry / "weights.f32"
    raw = bytearray(data.read_bytes())
    raw[5000] ^= 1
    data.write_bytes(bytes(raw))
    assert f32cache.load(SHA) is None


def test_an_old_format_is_ignored(tiny, cache_dir):
    entry = f32cache.store(SHA, tiny.config, tiny.state(), "{}")
    man = json.loads((entry / "manifest.json").read_text())
    man["format"] = 0
    (entry / "manifest.json").write_text(json.dumps(man))
    assert f32cache.load(SHA) is None


def test_the_cache_can_be_switched_off(tiny, monkeypatch):
    monkeypatch.setenv(f32cache.ENV_DIR, "off")
    assert f32cache.store(SHA, tiny.config, tiny.state(), "{}") is None
    assert f32cache.load(SHA) is None


def test_the_tokenizer_survives_its_json_round_trip(smollm2):
    from impl.model.tokenizer import BPETokenizer

    again = BPETokenizer.from_json(smollm2.tokenizer.to_json())
    for text in ["The capital of France is", "x = 12345\n<|im_end|>", "naïve café"]:
        assert again.encode(text) == smollm2.tokenizer.encode(text)


def test_an_edit_to_the_loading_code_invalidates_the_entry(tiny, cache_dir, monkeypatch):
    f32cache.store(SHA, tiny.config, tiny.state(), "{}")
    assert f32cache.load(SHA) is not None
    monkeypatch.setattr(f32cache, "code_fingerprint", lambda: "0" * 64)
    assert f32cache.load(SHA) is None
