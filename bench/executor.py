#!/usr/bin/env python3
"""What a job costs on the Ray executor against the local pool, measured in one run, and what a mutation
run of every card would take on more nodes (docs/cluster.md).

Two measurements, each on both executors in the same run, 2 jobs at a time:

1. trivial jobs: ``--trivial N`` copies of one fixture card's honest job (one witness of ~1 ms), through
   :func:`harness.execute.schedule.run_jobs`. The *limit* is a pool that costs nothing: wall = sum of the jobs' own
   process times / 2. Overhead per job = (wall x 2 - sum of process times) / N: what the executor adds to
   each job (dispatch, result, and on Ray the task round trip and shipping of the code); the cluster's
   start and stop are printed apart, as they are paid once per run.
2. real mutants: ``run_obligations.py mutate --max-mutants K`` on every card (the same sampled mutants on
   both executors: same seed and code), timed whole. Its per-mutant process times, the per-job overhead of
   (1) and each card's mutant count at the default sample (``mutation.DEFAULT_MAX_MUTANTS`` per card) give a
   projection of a full mutation run on k nodes of 2 CPUs:
   wall(k) ~= start + max(longest job, (sum of job times + jobs x overhead) / (2k)).

    python bench/executor.py [--trivial 24] [--mutants 2] [--skip-mutate]

Needs the cluster extra (``make cluster``). Run it on a quiet machine: both executors share the 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.execute.executor import ExecutorSpec  # noqa: E402
from harness.execute.jobs import RunConfig, honest_job  # noqa: E402
from harness.execute.schedule import run_jobs  # noqa: E402
from harness.liars import scan  # noqa: E402
from harness.select.cards import load_cards  # noqa: E402

FIXTURE = REPO / "tests" / "fixtures" / "project"
SLOTS = 2


def trivial(n: int, scratch: Path) -> dict[str, dict[str, float]]:
    """Run ``n`` copies of FX-ADD's honest job on each executor; wall, process seconds and overhead per job."""
    root = scratch / "project"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__", "reports"))
    sites, _ = scan(root)
    card = next(c for c in load_cards(root / "obligations", root, sites).cards if c.id == "FX-ADD")
    jobs = [honest_job(card)] * n
    cfg = RunConfig(root=root)
    out = {}
    for name, spec in (("local", ExecutorSpec()), ("ray", ExecutorSpec("ray"))):
        start_s = stop_s = 0.0
        if name == "ray":
            from harness.execute.cluster import close_session, open_session

            t = time.monotonic()
            open_session(spec, root, SLOTS)
            start_s = time.monotonic() - t
            run_jobs(jobs[:SLOTS], cfg, jobs=SLOTS, executor=spec)  # warm: workers, fork servers, the code
        else:
            run_jobs(jobs[:SLOTS], cfg, jobs=SLOTS, executor=spec)
        t = time.monotonic()
        results = run_jobs(jobs, cfg, jobs=SLOTS, executor=spec)
        wall = time.monotonic() - t
        if name == "ray":
            t = time.monotonic()
            close_session()
            stop_s = time.monotonic() - t
        bad = [r for r in results if any(nr.outcome != "passed" for nr in r.results.values()) or not r.results]
        assert not bad, f"{name}: a trivial job did not pass: {bad[0]}"
        proc_s = sum(r.duration for r in results)
        out[name] = {
            "wall_s": wall,
            "process_s": proc_s,
            "limit_s": proc_s / SLOTS,
            "overhead_ms": (wall * SLOTS - proc_s) / n * 1000,
            "per_job_ms": wall * SLOTS / n * 1000,
            "start_s": start_s,
            "stop_s": stop_s,
        }
    return out


