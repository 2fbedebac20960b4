#!/usr/bin/env python3
"""Held-out mutants: how much of a sample nobody tuned the witnesses on do the cards kill?

    python bench/heldout.py [--seed 7] [-j 2] [--max-mutants 40] [--from DOC.json]

Runs ``run_obligations.py mutate --seed SEED`` over every card (a sample drawn with a seed the witnesses
were not strengthened against; the default 7 is reserved for this) and reports, over the union of the
cards' samples (a mutant claimed by several cards is killed when any of them kills it):

- Python: the mutants of impl's cache and model modules (kv, paged, ring, quant, attention, session);
- C: every sampled mutant of impl/kernels.c;

each as killed (or timed out) of the non-equivalent ones (killed + timeout + survived; equivalent and
error are not scored), with the survivors listed. ``--from`` reads an earlier ``mutate --json`` document
instead of running. Figures only, no asserts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON_MODULES = (
    "impl/kv.py",
    "impl/paged.py",
    "impl/ring.py",
    "impl/ring_store.py",
    "impl/quant.py",
    "impl/attention.py",
    "impl/model/session.py",
)
DETECTED = ("killed", "timeout")


def union(doc: dict) -> dict[str, dict]:
    """Mutant key -> the best result any card got for it (detected beats survived beats equivalent/error)."""
    rank = {"killed": 3, "timeout": 3, "survived": 2, "equivalent": 1, "error": 0}
    out: dict[str, dict] = {}
    for card in doc["cards"]:
        for m in (card.get("mutation") or {}).get("mutants", ()):
            m = {**m, "card": card["id"]}
            if m["key"] not in out or rank[m["status"]] > rank[out[m["key"]]["status"]]:
                out[m["key"]] = m
    return out


def report(name: str, mutants: list[dict]) -> None:
    scored = [m for m in mutants if m["status"] in (*DETECTED, "survived")]
    killed = [m for m in scored if m["status"] in DETECTED]
    eq = sum(m["status"] == "equivalent" for m in mutants)
    err = sum(m["status"] == "error" for m in mutants)
    pct = 100.0 * len(killed) / len(scored) if scored else float("nan")
    print(
        f"{name}: {len(killed)} of {len(scored)} non-equivalent mutants killed = {pct:.1f}%  "
        f"({len(mutants)} sampled: {eq} equivalent, {err} error)"
    )
    for m in sorted((m for m in scored if m["status"] == "survived"), key=lambda m: m["key"]):
        print(f"    survived {m['key']:<44} {m['change'][:70]}  [{m['card']}]")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=7, help="the held-out sample's seed (default 7)")
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("--max-mutants", type=int, default=40)
    ap.add_argument("--from", dest="doc", help="an earlier mutate --json document to read instead of running")
    args = ap.parse_args()
    print(f"bench/heldout.py  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  seed {args.seed}")
    if args.doc:
        doc = json.loads(Path(args.doc).read_text())
    else:
        with tempfile.TemporaryDirectory(prefix="kvheld-") as tmp:
            out = Path(tmp) / "mutate.json"
            cmd = [
                sys.executable,
                str(REPO / "run_obligations.py"),
                "mutate",
                "--seed",
                str(args.seed),
                "-j",
                str(args.j),
                "--max-mutants",
                str(args.max_mutants),
                "--reports",
                str(Path(tmp) / "r"),
                "--json",
                str(out),
            ]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
            if not out.is_file():
                sys.exit(f"heldout.py: mutate wrote no document (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
            print(f"mutate --seed {args.seed} -j {args.j}: {time.perf_counter() - t0:.1f} s")
            doc = json.loads(out.read_text())
    every = union(doc)
    report(
        "Python (" + ", ".join(Path(p).stem for p in PYTHON_MODULES) + ")",
        [m for m in every.values() if m["path"] in PYTHON_MODULES],
    )
    report("C (impl/kernels.c)", [m for m in every.values() if m["path"].endswith(".c")])


if __name__ == "__main__":
    main()
