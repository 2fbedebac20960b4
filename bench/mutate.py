#!/usr/bin/env python3
"""Mutation analysis against the gate, measured in one run: is ``mutate`` cheap enough (docs/mutation.md)?

1. the gate: ``run_obligations.py run -j J`` (every card, liars on), timed whole;
2. the full mutation run: ``run_obligations.py mutate -j J`` (every card, the default sample: at most 40
   mutants a card, seed 0), timed whole: its own run of the cards (honest runs traced, liars), then the
   mutants;
3. the gate again, so a machine whose load changed during the run shows it (the ratio is to the mean of the
   two, and to each).

Each with a fresh reports folder (no ledger: nothing replayed, no killer known from an earlier mutate run,
no schedule but obligations/timings.json: what a fresh clone has); the weights and kernel caches in .cache/
are warm for both. It prints the two wall times and their ratio (the target: at most 6), mutants per second,
how many mutants were not reached (never run), how the others started (forked from their card's warm server,
or fresh and why), how many were killed (or timed out) by the first witness they ran against, and the
zero-overhead limit: the witness seconds the run mutants needed (the killing witness alone for a detected
mutant, every witness run for a survivor: ``witness_s`` in the document) divided by the workers, beside the
mutation stage's wall time.

    python bench/mutate.py [-j 2] [--max-mutants 40] [--slow] [--skip-gate] [--keep DIR]

Figures only, no asserts. Run it on a quiet machine; the load averages before and after are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENTRY = REPO / "run_obligations.py"


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def timed(args: list[str], scratch: Path, name: str) -> tuple[float, dict, str]:
    """(wall seconds, the --json document, stdout + stderr) of ``run_obligations.py ARGS``."""
    out = scratch / f"{name}.json"
    cmd = [sys.executable, str(ENTRY), *args, "--reports", str(scratch / name), "--json", str(out)]
    env = {**os.environ, "COLUMNS": "160"}
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if not out.is_file():
        sys.exit(f"bench/mutate.py: {' '.join(args)} wrote no document (exit {proc.returncode}):\n{proc.stderr}")
    return wall, json.loads(out.read_text()), proc.stdout + proc.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-j", type=int, default=2, help="worker processes for both runs (default 2)")
    ap.add_argument("--max-mutants", type=int, default=40, help="mutants per card at most (default 40)")
    ap.add_argument("--slow", action="store_true", help="measure mutate --slow (the reference path) instead")
    ap.add_argument("--skip-gate", action="store_true", help="measure mutate only (no ratio)")
    ap.add_argument("--keep", metavar="DIR", help="keep both verdicts documents (gate.json, mutate.json) in DIR")
    args = ap.parse_args()

    print(
        f"bench/mutate.py  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  {platform.node()}: "
        f"{os.cpu_count()} cores, {_cpu()}; python {platform.python_version()}"
    )
    print(f"load average before: {_load()}")
    with tempfile.TemporaryDirectory(prefix="kvproof-bench-mutate-") as tmp:
        scratch = Path(tmp)
        gate_s = None
        if not args.skip_gate:
            gate_s, gate, _ = timed(["run", "-j", str(args.j)], scratch, "gate")
            counts = Counter(c["verdict"] for c in gate["cards"])
            print(
                f"gate    run -j {args.j}: {len(gate['cards'])} cards "
                f"({', '.join(f'{n} {v}' for v, n in counts.items())})  {gate_s:8.1f} s"
            )
        mutate_args = ["mutate", "-j", str(args.j), "--max-mutants", str(args.max_mutants)]
        mutate_args += ["--slow"] if args.slow else []
        mutate_s, doc, said = timed(mutate_args, scratch, "mutate")
        if not args.skip_gate:
            again_s, _, _ = timed(["run", "-j", str(args.j)], scratch, "gate-again")
            print(f"gate    run -j {args.j} again, after mutate:  {again_s:8.1f} s")
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
            for name in ("gate.json", "mutate.json"):
                if (scratch / name).is_file():
                    shutil.copy(scratch / name, Path(args.keep) / name)
    print(f"load average after:  {_load()}")

    cards = [c for c in doc["cards"] if c.get("mutation")]
    mutants = [m for c in cards for m in c["mutation"]["mutants"]]
    candidates = sum(c["mutation"]["candidates"] for c in cards)
    run = [m for m in mutants if m.get("how") not in ("not reached", "not run: decided by its build")]
    unreached = sum(m.get("how") == "not reached" for m in mutants)
    by_build = sum(m.get("how") == "not run: decided by its build" for m in mutants)
    detected = [m for m in run if m["status"] in ("killed", "timeout")]
    first = [m for m in detected if m.get("tried") == 1]
    stage = re.search(r"mutate: (\d+) mutant\(s\) run in ([\d.]+) s", said)
    stage_s = float(stage.group(2)) if stage else float("nan")
    witness_s = sum(m.get("witness_s", 0.0) for m in run)
    ratio = ""
    if gate_s:
        mean = (gate_s + again_s) / 2
        ratio = (
            f"  {mutate_s / mean:.2f}x the gate (mean of {gate_s:.1f} and {again_s:.1f} s; "
            f"{mutate_s / gate_s:.2f}x and {mutate_s / again_s:.2f}x each; target <= 6x)"
        )
    print(
        f"mutate  mutate -j {args.j}{' --slow' if args.slow else ''}: {len(cards)} cards, {len(mutants)} mutants "
        f"of {candidates} (seed 0, at most {args.max_mutants} a card)  {mutate_s:8.1f} s{ratio}"
    )
    print(f"  its run of the cards (honest, traced; liars)   {mutate_s - stage_s:8.1f} s")
    print(
        f"  its mutation stage                             {stage_s:8.1f} s   {len(run) / stage_s:.2f} mutants/s run "
        f"({len(mutants) / mutate_s:.2f}/s over the whole mutate run)"
    )
    hows = Counter("warm" if m["how"] == "warm" else "fresh" for m in run)
    why = Counter(m["how"].removeprefix("fresh: ") for m in run if m["how"].startswith("fresh: "))
    reasons = Counter(
        "line runs at import or collection"
        if "imported or collected" in w
        else "held by reference"
        if "held by" in w
        else w
        for w in why.elements()
    )
    c_said = re.search(r"mutate: (\d+) C mutant\(s\) built in ([\d.]+) s \(([\d.]+) s of compiling\): (.*)", said)
    schema = re.search(r"building one schema of (\d+) C mutant", said)
    alone = re.search(r"building (\d+) C mutant\(s\) of .* one by one", said)
    if c_said:
        print(
            f"  C mutants: {c_said.group(1)} built in {c_said.group(2)} s ({c_said.group(3)} s of compiling; "
            f"{schema.group(1) if schema else 0} in one schema, {alone.group(1) if alone else 0} alone): "
            f"{c_said.group(4)}"
        )
    print(
        f"  mutants: {unreached} not reached (never run), {by_build} decided by their build (C, never run), "
        f"{len(run)} run: {hows['warm']} forked warm, "
        f"{hows['fresh']} fresh" + (f" ({'; '.join(f'{r}: {n}' for r, n in reasons.items())})" if reasons else "")
    )
    share = f" ({len(first) / len(detected):.0%})" if detected else ""
    print(f"  killed or timed out by the first witness they ran against: {len(first)} of {len(detected)}{share}")
    statuses = Counter(m["status"] for m in mutants)
    print(f"  statuses: {', '.join(f'{n} {s}' for s, n in sorted(statuses.items()))}")
    floors = [c for c in cards if c["mutation"].get("min_score") is not None]
    below = [c for c in floors if c["mutation"].get("holds") is False]
    print(
        f"  floors: {len(floors) - len(below)} of {len(floors)} cards with a min_score meet it"
        + "".join(f"; {c['id']} {c['mutation']['score']:.3f} < {c['mutation']['min_score']}" for c in below)
    )
    print(
        "  scores: "
        + ", ".join(f"{c['id']} {c['mutation']['score']:.2f}" for c in cards if c["mutation"].get("score") is not None)
    )
    print(
        f"  zero-overhead limit: {witness_s:.1f} witness s / {args.j} workers = {witness_s / args.j:.1f} s "
        f"(the stage took {stage_s:.1f} s: {stage_s / (witness_s / args.j):.2f}x the limit)"
        if witness_s
        else "  zero-overhead limit: no witness time recorded"
    )


if __name__ == "__main__":
    main()