def mutate(k: int, scratch: Path) -> dict[str, dict]:
    """``mutate --max-mutants k`` on every card, on each executor: wall, and every mutant's process time.

    A plain ``run`` first, untimed, so neither executor pays for building kernels and weight caches.
    """
    subprocess.run(
        [
            sys.executable,
            str(REPO / "run_obligations.py"),
            "run",
            "-j",
            str(SLOTS),
            "--reports",
            str(scratch / "reports-warm"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    out = {}
    for name, extra in (("local", ["-j", str(SLOTS)]), ("ray", ["--executor", "ray", "-j", str(SLOTS)])):
        js = scratch / f"mutate-{name}.json"
        t = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable,
                str(REPO / "run_obligations.py"),
                "mutate",
                "--max-mutants",
                str(k),
                *extra,
                "--reports",
                str(scratch / f"reports-{name}"),
                "--json",
                str(js),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        wall = time.monotonic() - t
        if not js.exists():
            sys.exit(f"mutate on {name} wrote no document (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
        doc = json.loads(js.read_text())
        cards = {c["id"]: c["mutation"] for c in doc["cards"] if c.get("mutation")}
        out[name] = {
            "wall_s": wall,
            "run_process_s": doc["timing"]["process_s"],
            "cards": cards,
            "verdicts": {c["id"]: c["verdict"] for c in doc["cards"]},
            "statuses": {cid: sorted((m["key"], m["status"]) for m in m_["mutants"]) for cid, m_ in cards.items()},
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trivial", type=int, default=24, help="trivial jobs per executor (default 24)")
    ap.add_argument("--mutants", type=int, default=2, help="mutants per card in the mutate measurement (default 2)")
    ap.add_argument("--skip-mutate", action="store_true", help="only the trivial jobs")
    args = ap.parse_args()
    import ray

    from harness.mutation.score import DEFAULT_MAX_MUTANTS

    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, python "
        f"{platform.python_version()}, ray {ray.__version__}; {SLOTS} jobs at a time on both executors"
    )
    with tempfile.TemporaryDirectory(prefix="kvproof-bench-") as tmp:
        scratch = Path(tmp)
        t = trivial(args.trivial, scratch)
        print(
            f"\n1. {args.trivial} trivial jobs (FX-ADD honest process, one ~1 ms witness), after a warm-up of {SLOTS}:"
        )
        print(f"   {'executor':<9}{'wall':>9}{'limit':>9}{'process-s':>11}{'per job':>10}{'overhead/job':>14}")
        for name, r in t.items():
            print(
                f"   {name:<9}{r['wall_s']:>8.2f}s{r['limit_s']:>8.2f}s{r['process_s']:>10.2f}s"
                f"{r['per_job_ms']:>8.0f}ms{r['overhead_ms']:>12.0f}ms"
            )
        print(
            f"   limit = process-s / {SLOTS} (a pool that adds nothing); "
            f"ray cluster start {t['ray']['start_s']:.1f} s, "
            f"stop {t['ray']['stop_s']:.1f} s (once per run)"
        )
        if args.skip_mutate:
            return
        m = mutate(args.mutants, scratch)
        same = m["local"]["statuses"] == m["ray"]["statuses"] and m["local"]["verdicts"] == m["ray"]["verdicts"]
        print(
            f"\n2. mutate --max-mutants {args.mutants}, every card (run stage + mutants), same mutants on both: "
            f"{'identical verdicts and mutant statuses' if same else 'RESULTS DIFFER'}"
        )
        rows = []
        for name in ("local", "ray"):
            r = m[name]
            durs = [mm["duration_s"] for c in r["cards"].values() for mm in c["mutants"]]
            total = r["run_process_s"] + sum(durs)
            n_jobs = len(durs)
            rows.append((name, r["wall_s"], total, n_jobs))
            print(
                f"   {name:<6} wall {r['wall_s']:7.1f} s   limit {total / SLOTS:7.1f} s   ({n_jobs} mutant jobs, "
                f"{sum(durs):.1f} process-s of mutants + {r['run_process_s']:.1f} of the run stage)"
            )
        local = m["local"]["cards"]
        per_card = {
            cid: (
                sum(mm["duration_s"] for mm in c["mutants"]) / max(1, len(c["mutants"])),
                min(c["candidates"], DEFAULT_MAX_MUTANTS),
                max((mm["duration_s"] for mm in c["mutants"]), default=0.0),
            )
            for cid, c in local.items()
        }
        full_jobs = sum(n for _, n, _ in per_card.values())
        full_s = sum(mean * n for mean, n, _ in per_card.values())
        longest = max(mx for _, _, mx in per_card.values())
        o_ray = t["ray"]["overhead_ms"] / 1000
        o_loc = t["local"]["overhead_ms"] / 1000
        print(
            f"\n3. projected full mutation run (default sample: at most {DEFAULT_MAX_MUTANTS} per card): {full_jobs} "
            f"mutant jobs, {full_s / 60:.1f} process-min (each card's mean mutant time above x its sample)"
        )
        print(f"   this machine, local pool: {(full_s + full_jobs * o_loc) / SLOTS / 60:6.1f} min")
        for k in (1, 2, 4, 8, 16, 32):
            wall = t["ray"]["start_s"] + max(longest, (full_s + full_jobs * o_ray) / (SLOTS * k))
            print(f"   ray, {k:>2} node(s) x {SLOTS} CPUs:      {wall / 60:6.1f} min")
        print(
            f"   (longest single mutant job {longest:.1f} s bounds any cluster; per-job overhead {o_ray * 1000:.0f} ms "
            f"on ray, {o_loc * 1000:.0f} ms local, from 1.; network transfer of the code and data to remote "
            "nodes not included: once per node)"
        )


if __name__ == "__main__":
    main()
