"""Reproductions at the protocol level: a witness's program on any target, replayed by a standalone script.

A target whose adapter traces no library calls (impl's own designs, a project's
own cache) is recorded one level up: :class:`Recorded` wraps each handle a
witness makes and writes every verb called on it, with the rows appended,
into a :class:`Program` (forks join their source's program). When a check
fails, the program so far is the example; Hypothesis replays the shrunk one
last, so the last failure is the minimal program.

:func:`script` turns it into a script that imports the target's own module
(the adapter: a project's ``module:NAME`` entry, ``harness.targets.own`` for
impl's designs) and numpy, lists the program as numbered steps, and replays
them through the target and through :func:`model_replay`'s list of rows,
checking after every step what the program claims check: every live
handle's length and rows, the rows each append handed attention, that
earlier results kept their values (aliasing) and that the caller may
overwrite what it appended, and occupancy where the target states one. It
exits 1 at the first problem, 0 once the bug is fixed. The rows are stored
bit for bit at the end of the script (base64 of an ``.npz``).

Every function copied into a script (:data:`SCRIPT_FUNCTIONS`) imports what it
needs itself, so its source runs on its own.
"""

from __future__ import annotations

import base64
import inspect
import io
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.targets.protocol import Geometry
from harness.targets.repro import differs, held_rows_differ, visible_differs

Step = tuple  # (verb, handle, arg): arg is a chunk index (append), n, idx, r, the new handle (fork), or None

# ---------------------------------------------------------------- recording


@dataclass
class Program:
    """What was done to the handles of one ``make`` and its forks."""

    batch: int
    window: int | None
    capacity: int
    geometry: tuple[int, int, int]  # (n_layers, n_kv_heads, head_dim)
    steps: list[Step] = field(default_factory=list)
    chunks: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    handles: int = 1

    def snapshot(self) -> Program:
        return Program(
            self.batch, self.window, self.capacity, self.geometry, list(self.steps), list(self.chunks), self.handles
        )


class Recorded:
    """A target's handle whose verbs are written to a :class:`Program` before they run; all else passes through."""

    def __init__(self, handle, program: Program, hid: int) -> None:
        self._handle, self._program, self._id = handle, program, hid

    def __getattr__(self, name: str):
        return getattr(self._handle, name)

    def __len__(self) -> int:
        return self._handle.__len__()

    @property
    def program(self) -> Program:
        return self._program

    def append(self, k, v):
        self._program.chunks.append((np.array(k, np.float32), np.array(v, np.float32)))
        self._program.steps.append(("append", self._id, len(self._program.chunks) - 1))
        return self._handle.append(k, v)

    def fork(self):
        new = self._program.handles
        self._program.handles += 1
        self._program.steps.append(("fork", self._id, new))
        return Recorded(self._handle.fork(), self._program, new)

    def _verb(self, verb: str, arg):
        self._program.steps.append((verb, self._id, arg))
        return getattr(self._handle, verb)(arg)

    def truncate(self, n):
        return self._verb("truncate", n)

    def reorder(self, idx):
        return self._verb("reorder", [int(i) for i in idx])

    def select(self, idx):
        return self._verb("select", [int(i) for i in idx])

    def repeat(self, r):
        return self._verb("repeat", r)

    def release(self):
        self._program.steps.append(("release", self._id, None))
        return self._handle.release()


def record(handle, geometry, batch: int, window: int | None, capacity: int) -> Recorded:
    """``handle`` (just made) recorded into a fresh program."""
    g = (geometry.n_layers, geometry.n_kv_heads, geometry.head_dim)
    return Recorded(handle, Program(batch, window, capacity, g), 0)


# ---------------------------------------------------------------- the replay (copied into every script)


