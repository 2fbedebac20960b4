#!/usr/bin/env python3
"""Decode and prefill speed of impl, beside the machine's limit and transformers.

Prints, from one run (machines are shared and noisy, so compare the ratios):
  - limit: numpy streaming every float32 weight once as a one-row matmul
    (gemv); 1 / that time is the most tokens/s a float32 decode can reach;
  - limit (quantized): that stream's bandwidth over the bytes a quantized
    decode step reads (the GGUF's Q4_1/Q8_0 blocks), when that path is in force;
  - impl decode tokens/s at several contexts on the float32 weights and, when
    in force, from the quantized blocks (same bits), and prefill tokens/s;
  - transformers (torch, float32, eager) on the same GGUF, when the oracle
    extra is installed (skip with --no-transformers).

    python bench/decode.py [--contexts 16,512] [--prefill 512] [--steps 24]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from bench import timing  # noqa: E402
from bench.timing import best_of  # noqa: E402


def weight_matrices(llama) -> list[np.ndarray]:
    """Every matrix a decode step streams, as contiguous (in, out) float32."""
    mats = [np.ascontiguousarray(llama.head.weight().T)]
    for L in llama.layers:
        for lin in (L.wqkv, L.wo, L.w_gate_up, L.w_down):
            mats.append(np.ascontiguousarray(lin.weight().T))
    return mats


def limit_tokens_per_s(mats: list[np.ndarray], repeats: int) -> tuple[float, float]:
    xs = [np.ones((1, m.shape[0]), np.float32) for m in mats]

    def stream():
        for x, m in zip(xs, mats, strict=False):
            x @ m

    stream()
    t = best_of(stream, repeats)
    gbytes = sum(m.nbytes for m in mats) / 1e9
    return 1.0 / t, gbytes / t


def prompt_ids(tok, n: int) -> list[int]:
    text = (
        "The harbour was quiet that morning, and the boats rocked gently against the old stone pier "
        "while gulls argued over scraps near the fish market. "
    )
    ids = tok.encode(text)
    return (ids * (n // len(ids) + 1))[:n]


def impl_decode(model, ctx: int, steps: int, quantized: bool = False) -> float:
    """Median tok/s of ``steps`` decode steps after a ``ctx``-token prefill, on the quantized blocks or the
    float32 weights."""
    from impl.model.gguf_quant import detached

    if quantized:
        return _decode(model, ctx, steps)
    with detached(model.llama):
        return _decode(model, ctx, steps)


def _decode(model, ctx: int, steps: int) -> float:
    s = model.session()
    s.prefill(prompt_ids(model.tokenizer, ctx))
    tok = int(np.argmax(s.last_logits))
    s.step(tok)  # warm
    per = []
    for _ in range(steps):
        t = timing.clock()
        tok = int(np.argmax(s.step(tok)))
        per.append(timing.clock() - t)
    return 1.0 / statistics.median(per)


def impl_prefill(model, n: int, repeats: int) -> float:
    ids = prompt_ids(model.tokenizer, n)
    return n / best_of(lambda: model.session().prefill(ids), repeats)


def hf_measure(gguf: Path, tok, contexts: list[int], steps: int, n_prefill: int, repeats: int):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF conversion bar
    try:
        import inspect

        import torch
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging
    except ImportError:
        return None
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    if timing.clock is time.process_time:
        torch.set_num_threads(1)
    t = time.perf_counter()
    m = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, attn_implementation="eager"
    )
    m.eval()
    load = time.perf_counter() - t
    # transformers 5 renamed past_key_values to cache (the old name still works, slowly, with a warning)
    kw = "cache" if "cache" in inspect.signature(m.forward).parameters else "past_key_values"

    def cache_of(r):
        return getattr(r, "cache", None) if kw == "cache" else r.past_key_values

    out = {"load_s": load, "torch": torch.__version__, "threads": torch.get_num_threads(), "decode": {}}
    with torch.inference_mode():
        for ctx in contexts:
            ids = torch.tensor([prompt_ids(tok, ctx)])
            r = m(ids, use_cache=True)
            past, nxt = cache_of(r), r.logits[:, -1:].argmax(-1)
            per = []
            for _ in range(steps + 1):
                t = timing.clock()
                r = m(nxt, use_cache=True, **{kw: past})
                past, nxt = cache_of(r), r.logits[:, -1:].argmax(-1)
                per.append(timing.clock() - t)
            out["decode"][ctx] = 1.0 / statistics.median(per[1:])
        ids = torch.tensor([prompt_ids(tok, n_prefill)])
        m(ids[:, :8])
        out["prefill"] = n_prefill / best_of(lambda: m(ids, use_cache=False), repeats)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contexts", default="16,512,2048", help="decode contexts, comma list (default 16,512,2048)")
    ap.add_argument("--prefill", type=int, default=512, help="prefill length (default 512)")
    ap.add_argument("--steps", type=int, default=24, help="timed decode steps per context")
    ap.add_argument("--repeats", type=int, default=3, help="repeats for limit and prefill (best is kept)")
    ap.add_argument("--weights", help="GGUF file (default: KVPROOF_GGUF or the packaged one)")
    ap.add_argument("--no-transformers", action="store_true", help="skip the transformers comparison")
    ap.add_argument(
        "--attention", choices=["numpy", "kernel"], help="impl's attention path (default: KVPROOF_ATTENTION or numpy)"
    )
    ap.add_argument(
        "--single-thread",
        action="store_true",
        help="pin impl, numpy's BLAS and torch to one thread and time CPU seconds: "
        "ratios that survive a busy machine (absolute tok/s are per core)",
    )
    a = ap.parse_args()
    if a.attention:
        os.environ["KVPROOF_ATTENTION"] = a.attention
    pin = None
    if a.single_thread:
        from threadpoolctl import threadpool_limits

        pin = threadpool_limits(1)  # OpenBLAS and OpenMP (impl's kernel) in this process  # noqa: F841
        os.environ["OMP_NUM_THREADS"] = "1"
        timing.clock = time.process_time
    contexts = [int(c) for c in a.contexts.split(",")]

    from impl.alloc import status as alloc_status
    from impl.errors import ImplError
    from impl.linear import numerics_path
    from impl.model import load_model

    try:
        t = time.perf_counter()
        model = load_model(a.weights)
        load = time.perf_counter() - t
    except ImplError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        from threadpoolctl import threadpool_info

        blas = ", ".join(
            f"{i['internal_api']} {i.get('version')} {i.get('architecture')} x{i['num_threads']}"
            for i in threadpool_info()
        )
    except ImportError:
        blas = "threadpoolctl not installed"
    print(
        f"# kvproof bench/decode.py  {time.strftime('%Y-%m-%d %H:%M:%S')}  {platform.machine()}, "
        f"{os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}, numpy {np.__version__}, BLAS: {blas}"
    )
    print(f"# numerics: {numerics_path()}")
    print(f"# allocator: {alloc_status()}")
    if a.single_thread:
        print("# --single-thread: one thread everywhere, CPU seconds (process_time); tok/s are per core")
    qbytes = model.llama.decode_nbytes
    quant = qbytes < model.llama.nbytes  # some products decode from the GGUF's blocks
    print(
        f"impl load            {load:8.2f} s   ({model.llama.nbytes / 1e6:.0f} MB float32 weights per token; "
        f"decode: {getattr(model, 'decode', 'float32')}, {qbytes / 1e6:.0f} MB a step)"
    )
    lim, gbs = limit_tokens_per_s(weight_matrices(model.llama), a.repeats)
    print(f"limit (gemv stream)  {lim:8.1f} tok/s  ({gbs:.1f} GB/s)")
    qlim = gbs * 1e9 / qbytes
    if quant:
        print(f"limit (quantized)    {qlim:8.1f} tok/s  ({gbs:.1f} GB/s over {qbytes / 1e6:.0f} MB a step)")
    dec, qdec = {}, {}
    for ctx in contexts:
        dec[ctx] = impl_decode(model, ctx, a.steps)
        print(f"impl decode @{ctx:<6d} {dec[ctx]:8.1f} tok/s  = {dec[ctx] / lim:5.1%} of limit (float32 weights)")
        if quant:
            qdec[ctx] = impl_decode(model, ctx, a.steps, quantized=True)
            print(
                f"impl decode @{ctx:<6d} {qdec[ctx]:8.1f} tok/s  = {qdec[ctx] / qlim:5.1%} of quantized limit, "
                f"{qdec[ctx] / dec[ctx]:.2f}x float32 (quantized blocks, same bits)"
            )
    pre = impl_prefill(model, a.prefill, a.repeats)
    print(f"impl prefill {a.prefill:<6d}  {pre:8.1f} tok/s  ({a.prefill / pre:.2f} s)")
    hf = None
    if not a.no_transformers:
        hf = hf_measure(model.path, model.tokenizer, contexts, a.steps, a.prefill, a.repeats)
        if hf is None:
            print("transformers         not installed (pip install -e '.[oracle]'); no comparison")
        else:
            print(f"hf load              {hf['load_s']:8.2f} s   (torch {hf['torch']}, {hf['threads']} threads)")
            for ctx in contexts:
                print(
                    f"hf decode @{ctx:<6d}   {hf['decode'][ctx]:8.1f} tok/s  -> impl/hf = "
                    f"{dec[ctx] / hf['decode'][ctx]:.2f}x"
                    + (f" (quantized {qdec[ctx] / hf['decode'][ctx]:.2f}x)" if quant else "")
                )
            print(
                f"hf prefill {a.prefill:<6d}    {hf['prefill']:8.1f} tok/s  ({a.prefill / hf['prefill']:.2f} s)"
                f" -> impl/hf = {pre / hf['prefill']:.2f}x"
            )
    print("targets:")
    c0 = contexts[0]
    print(
        f"  decode @{c0} >= 80% of limit        {'met ' if dec[c0] >= 0.8 * lim else 'MISSED'}  ({dec[c0] / lim:.0%})"
    )
    if not a.no_transformers and hf is not None:
        for ctx in contexts:
            got = qdec[ctx] if quant else dec[ctx]  # the path in force (auto: quantized where the file allows)
            r = got / hf["decode"][ctx]
            print(
                f"  decode >= 1.5x transformers        {'met ' if r >= 1.5 else 'MISSED'}  ({r:.2f}x at context {ctx})"
            )
        r = pre / hf["prefill"]
        print(
            f"  prefill >= transformers            {'met ' if r >= 1.0 else 'MISSED'}  "
            f"({r:.2f}x for {a.prefill} tokens)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
