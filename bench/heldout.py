#!/usr/bin/env python3
"""Held-out mutants: how much of a sample nobody tuned the witnesses on do the cards kill?

    python bench/heldout.py [--seed 8] [-j 2] [--max-mutants 40] [--from DOC.json] [--keep DIR]

Runs ``run_obligations.py mutate --seed SEED`` over every card (a sample drawn with a seed the witnesses
were not strengthened against; the default 8 is reserved for this: 7 was, until RING-T2's truncate witnesses
were written for its survivors, 2026-12-02) and reports, over the union of the
cards' samples (a mutant claimed by several cards is killed when any of them kills it):

- Python: the mutants of impl's cache and model modules (kv, paged, ring, quant, attention, session);
- C: every sampled mutant of impl/kernels.c;

each as killed (or timed out) of the non-equivalent ones (killed + timeout + survived; equivalent and
error are not scored), with the survivors listed. "Killed by the cards" means by any card that claims the
mutant's code, not only the cards whose sample drew it: each survivor of the first run is then run against
every other card that claims its function (one ``mutate CARDS --mutant KEY ...`` run), and the table says
which card killed it. ``--from`` reads an earlier ``mutate --json`` document instead of the first run.
Figures only, no asserts.
"""

from __future__ import annotations

import argparse
import json
import shutil
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


def unsampled(doc: dict, every: dict[str, dict], wanted) -> tuple[list[str], list[str]]:
    """(cards, keys): the survivors (of the files ``wanted`` selects) and the cards that claim their function
    but did not run them, for one ``mutate CARDS --mutant KEY ...`` run."""
    claims = {(c["path"], c["qualname"]): c["cards"] for c in doc.get("claims", ())}
    ran = {(card["id"], m["key"]) for card in doc["cards"] for m in (card.get("mutation") or {}).get("mutants", ())}
    cards: dict[str, None] = {}
    keys: dict[str, None] = {}
    for key, m in every.items():
        if m["status"] != "survived" or not wanted(m["path"]):
            continue
        more = [cid for cid in claims.get((m["path"], m["qualname"]), ()) if (cid, key) not in ran]
        if more:
            keys[key] = None
            cards.update(dict.fromkeys(more))
    return list(cards), list(keys)


def mutate(args: list[str], tmp: Path, name: str) -> tuple[dict, float]:
    out = tmp / f"{name}.json"
    cmd = [sys.executable, str(REPO / "run_obligations.py"), "mutate", *args]
    cmd += ["--reports", str(tmp / f"r-{name}"), "--json", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if not out.is_file():
        sys.exit(f"heldout.py: mutate wrote no document (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text()), time.perf_counter() - t0


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
    ap.add_argument("--seed", type=int, default=8, help="the held-out sample's seed (default 8)")
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("--max-mutants", type=int, default=40)
    ap.add_argument("--from", dest="doc", help="an earlier mutate --json document to read instead of running")
    ap.add_argument("--keep", metavar="DIR", help="keep the mutate documents (m.json: the sample, x.json: the rest)")
    args = ap.parse_args()
    print(f"bench/heldout.py  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  seed {args.seed}")
    wanted = lambda p: p in PYTHON_MODULES or p.endswith(".c")  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="kvheld-") as tmp:
        if args.doc:
            doc = json.loads(Path(args.doc).read_text())
        else:
            doc, took = mutate(
                ["--seed", str(args.seed), "-j", str(args.j), "--max-mutants", str(args.max_mutants)], Path(tmp), "m"
            )
            print(f"mutate --seed {args.seed} -j {args.j}: {took:.1f} s")
        every = union(doc)
        cards, keys = unsampled(doc, every, wanted)
        if keys:
            more, took = mutate(
                [*cards, "-j", str(args.j), *(a for k in keys for a in ("--mutant", k))], Path(tmp), "x"
            )
            print(
                f"the {len(keys)} survivors against the {len(cards)} other card(s) that claim their code "
                f"(mutate {' '.join(cards)} --mutant ...): {took:.1f} s"
            )
            caught = 0
            for key, m in union(more).items():
                if key in every and every[key]["status"] == "survived" and m["status"] in DETECTED:
                    every[key], caught = m, caught + 1
            print(f"  of which {caught} killed by a card whose sample did not draw them")
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
            for f in Path(tmp).glob("*.json"):
                shutil.copy(f, Path(args.keep) / f.name)
    report(
        "Python (" + ", ".join(Path(p).stem for p in PYTHON_MODULES) + ")",
        [m for m in every.values() if m["path"] in PYTHON_MODULES],
    )
    report("C (impl/kernels.c)", [m for m in every.values() if m["path"].endswith(".c")])


if __name__ == "__main__":
    main()
