"""Shipping the run's data to Ray nodes: the weights and the oracle export, each a resource named by its digest.

The weights (the GGUF the driver would load) and the oracle export are
*resources* (:class:`Resource`), each named by a sha256 (the GGUF's bytes;
the oracle's manifest, which holds every data file's sha256). With
``--ray-ship auto`` (default) the driver puts each once in Ray's object
store; a node uses its own copy when it has one with that digest (the
driver's path on the same machine or a shared file system, or
``KVPROOF_GGUF`` / ``KVPROOF_ORACLE_DIR`` set on the node), else it fetches
the shipped bytes once into its node cache (``KVPROOF_NODE_CACHE``, default
``<tmp>/kvproof-node-<uid>``), content-addressed and checked before use.
``always`` always uses the shipped copy; ``never`` ships nothing, so each
node must have its own. A node that cannot provide a resource with the
driver's digest runs nothing: the job's witnesses are skipped with the
reason and the card is UNVERIFIED, never judged on other data.

The driver's side: :func:`driver_resources` (what the driver has), :func:`ship` (into the object store). The
node's side: :func:`provide` (its own copy, else the shipped one, checked before use). The executor that
runs the jobs is :mod:`harness.execute.cluster`.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.execute.jobs import RunConfig
from harness.files import sha256_file
from harness.oracle.store import check_files, current_weights, read_manifest, resolve_oracle_dir

SHIP_MODES = ("auto", "always", "never")
NODE_CACHE_ENV = "KVPROOF_NODE_CACHE"
WEIGHTS, ORACLE = "weights", "oracle"


@dataclass(frozen=True)
class Resource:
    """Data every job needs on its node, as the driver has it: the weights file or the oracle export folder."""

    kind: str  # WEIGHTS or ORACLE
    digest: str  # sha256 of the GGUF's bytes, or of the oracle's manifest.json
    path: str  # where the driver has it
    name: str  # the file's name (weights) or "" (oracle: a folder)
    ref: Any = None  # Ray ObjectRef of its bytes (the file, or a tar of the folder); None: not shipped


def oracle_digest(folder: Path) -> str | None:
    """sha256 of an oracle export's manifest.json (it lists every data file's sha256), or None without one."""
    return sha256_file(folder / "manifest.json")


def driver_resources(cfg: RunConfig) -> list[Resource]:
    """The weights and oracle export the driver would give its witnesses, when it has them (not yet shipped)."""
    out = []
    try:  # the weights the project loads (harness.oracle.store knows how the project resolves them)
        path, digest = current_weights()
        out.append(Resource(WEIGHTS, digest, str(path), path.name))
    except Exception:  # NOTE: no weights (a project that needs none, or not installed): nothing to provide
        pass
    try:
        folder = resolve_oracle_dir(cfg.oracle_dir)  # as the witnesses resolve it (harness.plan.binding.oracle_files)
        digest = oracle_digest(folder)
        if digest is not None:
            out.append(Resource(ORACLE, digest, str(folder), ""))
    except ImportError:
        pass
    return out


def _tar_folder(folder: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                tar.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    return buf.getvalue()


def ship(ray, resources: list[Resource]) -> list[Resource]:
    """Each resource with its bytes put once in the object store (a node fetches them only when it needs them)."""
    out = []
    for r in resources:
        blob = Path(r.path).read_bytes() if r.kind == WEIGHTS else _tar_folder(Path(r.path))
        out.append(replace(r, ref=ray.put(blob)))
    return out


def node_cache() -> Path:
    """This node's cache of shipped data and built kernels/weights: KVPROOF_NODE_CACHE or <tmp>/kvproof-node-<uid>."""
    env = os.environ.get(NODE_CACHE_ENV)
    return Path(env) if env else Path(tempfile.gettempdir()) / f"kvproof-node-{os.getuid()}"


_VERIFIED: dict[tuple[str, str, str], tuple] = {}  # (kind, path, digest) -> the stat key it matched with


def _stat_key(path: Path) -> tuple:
    target = path / "manifest.json" if path.is_dir() else path
    st = target.stat()
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def _matches(kind: str, path: Path, digest: str) -> str:
    """'' when ``path`` holds the resource with ``digest`` (checked once per worker while unchanged), else why not."""
    if not path.exists():
        return f"nothing at {path}"
    try:
        key = _stat_key(path)
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror or exc})"
    if _VERIFIED.get((kind, str(path), digest)) == key:
        return ""
    if kind == WEIGHTS:
        got = sha256_file(path)
        if got != digest:
            return f"{path} has sha256 {str(got)[:12]}..., the driver's weights {digest[:12]}..."
    else:
        got = oracle_digest(path)
        if got != digest:
            return f"the oracle export at {path} has manifest sha256 {str(got)[:12]}..., the driver's {digest[:12]}..."

        bad = check_files(path, read_manifest(path), hashes=True)
        if bad:
            return f"the oracle export at {path} does not match its manifest: {bad[0]}"
    _VERIFIED[(kind, str(path), digest)] = key
    return ""


def _own_copy(r: Resource) -> Path:
    """Where this node's own copy of ``r`` would be: the node's KVPROOF_GGUF / KVPROOF_ORACLE_DIR, else the
    driver's path (same machine or shared file system)."""
    env = os.environ.get("KVPROOF_GGUF" if r.kind == WEIGHTS else "KVPROOF_ORACLE_DIR")
    return Path(env) if env else Path(r.path)


def _materialize(r: Resource, dest: Path) -> None:
    """Fetch the shipped bytes of ``r`` into ``dest`` (a folder), atomically: a rename of a finished copy."""
    import ray

    blob = ray.get(r.ref)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    tmp.mkdir(parents=True)
    try:
        if r.kind == WEIGHTS:
            (tmp / r.name).write_bytes(blob)
        else:
            with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
                tar.extractall(tmp, filter="data")
        try:
            os.rename(tmp, dest)
        except OSError:  # another task on this node finished first: its copy is as good
            if not dest.exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def provide(r: Resource, ship_mode: str, node: str) -> tuple[Path | None, str]:
    """(where ``r`` is on this node, "") or (None, why it cannot be had with the driver's digest)."""
    why_own = ""
    if ship_mode != "always":
        own = _own_copy(r)
        why_own = _matches(r.kind, own, r.digest)
        if not why_own:
            return own, ""
    if r.ref is None:
        return None, (
            f"node {node} has no {r.kind} as the driver has them ({why_own}) and --ray-ship never "
            "sends them; install them on the node or use --ray-ship auto"
        )
    folder = node_cache() / r.kind / r.digest[:32]
    target = folder / r.name if r.kind == WEIGHTS else folder
    if not folder.exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        _materialize(r, folder)
    why = _matches(r.kind, target, r.digest)
    if why:  # a damaged copy in the node cache: fetch it once more
        shutil.rmtree(folder, ignore_errors=True)
        _materialize(r, folder)
        why = _matches(r.kind, target, r.digest)
    if why:
        return None, f"node {node}: the shipped {r.kind} do not check on arrival ({why})"
    return target, ""


__all__ = [
    "NODE_CACHE_ENV",
    "ORACLE",
    "SHIP_MODES",
    "WEIGHTS",
    "Resource",
    "driver_resources",
    "node_cache",
    "oracle_digest",
    "provide",
    "ship",
]
