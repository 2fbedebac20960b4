#!/usr/bin/env python3
"""How much of impl/kernels.c do the cards' witnesses execute? Line coverage by gcov, through every card.

    python bench/kernel_coverage.py [--tree PATH] [-j 2] [ID ...]

1. builds the kernel as the tree's ``impl.kernels.build()`` would, in a temporary kernel cache
   (``KVPROOF_KERNEL_CACHE``), then replaces that library with a coverage build of the same source
   (``--coverage -fprofile-update=atomic``, ``-O1`` instead of ``-O3``: the same arithmetic, since nothing is
   contracted or reassociated, and lines gcov can attribute);
2. runs the tree's cards (honest witnesses only: ``--no-liars``; liars are wrong code) with that cache and
   ``KVPROOF_LAUNCHER=subprocess``, so each witness process exits normally and writes its counts;
3. prints gcov's summary (lines executed of the instrumented lines) and the functions with lines no witness
   executed.

``--tree`` measures another checkout (e.g. a ``git worktree`` of an older commit) with this script.
Figures only, no asserts.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COV_FLAGS = ("-O1", "--coverage", "-fprofile-update=atomic", "-ffp-contract=off", "-fopenmp", "-fPIC", "-shared")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]), help="the checkout to measure")
    ap.add_argument("-j", type=int, default=2, help="witness processes at a time (default 2)")
    ap.add_argument("--isa", default="", help="measure this KVPROOF_KERNEL_ISA build (avx512, avx2, portable)")
    ap.add_argument("ids", nargs="*", help="card ids (default: every card)")
    args = ap.parse_args()
    tree = Path(args.tree).resolve()
    src = tree / "impl" / "kernels.c"
    if not src.is_file():
        sys.exit(f"kernel_coverage.py: {src} does not exist; --tree must be a kvproof checkout")
    head = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%h %cs"], capture_output=True, text=True)
    print(
        f"bench/kernel_coverage.py  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  tree {tree} "
        f"({head.stdout.strip()})"
    )
    with tempfile.TemporaryDirectory(prefix="kvcov-") as tmp:
        tmpd = Path(tmp)
        cache, build = tmpd / "kernels", tmpd / "build"
        build.mkdir()
        env = {**os.environ, "KVPROOF_KERNEL_CACHE": str(cache), "KVPROOF_LAUNCHER": "subprocess"}
        env.pop("KVPROOF_KERNEL", None)
        march: tuple[str, ...] = ("-march=native",)
        if args.isa:
            env["KVPROOF_KERNEL_ISA"] = args.isa
            flags = subprocess.run(
                [sys.executable, "-c", f"import impl.kernels as k; print(' '.join(k.ISA_BUILDS[{args.isa!r}].flags))"],
                cwd=tree,
                env={**env, "PYTHONPATH": str(tree)},
                capture_output=True,
                text=True,
            )
            if flags.returncode != 0:
                sys.exit(f"kernel_coverage.py: --isa {args.isa}: {flags.stderr.strip()[-300:]}")
            march = tuple(flags.stdout.split())
        probe = subprocess.run(
            [sys.executable, "-c", "import impl.kernels as k; print(k.build())"],
            cwd=tree,
            env={**env, "PYTHONPATH": str(tree)},
            capture_output=True,
            text=True,
        )
        if probe.returncode != 0:
            sys.exit(f"kernel_coverage.py: the tree's kernel does not build: {probe.stderr.strip()[-500:]}")
        lib = Path(probe.stdout.strip().splitlines()[-1])
        shutil.copy(src, build / "kvkernel.c")
        cc = os.environ.get("CC") or "cc"
        r = subprocess.run(
            [cc, *COV_FLAGS, *march, "-o", "kv.so", "kvkernel.c", "-lm"],
            cwd=build,
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            sys.exit(f"kernel_coverage.py: the coverage build failed: {r.stderr[-2000:]}")
        shutil.copy(build / "kv.so", lib)  # the tree loads the coverage build under its usual name
        t0 = time.perf_counter()
        run = subprocess.run(
            [
                sys.executable,
                "run_obligations.py",
                "run",
                *args.ids,
                "--no-liars",
                "-j",
                str(args.j),
                "--reports",
                str(tmpd / "reports"),
            ],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - t0
        gate = next((ln for ln in (run.stdout + run.stderr).splitlines() if ln.startswith("gate ")), "no gate line")
        print(f"cards: {' '.join(args.ids) or 'every card'}, honest witnesses only, -j {args.j}: {wall:.1f} s; {gate}")
        gcda = list(build.glob("*.gcda"))
        if not gcda:
            sys.exit("kernel_coverage.py: no coverage counts were written (did any witness load the kernel?)")
        g = subprocess.run(
            ["gcov", "-f", "-n", "-o", str(build), str(gcda[0])], cwd=build, capture_output=True, text=True
        )
        out = g.stdout
        total = re.findall(r"File 'kvkernel\.c'\nLines executed:([\d.]+)% of (\d+)", out)
        if total:
            pct, n = total[0]
            build_name = args.isa or "auto (-march=native)"
            print(f"impl/kernels.c: lines executed {pct}% of {n} instrumented lines (gcov, the {build_name} build)")
        fns = re.findall(r"Function '([^']+)'\nLines executed:([\d.]+)% of (\d+)", out)
        short = sorted(((float(p), f, int(n)) for f, p, n in fns if float(p) < 100.0), key=lambda t: t[0])
        if short:
            print("functions with lines no witness executed (executed % of lines):")
            for p, f, n in short:
                print(f"  {f:<32} {p:6.2f}% of {n}")


if __name__ == "__main__":
    main()
