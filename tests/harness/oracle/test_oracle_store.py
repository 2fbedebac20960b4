"""The oracle store: atomic export, hash checks, and skips that say why.

Every export here is a small synthetic one written in tmp_path through the
same ExportWriter the real export uses; no torch needed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from harness.errors import OracleCorrupt, OracleMissing, OracleStale
from harness.oracle import cli
from harness.oracle.fixtures import oracle_or_skip
from harness.oracle.prompts import EVICTION_SEGMENTS, GREEDY_NEW_TOKENS, REFERENCE_PROMPTS
from harness.oracle.store import (
    EVICTION_FIELDS,
    MANIFEST,
    PROMPT_FIELDS,
    ExportWriter,
    check_files,
    eviction_path,
    open_oracle,
    prompt_path,
    read_manifest,
)
from harness.project import command

EXPORT_COMMAND = command("oracle export")  # as it runs from here (the test's working directory)

FAKE_SHA = "ab" * 32
ROOT = Path(__file__).resolve().parents[3]
N_LAYERS, HIDDEN, VOCAB = 2, 4, 8


def write_synthetic_export(target: Path, weights_sha256: str = FAKE_SHA, seed: int = 0) -> dict:
    """A tiny export with the real prompt names and texts and random arrays."""
    rng = np.random.default_rng(seed)
    with ExportWriter(target) as w:
        prompts = []
        for name, text in REFERENCE_PROMPTS.items():
            t = 3
            w.save(prompt_path(name, "ids"), rng.integers(0, VOCAB, t, dtype=np.int32))
            w.save(prompt_path(name, "logits"), rng.standard_normal((t, VOCAB), dtype=np.float32))
            w.save(prompt_path(name, "hidden"), rng.standard_normal((N_LAYERS + 1, t, HIDDEN), dtype=np.float32))
            w.save(prompt_path(name, "hidden_last_raw"), rng.standard_normal((t, HIDDEN), dtype=np.float32))
            w.save(prompt_path(name, "argmax"), rng.integers(0, VOCAB, t, dtype=np.int32))
            w.save(prompt_path(name, "greedy"), rng.integers(0, VOCAB, GREEDY_NEW_TOKENS, dtype=np.int32))
            prompts.append({"name": name, "text": text, "n_tokens": t})
        for fld in EVICTION_FIELDS:
            w.save(eviction_path(fld), rng.integers(0, VOCAB, 4, dtype=np.int32))
        return w.commit(
            {
                "created_utc": "2025-01-01T00:00:00Z",
                "export_seconds": 0.1,
                "weights": {"file": "fake.gguf", "sha256": weights_sha256},
                "versions": {"python": "test"},
                "prompts": prompts,
                "eviction": {"segments": dict(EVICTION_SEGMENTS)},
            }
        )


@pytest.fixture
def export(tmp_path: Path) -> Path:
    target = tmp_path / "oracle"
    write_synthetic_export(target)
    return target


@pytest.fixture
def fake_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point KVPROOF_GGUF at a small file; returns its sha256."""
    from impl.model.weights import sha256_file

    path = tmp_path / "fake.gguf"
    path.write_bytes(b"GGUF not really")
    monkeypatch.setenv("KVPROOF_GGUF", str(path))
    return sha256_file(path)


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def data_files() -> list[str]:
    return [prompt_path(n, f) for n in REFERENCE_PROMPTS for f in PROMPT_FIELDS] + [
        eviction_path(f) for f in EVICTION_FIELDS
    ]


# ---------------------------------------------------------------- loading


def test_open_oracle_returns_the_arrays_that_were_written(tmp_path: Path) -> None:
    target = tmp_path / "oracle"
    write_synthetic_export(target, seed=7)
    rng = np.random.default_rng(7)
    first_ids = rng.integers(0, VOCAB, 3, dtype=np.int32)
    oracle = open_oracle(target, weights_sha256=FAKE_SHA)
    rec = oracle.prompt("capital")
    assert rec.text == REFERENCE_PROMPTS["capital"]
    np.testing.assert_array_equal(rec.ids, first_ids)
    assert rec.hidden.shape == (N_LAYERS + 1, 3, HIDDEN) and rec.hidden.dtype == np.float32
    assert not rec.logits.flags.writeable
    assert oracle.prompt_names == list(REFERENCE_PROMPTS)
    assert oracle.eviction().segments == EVICTION_SEGMENTS