def model_replay(target, geometry, batch, window, capacity, steps, chunks, says, occupancy=False, kept_max=20):
    """Replay ``steps`` through ``target`` and a list-of-rows model; the first problem found, or "".

    The model is each verb's definition on (L, B, H, n, D) arrays of every position appended. After every
    step: the results kept so far still hold the values they were returned with (the last ``kept_max``: each
    handle's recent reads, the append results), then each live handle's length and rows (held_rows_differ; a
    window keeps at least its last W - 1 positions), the rows each append handed attention (visible_differs),
    and, with ``occupancy`` (the claim that failed checks it), the target's Occupancy bound. The rows an append
    was given are overwritten once it returns, as a caller reusing its buffers would."""
    import numpy as np

    run = {"target": target, "calib": {}, "hist": {0: []}, "kept": [], "fresh": [], "kept_max": kept_max}
    run["live"] = {0: True}
    run["hs"] = {0: target.make(geometry, batch, window, capacity)}
    run["ms"] = {0: (np.zeros(geometry.rows_shape(batch, 0), np.float32),) * 2}
    run["occ"] = getattr(target, "occupancy", None) if occupancy else None
    run["start"] = run["hs"][0].occupancy() if run["occ"] is not None else 0
    for i, (verb, h, arg) in enumerate(steps):
        at = f"step {i + 2} ({says[i]})"
        try:
            problem = _replay_step(run, verb, h, arg, chunks, at)
        except Exception as e:
            return f"{at}: raised {type(e).__name__}: {e}"
        problem = problem or _replay_checks(run, f"after {at}", i + 2)
        if problem:
            return problem
    return ""


def _replay_step(run, verb, h, arg, chunks, at):
    """Do one step on the target's handle ``h`` and on its model; a problem the step itself shows, or ""."""
    import numpy as np

    hs, ms = run["hs"], run["ms"]
    mk, mv = ms[h]
    if verb == "append":
        k, v = np.array(chunks[arg][0]), np.array(chunks[arg][1])
        if run["calib"].get(h) is None:  # the first chunk this handle's history got (a fork of an empty one: its own)
            run["calib"][h] = chunks[arg]
        run["hist"][h] = [*run["hist"][h], chunks[arg]]
        vis = hs[h].append(k, v)
        ms[h] = np.concatenate([mk, k], axis=3), np.concatenate([mv, v], axis=3)
        bk, bv = _bounds(run["target"].numerics, run["calib"][h], run["hist"][h], *ms[h])
        args = (vis.mask_length, vis.mask_offset, *ms[h], bk, bv, mk.shape[3], hs[h].window)
        problem = visible_differs(vis.k, vis.v, vis.positions, *args)
        run["fresh"].append((f"the rows {at} handed attention", vis.k, vis.v, np.array(vis.k), np.array(vis.v)))
        k.fill(np.nan)  # the caller reuses its buffers once append returns
        v.fill(np.nan)
        return f"{at}: the rows handed to attention: {problem}" if problem else ""
    if verb == "fork":
        hs[arg], ms[arg], run["live"][arg] = hs[h].fork(), (mk, mv), True
        run["calib"][arg], run["hist"][arg] = run["calib"].get(h), list(run["hist"][h])
    elif verb == "release":
        hs[h].release()
        run["live"][h] = False
    elif verb == "truncate" and not 0 <= arg <= mk.shape[3]:
        try:
            hs[h].truncate(arg)
        except (ValueError, RuntimeError):
            return ""  # refused, as it must be: nothing changes
        if arg > 0 or run["target"].truncate_contract != "refuse-or-empty":
            return f"{at}: truncate({arg}) at length {mk.shape[3]} was accepted; it must be refused"
        ms[h] = mk[:, :, :, :0], mv[:, :, :, :0]  # refuse-or-empty: removing more than is held may empty it
    elif verb == "truncate":
        hs[h].truncate(arg)
        ms[h] = mk[:, :, :, :arg], mv[:, :, :, :arg]
    else:
        getattr(hs[h], verb)(arg)
        idx = [b for b in range(mk.shape[1]) for _ in range(arg)] if verb == "repeat" else list(arg)
        ms[h] = mk[:, idx], mv[:, idx]
        calib = run["calib"].get(h)  # a bound's calibration and history follow the batch verb too
        run["calib"][h] = None if calib is None else (calib[0][:, idx], calib[1][:, idx])
        run["hist"][h] = [(c[0][:, idx], c[1][:, idx]) for c in run["hist"][h]]
    return ""


