"""The oracle export on disk: write it atomically, check it, load it.

No torch here: witnesses load the reference through this module only.

Layout of an export folder (default ``.cache/smollm2-135m/`` under the
project root)::

    manifest.json                   format, versions, weights sha256, prompts,
                                    and every data file's sha256/shape/dtype
    prompts/<name>/ids.npy          (T,) int32, no BOS
    prompts/<name>/logits.npy       (T, vocab) float32
    prompts/<name>/hidden.npy       (n_layers+1, T, hidden) float32, as HF returns it
    prompts/<name>/hidden_last_raw.npy  (T, hidden) float32, last layer before final norm
    prompts/<name>/argmax.npy       (T,) int32, argmax of logits per position
    prompts/<name>/greedy.npy       (GREEDY_NEW_TOKENS,) int32
    eviction/{prefix,poison,query}_ids.npy, never_greedy.npy, poisoned_greedy.npy

An export counts as present only when ``manifest.json`` exists, and the
manifest is the last file written before the folder is renamed into place,
so an interrupted export never looks complete.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import OracleCorrupt, OracleMissing, OracleStale
from harness.execute.orphans import pid_alive
from harness.files import sha256_file
from harness.oracle.prompts import EVICTION_SEGMENTS, REFERENCE_PROMPTS
from harness.project import KVPROOF_HOME
from harness.project import command as run_command

FORMAT = "kvproof-oracle"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DEFAULT_SUBDIR = Path(".cache") / "smollm2-135m"
ENV_DIR = "KVPROOF_ORACLE_DIR"
EXPORT_COMMAND = "python run_obligations.py oracle export"

PROMPT_FIELDS = ("ids", "logits", "hidden", "hidden_last_raw", "argmax", "greedy")
EVICTION_FIELDS = ("prefix_ids", "poison_ids", "query_ids", "never_greedy", "poisoned_greedy")

RelPath = str  # a data file's path inside the export, "/"-separated


def resolve_oracle_dir(path: str | os.PathLike | None = None) -> Path:
    """Where the export lives: argument > ``KVPROOF_ORACLE_DIR`` > default."""
    if path is not None:
        return Path(path).expanduser().absolute()
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR]).expanduser().absolute()
    return KVPROOF_HOME / DEFAULT_SUBDIR


def export_command(root: Path) -> str:
    """The command that (re)creates the export at ``root``, as it runs from the working directory
    (:func:`harness.project.command`)."""
    command = run_command("oracle export")
    if root.absolute() == resolve_oracle_dir(None):
        return command
    return f"{command} --oracle-dir {root}"


def prompt_path(name: str, fld: str) -> RelPath:
    return f"prompts/{name}/{fld}.npy"


def eviction_path(fld: str) -> RelPath:
    return f"eviction/{fld}.npy"


# ---------------------------------------------------------------- writing


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ExportWriter:
    """Build an export in a hidden folder beside ``target``; ``commit`` swaps it in.

    Use as a context manager. Leaving the block without ``commit`` (an
    exception, Ctrl-C) removes the temporary folder; a kill leaves it behind
    under a name that is never read as an export, and the next writer for
    the same target removes it. An old export at ``target`` is renamed aside
    first, then removed, so at no moment does a half-written folder sit at
    ``target``.
    """

    def __init__(self, target: str | os.PathLike) -> None:
        self.target = Path(target).absolute()
        self.files: dict[RelPath, dict[str, Any]] = {}
        self.tmp: Path | None = None
        self.committed = False

    def _sibling(self, kind: str) -> Path:
        token = secrets.token_hex(4)
        return self.target.parent / f".{self.target.name}.{kind}-{os.getpid()}-{token}"

    def _remove_leftovers(self) -> None:
        pattern = re.compile(rf"^\.{re.escape(self.target.name)}\.(tmp|old)-(\d+)-[0-9a-f]+$")
        for p in self.target.parent.iterdir():
            m = pattern.match(p.name)
            if m and not pid_alive(int(m.group(2))):
                shutil.rmtree(p, ignore_errors=True)

    def __enter__(self) -> ExportWriter:
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self._remove_leftovers()
        self.tmp = self._sibling("tmp")
        self.tmp.mkdir()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.committed and self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def save(self, rel: RelPath, array: np.ndarray) -> None:
        """Write one array as .npy (no pickles) and note its sha256, shape, dtype."""
        assert self.tmp is not None and not self.committed, "save() outside the with block"
        assert rel.endswith(".npy") and rel not in self.files, rel
        array = np.ascontiguousarray(array)
        assert array.dtype != object, rel
        buf = io.BytesIO()
        np.save(buf, array, allow_pickle=False)
        data = buf.getvalue()
        path = self.tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        self.files[rel] = {
            "sha256": hashlib.sha256(data).hexdigest(),
            "shape": list(array.shape),
            "dtype": array.dtype.str,
            "bytes": len(data),
        }

    def commit(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Write manifest.json last, fsync, rename the folder into place; return the manifest."""
        assert self.tmp is not None and not self.committed
        body = {"format": FORMAT, "format_version": FORMAT_VERSION, **manifest, "files": self.files}
        with open(self.tmp / MANIFEST, "w", encoding="utf-8") as f:
            json.dump(body, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        for d in {(self.tmp / rel).parent for rel in self.files} | {self.tmp}:
            _fsync_dir(d)
        old = None
        if self.target.exists():
            old = self._sibling("old")
            os.replace(self.target, old)
        try:
            os.replace(self.tmp, self.target)
        except BaseException:
            if old is not None:  # put the previous export back
                os.replace(old, self.target)
            raise
        _fsync_dir(self.target.parent)
        self.committed = True
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return body


# ---------------------------------------------------------------- checking


@dataclass(frozen=True)
class FileMismatch:
    """One data file that does not match the manifest."""

    path: RelPath
    reason: str  # "missing", "sha256 differs", "size differs", ...

    def __str__(self) -> str:
        return f"{self.path} ({self.reason})"


def read_manifest(root: str | os.PathLike) -> dict[str, Any]:
    """The parsed manifest of the export at ``root``.

    Raises OracleMissing when there is no manifest, OracleCorrupt when it
    is not a kvproof oracle manifest, OracleStale when its format version
    is not the one this code reads.
    """
    root = Path(root)
    path = root / MANIFEST
    cmd = export_command(root)
    if not path.is_file():
        where = "does not exist" if not root.exists() else "has no manifest.json"
        raise OracleMissing(
            f"oracle export not found: oracle_dir={root} {where}. "
            f"Create it with: {cmd}  (about a minute; needs the oracle extra: torch, transformers)"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise OracleCorrupt(f"oracle manifest {path} is unreadable ({e}). Recreate it with: {cmd}") from None
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != FORMAT
        or not isinstance(manifest.get("files"), dict)
    ):
        raise OracleCorrupt(
            f"{path} is not a kvproof oracle manifest (format={FORMAT!r} expected). Recreate it with: {cmd}"
        )
    if manifest.get("format_version") != FORMAT_VERSION:
        raise OracleStale(
            f"oracle export at {root} has format_version={manifest.get('format_version')!r}; this kvproof "
            f"reads format_version={FORMAT_VERSION}. Re-export with: {cmd}"
        )
    return manifest


def check_files(root: str | os.PathLike, manifest: dict[str, Any], hashes: bool = True) -> list[FileMismatch]:
    """Every data file the manifest lists that is missing or differs.

    With ``hashes=False`` only existence and size are checked (fast).
    """
    root = Path(root)
    problems = []
    for rel, entry in manifest["files"].items():
        path = root / rel
        if not path.is_file():
            problems.append(FileMismatch(rel, "missing"))
        elif path.stat().st_size != entry.get("bytes"):
            problems.append(
                FileMismatch(rel, f"size differs: {path.stat().st_size} bytes, manifest says {entry.get('bytes')}")
            )
        elif hashes and sha256_file(path) != entry.get("sha256"):
            problems.append(FileMismatch(rel, "sha256 differs"))
    return problems


def stale_reasons(manifest: dict[str, Any], weights_sha256: str | None) -> list[str]:
    """Why an intact export does not fit the current weights and prompts ([] if it does)."""
    reasons = []
    made_from = manifest.get("weights", {}).get("sha256")
    if weights_sha256 is not None and made_from != weights_sha256:
        reasons.append(
            f"it was made from other weights: manifest weights.sha256={str(made_from)[:16]}..., "
            f"current weights sha256={weights_sha256[:16]}..."
        )
    prompts = {p.get("name"): p.get("text") for p in manifest.get("prompts", [])}
    if prompts != REFERENCE_PROMPTS:
        reasons.append("its reference prompts differ from harness/oracle/prompts.py")
    if manifest.get("eviction", {}).get("segments") != EVICTION_SEGMENTS:
        reasons.append("its eviction segments differ from harness/oracle/prompts.py")
    return reasons


_WEIGHTS_SHA_CACHE: dict[tuple[str, int, int], str] = {}


def current_weights(path: str | os.PathLike | None = None) -> tuple[Path, str]:
    """The weights file the project would load now, and its sha256.

    Raises impl.errors.WeightsMissing / WeightsCorrupt (user-ready messages).
    """
    from impl.model.weights import DEFAULT_SHA256, resolve_weights

    w = resolve_weights(path)
    if w.is_default:  # resolve_weights has just checked its hash
        return w.path, DEFAULT_SHA256
    st = w.path.stat()
    key = (str(w.path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _WEIGHTS_SHA_CACHE:
        _WEIGHTS_SHA_CACHE[key] = sha256_file(w.path)
    return w.path, _WEIGHTS_SHA_CACHE[key]


# ---------------------------------------------------------------- loading


@dataclass(frozen=True)
class PromptRecord:
    """The reference for one prompt (arrays as exported, see module doc)."""

    name: str
    text: str
    ids: np.ndarray  # (T,) int32
    logits: np.ndarray  # (T, vocab) float32
    hidden: np.ndarray  # (n_layers+1, T, hidden) float32; last entry is AFTER the final norm
    hidden_last_raw: np.ndarray  # (T, hidden) float32; last layer's output before the final norm
    argmax: np.ndarray  # (T,) int32
    greedy: np.ndarray  # (GREEDY_NEW_TOKENS,) int32


@dataclass(frozen=True)
class EvictionRecord:
    """The eviction fixture: segment ids and both greedy continuations."""

    segments: dict[str, str]
    prefix_ids: np.ndarray
    poison_ids: np.ndarray
    query_ids: np.ndarray
    never_greedy: np.ndarray  # greedy after prefix+query
    poisoned_greedy: np.ndarray  # greedy after prefix+poison+query


@dataclass
class Oracle:
    """A checked export. Arrays are read on first use and kept."""

    root: Path
    manifest: dict[str, Any]
    _cache: dict[RelPath, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def weights_sha256(self) -> str:
        return self.manifest["weights"]["sha256"]

    @property
    def prompt_names(self) -> list[str]:
        return [p["name"] for p in self.manifest["prompts"]]

    def array(self, rel: RelPath) -> np.ndarray:
        """One data file as a numpy array (never unpickles)."""
        if rel not in self._cache:
            entry = self.manifest["files"].get(rel)
            if entry is None:
                raise OracleCorrupt(
                    f"file={rel!r} is not listed in {self.root / MANIFEST}. Re-export with: {export_command(self.root)}"
                )
            arr = np.load(self.root / rel, allow_pickle=False)
            if list(arr.shape) != entry["shape"] or arr.dtype.str != entry["dtype"]:
                raise OracleCorrupt(
                    f"{self.root / rel} holds shape={arr.shape} dtype={arr.dtype.str}, manifest says "
                    f"shape={tuple(entry['shape'])} dtype={entry['dtype']}. Re-export with: {export_command(self.root)}"
                )
            arr.setflags(write=False)
            self._cache[rel] = arr
        return self._cache[rel]

    def prompt(self, name: str) -> PromptRecord:
        texts = {p["name"]: p["text"] for p in self.manifest["prompts"]}
        if name not in texts:
            raise KeyError(f"prompt={name!r} is not in the export; it has {sorted(texts)}")
        arrays = {f: self.array(prompt_path(name, f)) for f in PROMPT_FIELDS}
        return PromptRecord(name=name, text=texts[name], **arrays)

    def eviction(self) -> EvictionRecord:
        arrays = {f: self.array(eviction_path(f)) for f in EVICTION_FIELDS}
        return EvictionRecord(segments=dict(self.manifest["eviction"]["segments"]), **arrays)


_CURRENT = "current"


def open_oracle(
    root: str | os.PathLike | None = None,
    *,
    weights_sha256: str | None = _CURRENT,
    verify: bool = True,
) -> Oracle:
    """Open and check the export (default folder: see ``resolve_oracle_dir``).

    ``weights_sha256``: the weights the export must have been made from;
    ``"current"`` (default) resolves the project's weights now, None skips
    the check. ``verify`` rehashes every data file (about 0.2 s).

    Raises OracleMissing (no export), OracleCorrupt (a file differs from
    the manifest; the message names each one), OracleStale (intact, but
    made for other weights, prompts or format); each message ends with the
    command that fixes it. Also WeightsMissing/WeightsCorrupt from impl
    when the current weights cannot be resolved.
    """
    root = resolve_oracle_dir(root)
    manifest = read_manifest(root)
    cmd = export_command(root)
    problems = check_files(root, manifest, hashes=verify)
    if problems:
        shown = ", ".join(str(p) for p in problems[:5]) + (
            f" and {len(problems) - 5} more" if len(problems) > 5 else ""
        )
        raise OracleCorrupt(
            f"oracle export at {root} is damaged: {len(problems)} file(s) do not match its manifest "
            f"(hash mismatch or missing): {shown}. Recreate it with: {cmd}"
        )
    if weights_sha256 == _CURRENT:
        weights_sha256 = current_weights()[1]
    reasons = stale_reasons(manifest, weights_sha256)
    if reasons:
        raise OracleStale(f"oracle export at {root} does not fit: {'; '.join(reasons)}. Re-export with: {cmd}")
    return Oracle(root, manifest)
