"""A float32 cache of the dequantised weights, so a warm load takes well under a second.

Reading the GGUF costs seconds (metadata parsing and Q4_1 dequantisation);
the cache is one raw float32 file holding every array the forward reads,
in its final layout, plus the tokenizer as tokenizers' own JSON and a
manifest. Loading memory-maps the file (processes share its pages) after
checking its sha256 against the manifest (hashed through that map, again
only when the file was written since it was last verified: ``verified.json``
keeps its size, inode, mtime and ctime from then).

Layout of ``<cache dir>/<gguf sha256[:16]>/``:
    manifest.json   format, the GGUF's sha256, the producing code's sha256,
                    the config, and per array
                    its name, byte offset and shape; the data file's sha256;
                    the GGUF's tensor index (gguf_load.tensor_index: where
                    quantized decode finds each tensor's blocks in the GGUF)
    weights.f32     the arrays back to back, each at a 4096-byte offset
    tokenizer.json  the BPE tokenizer (tokenizers.Tokenizer.to_str())

The folder is written under a temporary name and renamed into place, so
an interrupted write never looks like a cache. Any mismatch (format, GGUF
hash, data hash, size) means the entry is ignored and rebuilt.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import mmap
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from impl.model.config import ModelConfig
from impl.model.weights import verified_sha256

FORMAT = 2  # 2: the manifest carries the GGUF tensor index
ALIGN = 4096
# NOTE: an entry is keyed by the GGUF's sha256 AND by the source of the code
# that turns a GGUF into these arrays: an edit to the loader (say, the q/k
# un-permutation) must rebuild the cache, never be masked by it.
PRODUCERS = ("gguf_load.py", "llama.py", "config.py", "tokenizer.py", "f32cache.py", "../linear.py")
ENV_DIR = "KVPROOF_WEIGHTS_CACHE"  # a folder, or "off" to disable the cache
VERIFIED = "verified.json"  # the data file's stat key when it last hashed to the manifest's sha256
GGUF_STAMPS = "gguf-verified"  # <root>/gguf-verified/<sha256 of the GGUF's path>.json


def cache_root() -> Path | None:
    """Where entries live: $KVPROOF_WEIGHTS_CACHE, else <checkout>/.cache/weights; None = disabled."""
    env = os.environ.get(ENV_DIR)
    if env:
        return None if env.lower() in ("off", "0", "no") else Path(env)
    return Path(__file__).resolve().parents[2] / ".cache" / "weights"


def code_fingerprint() -> str:
    """sha256 over the source files that produce the cached arrays, and the ``gguf`` package that decodes them.

    NOTE: impl dequantises through ``gguf.quants``; a ``gguf`` upgrade that
    decoded differently must not be served the arrays an older one made.
    """
    from importlib import metadata

    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for rel in PRODUCERS:
        h.update(rel.encode() + b"\0" + (here / rel).read_bytes())
    try:
        h.update(b"gguf\0" + metadata.version("gguf").encode())
    except metadata.PackageNotFoundError:  # NOTE: a source checkout of gguf; its quants source decides
        import gguf.quants

        h.update(b"gguf.quants\0" + Path(gguf.quants.__file__).read_bytes())
    return h.hexdigest()


def _config_from(d: dict) -> ModelConfig:
    if isinstance(d.get("rope_theta"), list):
        d = {**d, "rope_theta": tuple(d["rope_theta"])}
    return ModelConfig(**d)


def gguf_stamp(path: Path) -> Path | None:
    """Where the verified sha256 of the GGUF at ``path`` is kept (None: the cache is disabled)."""
    root = cache_root()
    if root is None:
        return None
    folder = root / GGUF_STAMPS
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder / (hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()[:24] + ".json")


def _manifest(gguf_sha256: str) -> tuple[Path, dict] | None:
    """(entry folder, manifest) when an entry for this GGUF and this code exists, else None."""
    root = cache_root()
    if root is None:
        return None
    entry = root / gguf_sha256[:16]
    try:
        man = json.loads((entry / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    if (
        not isinstance(man, dict)
        or man.get("format") != FORMAT
        or man.get("gguf_sha256") != gguf_sha256
        or man.get("code_sha256") != code_fingerprint()
    ):
        return None
    return entry, man


def load(gguf_sha256: str):
    """(config, state dict of memory-mapped arrays, tokenizer JSON) or None when absent/invalid."""
    found = _manifest(gguf_sha256)
    if found is None:
        return None
    entry, man = found
    try:
        data = entry / "weights.f32"
        if data.stat().st_size != man["data_bytes"]:
            return None
        with open(data, "rb") as fh:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        # NOTE: hashed through the very map the arrays view (read-only): no copy of the file through
        # read(). Hashed when the file changed since it was last verified (weights.verified_sha256:
        # size, inode, mtime, ctime), so a warm load no longer reads all of it.

        if verified_sha256(data, entry / VERIFIED, lambda _p: hashlib.sha256(mm).hexdigest()) != man["data_sha256"]:
            return None
        flat = np.frombuffer(mm, dtype=np.float32)  # keeps the map open while any array views it
        state = {}
        for name, off, shape in man["arrays"]:
            n = int(np.prod(shape))
            state[name] = flat[off // 4 : off // 4 + n].reshape(shape)
        return _config_from(man["config"]), state, (entry / "tokenizer.json").read_text()
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load_tensor_index(gguf_sha256: str) -> list[dict] | None:
    """The GGUF tensor index stored with the entry (gguf_load.tensor_index), or None."""
    found = _manifest(gguf_sha256)
    index = found[1].get("gguf_tensors") if found else None
    return index if isinstance(index, list) else None


def store(
    gguf_sha256: str,
    config: ModelConfig,
    state: dict[str, np.ndarray],
    tokenizer_json: str,
    tensor_index: list[dict] | None = None,
) -> Path | None:
    """Write an entry atomically; returns its folder, or None if the cache is disabled or unwritable.

    ``tensor_index``: the GGUF's (gguf_load.tensor_index), served back by :func:`load_tensor_index`."""
    root = cache_root()
    if root is None:
        return None
    entry = root / gguf_sha256[:16]
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=root))
        arrays, off = [], 0
        h = hashlib.sha256()
        with open(tmp / "weights.f32", "wb") as f:
            for name, a in state.items():
                pad = (-off) % ALIGN
                if pad:
                    f.write(b"\0" * pad)
                    h.update(b"\0" * pad)
                    off += pad
                b = np.ascontiguousarray(a, dtype=np.float32).tobytes()
                f.write(b)
                h.update(b)
                arrays.append((name, off, list(a.shape)))
                off += len(b)
            f.flush()
            os.fsync(f.fileno())
        (tmp / "tokenizer.json").write_text(tokenizer_json)
        man = {
            "format": FORMAT,
            "gguf_sha256": gguf_sha256,
            "code_sha256": code_fingerprint(),
            "config": dataclasses.asdict(config),
            "data_bytes": off,
            "data_sha256": h.hexdigest(),
            "arrays": arrays,
            "gguf_tensors": tensor_index,
        }
        (tmp / "manifest.json").write_text(json.dumps(man))
        if entry.exists():
            shutil.rmtree(entry, ignore_errors=True)
        os.replace(tmp, entry)
        return entry
    except OSError:
        shutil.rmtree(locals().get("tmp", root / ".none"), ignore_errors=True)
        return None