def test_manifest_lists_every_data_file_with_sha256_shape_and_dtype(export: Path) -> None:
    manifest = read_manifest(export)
    assert sorted(manifest["files"]) == sorted(data_files())
    entry = manifest["files"][prompt_path("long", "hidden")]
    assert entry["shape"] == [N_LAYERS + 1, 3, HIDDEN] and entry["dtype"] == "<f4" and len(entry["sha256"]) == 64


# ---------------------------------------------------------------- verify


@pytest.mark.parametrize("rel", data_files())
def test_verify_catches_one_changed_byte_in_any_data_file(export: Path, rel: str, fake_weights: str) -> None:
    path = export / rel
    flip_byte(path, path.stat().st_size - 1)  # last byte of the array data
    problems = check_files(export, read_manifest(export))
    assert [(p.path, p.reason) for p in problems] == [(rel, "sha256 differs")]
    with pytest.raises(OracleCorrupt, match="sha256 differs"):
        open_oracle(export, weights_sha256=None)


def test_verify_command_names_each_changed_file_and_exits_1(
    export: Path, fake_weights: str, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest_path = export / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["weights"]["sha256"] = fake_weights
    manifest_path.write_text(json.dumps(manifest))
    assert cli.main(["verify", "--oracle-dir", str(export)]) == 0
    changed = [prompt_path("code", "logits"), eviction_path("poison_ids")]
    for rel in changed:
        flip_byte(export / rel, 0)  # inside the .npy header
    capsys.readouterr()
    assert cli.main(["verify", "--oracle-dir", str(export)]) == 1
    out = capsys.readouterr().out
    for rel in changed:
        assert f"FAIL {rel} (sha256 differs)" in out
    assert out.count("FAIL") == 2


def test_verify_command_exits_2_when_the_export_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["verify", "--oracle-dir", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "not found" in err and EXPORT_COMMAND in err and "Traceback" not in err


def test_a_deleted_data_file_is_named_as_missing(export: Path) -> None:
    (export / eviction_path("never_greedy")).unlink()
    assert [str(p) for p in check_files(export, read_manifest(export))] == [
        f"{eviction_path('never_greedy')} (missing)"
    ]


def test_a_broken_manifest_is_corrupt_not_missing(export: Path) -> None:
    (export / MANIFEST).write_text("{ not json")
    with pytest.raises(OracleCorrupt, match="unreadable"):
        read_manifest(export)


# ---------------------------------------------------------------- skips


def test_missing_export_skips_with_reason_and_the_command_that_fixes_it(tmp_path: Path) -> None:
    with pytest.raises(pytest.skip.Exception) as info:
        oracle_or_skip(tmp_path / "absent")
    msg = str(info.value)
    assert "OracleMissing" in msg and "not found" in msg
    assert f"{EXPORT_COMMAND} --oracle-dir {tmp_path / 'absent'}" in msg


def test_default_location_skip_names_the_plain_export_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVPROOF_ORACLE_DIR", str(tmp_path / "absent"))
    with pytest.raises(pytest.skip.Exception) as info:
        oracle_or_skip()
    assert (
        str(info.value)
        .rstrip()
        .endswith(f"Create it with: {EXPORT_COMMAND}  (about a minute; needs the oracle extra: torch, transformers)")
    )


def test_hash_mismatch_skips_with_a_reason_that_says_so(export: Path, fake_weights: str) -> None:
    rel = prompt_path("long", "logits")
    flip_byte(export / rel, 200)
    with pytest.raises(pytest.skip.Exception) as info:
        oracle_or_skip(export)
    msg = str(info.value)
    assert (
        "OracleCorrupt" in msg and "hash mismatch" in msg and f"{rel} (sha256 differs)" in msg and EXPORT_COMMAND in msg
    )


def test_export_for_other_weights_skips_as_stale(export: Path, fake_weights: str) -> None:
    with pytest.raises(pytest.skip.Exception) as info:
        oracle_or_skip(export)  # made for FAKE_SHA, current weights are fake_weights
    msg = str(info.value)
    assert "OracleStale" in msg and "other weights" in msg and fake_weights[:16] in msg


def test_changed_reference_prompts_make_the_export_stale(export: Path) -> None:
    manifest_path = export / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["prompts"][0]["text"] = "The capital of Spain is"
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(OracleStale, match="reference prompts differ"):
        open_oracle(export, weights_sha256=FAKE_SHA)


# ---------------------------------------------------------------- atomic write


def siblings(target: Path) -> list[str]:
    return sorted(p.name for p in target.parent.iterdir() if p.name != target.name)


def test_exception_mid_export_leaves_no_export_and_no_temp_folder(tmp_path: Path) -> None:
    target = tmp_path / "oracle"
    with pytest.raises(KeyboardInterrupt):
        with ExportWriter(target) as w:
            w.save(prompt_path("capital", "ids"), np.arange(3, dtype=np.int32))
            raise KeyboardInterrupt
    assert not target.exists()
    assert siblings(target) == []
    with pytest.raises(OracleMissing):
        read_manifest(target)


def test_exception_mid_reexport_keeps_the_old_export_intact(export: Path) -> None:
    before = read_manifest(export)
    with pytest.raises(RuntimeError):
        with ExportWriter(export) as w:
            w.save(prompt_path("capital", "ids"), np.arange(5, dtype=np.int32))
            raise RuntimeError("transformers failed")
    assert read_manifest(export) == before
    assert check_files(export, before) == []
    assert siblings(export) == []


def test_failed_swap_puts_the_old_export_back(export: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = read_manifest(export)
    real_replace = os.replace
    calls = []

    def replace(src: os.PathLike, dst: os.PathLike) -> None:
        calls.append((Path(src).name, Path(dst).name))
        if len(calls) == 2:  # the new folder's rename into place
            raise OSError("disk full")
        real_replace(src, dst)

    with pytest.raises(OSError, match="disk full"):
        with ExportWriter(export) as w:
            w.save(prompt_path("capital", "ids"), np.arange(5, dtype=np.int32))
            monkeypatch.setattr(os, "replace", replace)
            w.commit({"weights": {"sha256": FAKE_SHA}})
    monkeypatch.setattr(os, "replace", real_replace)
    assert read_manifest(export) == before and check_files(export, before) == []
    assert siblings(export) == []


def test_reexport_replaces_the_old_export_and_leaves_no_siblings(export: Path) -> None:
    old = read_manifest(export)
    new = write_synthetic_export(export, seed=1)
    assert read_manifest(export) == new != old
    assert siblings(export) == []


def test_killed_export_leaves_nothing_that_looks_complete(tmp_path: Path) -> None:
    target = tmp_path / "oracle"
    script = textwrap.dedent(
        f"""
        import sys, time
        import numpy as np
        from harness.oracle.store import ExportWriter
        with ExportWriter({str(target)!r}) as w:
            w.save("prompts/capital/ids.npy", np.arange(3, dtype=np.int32))
            print("saved", flush=True)
            time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "saved"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert not target.exists()
    leftovers = siblings(target)
    assert len(leftovers) == 1 and leftovers[0].startswith(".oracle.tmp-")
    assert not (tmp_path / leftovers[0] / MANIFEST).exists()
    with pytest.raises(OracleMissing):
        open_oracle(target, weights_sha256=None)
    write_synthetic_export(target)  # the next export cleans up after the dead one
    assert siblings(target) == []
    assert check_files(target, read_manifest(target)) == []


# ---------------------------------------------------------------- cli


def test_status_of_a_missing_export_says_so_with_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["status", "--oracle-dir", str(tmp_path / "absent")]) == 2
    out = capsys.readouterr().out
    assert "missing" in out and EXPORT_COMMAND in out


def test_status_says_whether_the_export_fits_the_current_weights(
    export: Path, fake_weights: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["status", "--oracle-dir", str(export)]) == 1
    out = capsys.readouterr().out
    assert "2025-01-01T00:00:00Z" in out and FAKE_SHA in out and "does not fit" in out and "other weights" in out
    write_synthetic_export(export, weights_sha256=fake_weights)
    assert cli.main(["status", "--oracle-dir", str(export)]) == 0
    assert "fits the current weights" in capsys.readouterr().out


def test_export_if_missing_does_nothing_when_a_valid_export_exists(
    tmp_path: Path, fake_weights: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "oracle"
    write_synthetic_export(target, weights_sha256=fake_weights)
    before = read_manifest(target)
    assert cli.main(["export", "--if-missing", "--oracle-dir", str(target)]) == 0
    assert "up to date" in capsys.readouterr().out
    assert read_manifest(target) == before


def test_missing_weights_are_a_clean_error_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KVPROOF_GGUF", str(tmp_path / "nowhere.gguf"))
    assert cli.main(["export", "--oracle-dir", str(tmp_path / "oracle")]) == 2
    err = capsys.readouterr().err
    assert "weights file not found" in err and "Traceback" not in err
    assert not (tmp_path / "oracle").exists()
