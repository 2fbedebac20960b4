#!/usr/bin/env python3
"""Planted bugs: how many realistic slips in third-party-style KV caches do kvproof's shipped generic claims catch?

    python bench/planted/run.py [--only CACHE] [--bug ID] [-j 1] [--keep DIR]

Five small numpy caches (projects/: contig, paged, ring, int8, tiered), each a project proved the way
docs/prove-your-own-cache.md shows: an adapter, kvproof's shipped claims (harness/targets/claims.py) as its
only witnesses, one card per claim group that applies, one liar per card. For the clean version of each
project and for each planted bug (bugs.py: one small text change of one function), the project is copied to
a fresh temporary folder, the bug applied there, and ``kvproof run --profile ci --seed 0 -j J --json ...``
run in it (no KVPROOF_* variable set). A bug is caught when a card is FAILED (a witness's check failed);
the table names those cards, and any other card that is not PROVEN. Figures only, no asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from bugs import BUGS, CACHES, Bug  # noqa: E402

KVPROOF = Path(sys.executable).parent / "kvproof"
TIMEOUT = 900  # s for one kvproof run (each takes seconds; this only stops a hang)


def environment() -> dict[str, str]:
    """The environment kvproof runs in: no KVPROOF_*, PYTEST_* or PYTHONPATH; this checkout's harness."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVPROOF_", "PYTEST_", "PYTHONPATH"))}
    env["COLUMNS"] = "200"
    with tempfile.TemporaryDirectory() as probe:
        out = subprocess.run(
            [sys.executable, "-c", "import harness; print(harness.__file__)"],
            cwd=probe,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    found = Path(out.stdout.strip()).resolve().parent if out.returncode == 0 else None
    if found != REPO / "harness":
        env["PYTHONPATH"] = str(REPO)  # the installed kvproof is another checkout's: run this one's
    return env


def prepare(cache: str, bug: Bug | None, dest: Path) -> Path:
    """A fresh copy of the project, with ``bug`` applied to the copy."""
    project = dest / cache
    shutil.copytree(HERE / "projects" / cache, project, ignore=shutil.ignore_patterns("reports", "__pycache__"))
    if bug is not None:
        path = project / bug.file
        text = path.read_text(encoding="utf-8")
        if text.count(bug.old) != 1:
            raise SystemExit(f"{bug.id}: the text to replace occurs {text.count(bug.old)} times in {bug.file}")
        path.write_text(text.replace(bug.old, bug.new), encoding="utf-8")
    return project


def prove(project: Path, env: dict[str, str], jobs: int) -> tuple[list[dict], str, float]:
    """(cards, error, seconds): the verdicts of ``kvproof run`` in ``project``."""
    out = project / "verdicts.json"
    cmd = [str(KVPROOF), "run", "--profile", "ci", "--seed", "0", "-j", str(jobs), "--json", str(out)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return [], f"kvproof run took more than {TIMEOUT} s", time.perf_counter() - t0
    took = time.perf_counter() - t0
    if not out.is_file():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
        return [], f"exit {proc.returncode}, no verdicts: " + " | ".join(tail), took
    return json.loads(out.read_text())["cards"], "", took


def first_failure(card: dict) -> str:
    for w in card.get("witnesses", ()):
        if w.get("status") == "failed" and w.get("message"):
            return f"{w['id']}: {w['message']}"
    return card.get("reason", "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=CACHES, action="append", help="only this cache (repeatable)")
    ap.add_argument("--bug", action="append", help="only this bug id (repeatable; its cache's clean run too)")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="witness processes per kvproof run (default 1)")
    ap.add_argument("--keep", type=Path, help="keep the project copies (and their reports) under DIR")
    ap.add_argument("--why", action="store_true", help="print the first failure message of each catching card")
    args = ap.parse_args()

    bugs = [b for b in BUGS if (not args.only or b.cache in args.only) and (not args.bug or b.id in args.bug)]
    if args.bug and len(bugs) != len(set(args.bug)):
        known = {b.id for b in BUGS}
        raise SystemExit(f"unknown bug id(s): {', '.join(sorted(set(args.bug) - known))}")
    caches = [
        c for c in CACHES if (not args.only or c in args.only) and (not args.bug or any(b.cache == c for b in bugs))
    ]
    runs: list[tuple[str, Bug | None]] = [(c, None) for c in caches] + [(b.cache, b) for b in bugs]

    env = environment()
    base = Path(tempfile.mkdtemp(prefix="kvproof-planted-")) if args.keep is None else args.keep
    base.mkdir(parents=True, exist_ok=True)
    print(
        f"kvproof planted bugs: {len(caches)} clean project(s), {len(bugs)} bug(s), kvproof run -j {args.jobs}, "
        f"profile ci, seed 0; copies in {base}"
    )
    results = []
    t_all = time.perf_counter()
    for n, (cache, bug) in enumerate(runs, 1):
        name = bug.id if bug else f"{cache}.clean"
        project = prepare(cache, bug, base / name)
        cards, err, took = prove(project, env, args.jobs)
        failed = sorted(c["id"] for c in cards if c["verdict"] == "FAILED")
        other = sorted(f"{c['id']} {c['verdict']}" for c in cards if c["verdict"] not in ("FAILED", "PROVEN"))
        proven = sum(c["verdict"] == "PROVEN" for c in cards)
        results.append(
            dict(cache=cache, bug=bug, cards=cards, err=err, took=took, failed=failed, other=other, proven=proven)
        )
        if bug is None:
            state = f"{proven}/{len(cards)} PROVEN" + (f"; {', '.join(other + failed)}" if other or failed else "")
        else:
            state = ("caught by " + ", ".join(failed)) if failed else "MISSED"
            state += f" (also {', '.join(other)})" if other else ""
        print(f"[{n}/{len(runs)}] {name}: {err or state} ({took:.1f} s)", flush=True)
        if args.keep is None:
            shutil.rmtree(base / name, ignore_errors=True)
    wall = time.perf_counter() - t_all
    if args.keep is None:
        shutil.rmtree(base, ignore_errors=True)

    # ---- the table
    print()
    rows = []
    for r in results:
        b = r["bug"]
        if b is None:
            ok = not r["err"] and r["proven"] == len(r["cards"]) and r["cards"]
            rows.append(
                (
                    r["cache"],
                    "(clean)",
                    "the cache as written",
                    "PROVEN" if ok else "NOT PROVEN",
                    r["err"]
                    or (
                        f"{r['proven']}/{len(r['cards'])} PROVEN"
                        + (f"; {', '.join(r['other'] + r['failed'])}" if not ok else "")
                    ),
                )
            )
        else:
            rows.append(
                (
                    r["cache"],
                    b.id,
                    b.description,
                    "yes" if r["failed"] else "NO",
                    r["err"] or ", ".join(r["failed"] + [f"({o})" for o in r["other"]]) or "-",
                )
            )
    heads = ("cache", "bug", "description", "caught", "FAILED cards (other non-PROVEN in parentheses)")
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(heads[:4])]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
    print(fmt.format(*heads))
    print(fmt.format(*("-" * w for w in widths), "-" * len(heads[4])))
    for row in rows:
        print(fmt.format(*row))
    if args.why:
        print()
        for r in results:
            if r["bug"] is not None:
                for c in r["cards"]:
                    if c["verdict"] == "FAILED":
                        print(f"{r['bug'].id} / {c['id']}: {first_failure(c)[:300]}")

    # ---- totals
    clean = [r for r in results if r["bug"] is None]
    clean_ok = sum(1 for r in clean if not r["err"] and r["cards"] and r["proven"] == len(r["cards"]))
    planted = [r for r in results if r["bug"] is not None]
    caught = sum(1 for r in planted if r["failed"])
    print()
    print(f"clean PROVEN: {clean_ok}/{len(clean)}")
    if planted:
        print(f"bugs caught: {caught}/{len(planted)} ({100 * caught / len(planted):.1f}%)")
        per = Counter(r["cache"] for r in planted)
        hit = Counter(r["cache"] for r in planted if r["failed"])
        print("per cache: " + ", ".join(f"{c} {hit[c]}/{per[c]}" for c in CACHES if per[c]))
        by_card = Counter(cid.split("-", 1)[1] for r in planted for cid in r["failed"])
        only = Counter(r["failed"][0].split("-", 1)[1] for r in planted if len(r["failed"]) == 1)
        print(
            "bugs each card kind FAILED on (alone): "
            + ", ".join(f"{k} {v} ({only[k]})" for k, v in sorted(by_card.items(), key=lambda kv: (-kv[1], kv[0])))
        )
        missed = [r["bug"].id for r in planted if not r["failed"]]
        print("missed: " + (", ".join(missed) if missed else "none"))
    print(f"wall time: {wall:.0f} s for {len(results)} kvproof run(s) (-j {args.jobs} each)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