def _replay_checks(run, at, step):
    """The kept results against their copies, every live handle against its model, occupancy against its
    bound; this step's reads join the kept results after the comparison."""
    import numpy as np

    hs, ms = run["hs"], run["ms"]
    for what, k_now, v_now, k_then, v_then in [*run["kept"], *run["fresh"]]:
        for name, now, then in (("K", k_now, k_then), ("V", v_now, v_then)):
            if not np.array_equal(now, then, equal_nan=True):
                return f"{at}: {what} changed since it was returned ({name}: {differs(now, then)})"
    for j in [j for j in hs if run["live"][j]]:
        jk, jv = ms[j]
        if len(hs[j]) != jk.shape[3]:
            return f"{at}: handle {j} has length {len(hs[j])}, expected {jk.shape[3]}"
        rows = hs[j].read()
        window = hs[j].window
        need = jk.shape[3] if window is None else min(jk.shape[3], window - 1)
        bk, bv = _bounds(run["target"].numerics, run["calib"].get(j), run["hist"][j], jk, jv)
        problem = held_rows_differ((rows.k, rows.v, rows.positions), jk, jv, bk, bv, need)
        if problem:
            return f"{at}: handle {j}: the rows held: {problem}"
        what = f"the rows read from handle {j} after step {step}"
        run["fresh"].append((what, rows.k, rows.v, np.array(rows.k), np.array(rows.v)))
    run["kept"], run["fresh"] = [*run["kept"], *run["fresh"]][-run["kept_max"] :], []
    occ = run["occ"]
    if occ is not None:
        used = hs[0].occupancy()
        held = [ms[j][0].shape[3] for j in hs if run["live"][j] for _ in range(ms[j][0].shape[1])]
        allowed = occ.allowed(held) if held else run["start"]
        if used > allowed:
            return f"{at}: occupancy() is {used} {occ.unit}, at most {allowed:g} for {held} held"
    return ""


def _bounds(num, calib, history, k, v):
    """Per-element bounds on K and V of the model's rows (zeros for an exact target)."""
    import numpy as np

    if num.kind == "exact" or calib is None:
        z = np.zeros(k.shape)
        return z, z
    bk = num.allowed(calib[0], k, [c[0] for c in history])
    return bk * (1 + 2.0**-20), num.allowed(calib[1], v, [c[1] for c in history]) * (1 + 2.0**-20)


