"""Ring cache memory on SmolLM2's KV geometry: what a session holds vs reserving everything.

    python bench/ring.py            # prints a table; no timing, no asserts

Geometry: 30 layers, 3 KV heads of 64, max_seq_len 8192, a 1024 window on
25 layers and 5 global layers (impl.ring.smollm2_windows(1024)).
"""

from __future__ import annotations

import numpy as np

from impl.model.config import ModelConfig
from impl.ring import RingCache, RingConfig, reserved_bytes


def main() -> None:
    cfg = RingConfig(ModelConfig().kv_geometry, max_seq_len=8192, window=1024, global_layers=(5, 11, 17, 23, 29))
    mib = 2**20
    print(
        f"reserved (every window + full context): f32 {reserved_bytes(cfg) / mib:7.1f} MiB, "
        f"int8 {reserved_bytes(cfg, 'int8') / mib:7.1f} MiB"
    )
    print(f"{'tokens':>7} {'f32 MiB':>9} {'int8 MiB':>9} {'f32 saving':>11}")
    for n in (128, 512, 1024, 2048, 4096, 8192):
        row = []
        for precision in ("f32", "int8"):
            ring = RingCache(cfg, hint=64, precision=precision)
            zeros = np.zeros((n, cfg.geometry.kv_dim), np.float32)
            for layer in range(cfg.geometry.n_layers):
                ring.write_rows(layer, 0, zeros, zeros)
            row.append(ring.nbytes)
        print(f"{n:>7} {row[0] / mib:9.2f} {row[1] / mib:9.2f} {reserved_bytes(cfg) / row[0]:10.2f}x")


if __name__ == "__main__":
    main()