def load_rows(blob):
    """The appended rows, bit for bit, from the base64 ``.npz`` at the end of the script."""
    import base64
    import io

    import numpy as np

    data = np.load(io.BytesIO(base64.b64decode(blob)))
    return [(data[f"k{i}"], data[f"v{i}"]) for i in range(len(data.files) // 2)]


def find_target(module, name):
    """The Target called ``name`` among ``module``'s globals (a Target, or a dict, list or tuple of them)."""
    import importlib
    import sys

    for value in vars(importlib.import_module(module)).values():
        found = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
        for t in found:
            if getattr(t, "name", None) == name and callable(getattr(t, "make", None)):
                return t
    print(f"no target {name!r} in module {module}: the adapter changed since this script was written", file=sys.stderr)
    raise SystemExit(2)  # not 1: 1 says the problem is present


SCRIPT_FUNCTIONS = (
    differs,
    held_rows_differ,
    visible_differs,
    model_replay,
    _replay_step,
    _replay_checks,
    _bounds,
    load_rows,
    find_target,
)

# ---------------------------------------------------------------- the script


def describe(step: Step, chunks=None) -> str:
    verb, h, arg = step
    if verb == "append":
        size = f" ({chunks[arg][0].shape[3]} position(s))" if chunks is not None else ""
        return f"append of chunk {arg}{size} to handle {h}"
    if verb == "fork":
        return f"fork of handle {h} (handle {arg})"
    if verb == "release":
        return f"release of handle {h}"
    return f"{verb}({arg!r}) of handle {h}"


def _blob(chunks: list[tuple[np.ndarray, np.ndarray]]) -> str:
    buf = io.BytesIO()
    arrays = {f"{n}{i}": a for i, (k, v) in enumerate(chunks) for n, a in (("k", k), ("v", v))}
    np.savez_compressed(buf, **arrays)
    text = base64.b64encode(buf.getvalue()).decode()
    return "\n".join(text[i : i + 100] for i in range(0, len(text), 100))


def module_root(module: str) -> Path | None:
    """The folder ``module`` is imported from (what goes on sys.path), or None when it is not a file."""
    mod = sys.modules.get(module)
    path = getattr(mod, "__file__", None)
    if not path:
        return None
    root = Path(path).resolve().parent
    for _ in range(module.count(".") + (Path(path).name == "__init__.py")):
        root = root.parent
    return root


def script(target, program: Program, claim: str, witness: str, failure: str, occupancy: bool = False) -> str:
    """The standalone reproduction of ``program`` on ``target`` (found by ``witness``, which said ``failure``;
    ``occupancy``: the claim checked occupancy, so the script does too)."""
    module = target.build.__module__
    root = module_root(module)
    kvproof = Path(__file__).resolve().parents[2]
    g = program.geometry
    make = (
        f"make(geometry L={g[0]} H={g[1]} D={g[2]}, batch={program.batch}, window={program.window}, "
        f"capacity={program.capacity}) is handle 0"
    )
    chunk_sizes = [k.shape[3] for k, _ in program.chunks]
    numbered = [f"  1. {make}"] + [f"  {i + 2}. {describe(s, program.chunks)}" for i, s in enumerate(program.steps)]
    doc = [
        f"{target.title}: {claim}",
        "",
        f"Target: {target.name} ({target.binding()}), from {module}",
        f"Found by: kvproof {witness}",
        f"It said: {failure}",
        "",
        f"Steps (the shrunk example; chunk sizes {chunk_sizes}):",
        *numbered,
        "",
        "Generated by kvproof (harness/targets/replay.py). It replays the steps through the target and through a",
        "list of rows (each verb's definition), checking every live handle after every step, and prints the",
        "first problem. Exit status: 1 while the problem is present, 0 once it is fixed.",
    ]
    body = "\n".join(line if line.startswith("  ") else textwrap.fill(line, 110) for line in doc).replace('"""', "'''")
    paths = [str(p) for p in dict.fromkeys([root, kvproof]) if p is not None]
    out = ["#!/usr/bin/env python3", f'"""{body}\n"""', "", "import sys", "", f"sys.path[:0] = {paths!r}", ""]
    out += ["import numpy as np", "", "from harness.targets.protocol import Geometry", ""]
    for fn in SCRIPT_FUNCTIONS:
        out += ["", textwrap.dedent(inspect.getsource(fn)).rstrip(), ""]
    steps = ",\n".join(f"    {s!r}" for s in program.steps)
    says = [describe(s, program.chunks) for s in program.steps]
    out += [
        "",
        "STEPS = [  # (verb, handle, argument): an append's argument is the chunk it appends",
        steps + ",",
        "]",
        "",
        "",
        "def main():",
        f"    target = find_target({module!r}, {target.name!r})",
        f"    geometry = Geometry{g!r}",
        f"    says = {says!r}",
        f"    problem = model_replay(target, geometry, {program.batch}, {program.window!r}, {program.capacity}, "
        f"STEPS, load_rows(ROWS), says, occupancy={occupancy})",
        "    if problem:",
        '        print("PROBLEM:", problem)',
        f'        print("the claim does not hold on {target.binding()}")',
        "        return 1",
        f'    print("OK: the claim holds on {target.binding()}")',
        "    return 0",
        "",
        "",
        f'ROWS = """\n{_blob(program.chunks)}\n"""',
        "",
        'if __name__ == "__main__":',
        "    sys.exit(main())",
        "",
    ]
    return "\n".join(out)


def replays(target, program: Program, occupancy: bool = False) -> str:
    """What the script of ``program`` finds (its problem, "" when none), run here: the check that it reproduces."""
    says = [describe(s) for s in program.steps]
    return model_replay(
        target, Geometry(*program.geometry), program.batch, program.window, program.capacity,
        program.steps, [(np.array(k), np.array(v)) for k, v in program.chunks], says, occupancy,
    )  # fmt: skip
