"""Export the transformers reference for SmolLM2 (the only torch importer).

Runs Hugging Face transformers on the same GGUF that impl loads:
``AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
dtype=torch.float32, attn_implementation="eager")`` on the CPU with the hub
offline. transformers de-quantizes the Q4_1 tensors to float32 itself, so
this is an independent reading of the file (its own GGUF parser, its own
un-permutation of attn_q/attn_k, its own RoPE and attention).

What is recorded, and the facts behind it (transformers 5.24, torch 2.13):

- Token ids are ``tokenizer(text, add_special_tokens=False)``. The GGUF
  tokenizer adds no BOS in any case (its post-processor template is empty),
  matching Hugging Face SmolLM2. Digits: see ``harness.oracle.prompts``.
- ``hidden`` is exactly ``output_hidden_states=True``: n_layers+1 entries,
  entry 0 the token embeddings, entry i (1 <= i < n_layers) the residual
  stream after decoder layer i, and the LAST entry AFTER the final RMSNorm
  (``model.model.norm``), not the raw output of the last layer. Measured:
  ``lm_head(hidden[-1]) == logits`` exactly, and ``norm(raw) == hidden[-1]``.
  The raw output of the last layer is captured by a forward hook and saved
  as ``hidden_last_raw`` so impl's raw residual stream can be compared at
  every layer.
- Greedy continuations are a manual argmax loop over full-sequence
  forwards with ``use_cache=False``: the reference never depends on a KV
  cache, which is what the cache obligations are about.
"""

from __future__ import annotations

import os
import platform
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from harness.oracle.prompts import EVICTION_SEGMENTS, GREEDY_NEW_TOKENS, MIN_LONG_TOKENS, REFERENCE_PROMPTS
from harness.oracle.store import ExportWriter, eviction_path, prompt_path

HIDDEN_STATES_DOC = (
    "transformers output_hidden_states: n_layers+1 entries; [0] token embeddings, [i] residual "
    "stream after decoder layer i for 1 <= i < n_layers, [n_layers] = final RMSNorm applied to the "
    "output of layer n_layers (lm_head(hidden[-1]) == logits). hidden_last_raw = output of layer "
    "n_layers before the final norm (forward hook)."
)


class _Reference:
    """The transformers model and tokenizer, with the few calls the export needs."""

    def __init__(self, weights_path: Path) -> None:
        os.environ["HF_HUB_OFFLINE"] = "1"  # NOTE: must precede the transformers import
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF de-quantize bar; read at tqdm import
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        transformers.utils.logging.disable_progress_bar()
        self.torch = torch
        folder, name = str(weights_path.parent), weights_path.name
        self.tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        self.model = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=name, dtype=torch.float32, attn_implementation="eager"
        )
        self.model.eval()
        self.n_layers = int(self.model.config.num_hidden_layers)

    def encode(self, text: str) -> np.ndarray:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return np.asarray(ids, dtype=np.int32)  # (T,)

    def default_call_adds_special(self) -> bool:
        """Whether plain ``tokenizer(text)`` adds anything (measured: it does not)."""
        text = next(iter(REFERENCE_PROMPTS.values()))
        return list(self.tokenizer(text)["input_ids"]) != list(self.encode(text))

    def forward(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(logits (T, vocab), hidden (n_layers+1, T, hidden), last layer raw (T, hidden))."""
        torch = self.torch
        captured: dict[str, Any] = {}

        def hook(_module: Any, _inputs: Any, output: Any) -> None:
            captured["raw"] = output[0] if isinstance(output, tuple) else output

        handle = self.model.model.layers[-1].register_forward_hook(hook)
        try:
            with torch.no_grad():
                out = self.model(
                    torch.as_tensor(ids[None, :], dtype=torch.long), output_hidden_states=True, use_cache=False
                )
        finally:
            handle.remove()
        logits = out.logits[0].float().numpy()  # (T, vocab)
        hidden = torch.stack([h[0] for h in out.hidden_states]).float().numpy()  # (L+1, T, D)
        raw = captured["raw"].reshape(len(ids), -1).float().numpy()  # (T, D)
        return logits, hidden, raw

    def last_logits(self, ids: np.ndarray) -> np.ndarray:
        torch = self.torch
        with torch.no_grad():
            out = self.model(torch.as_tensor(ids[None, :], dtype=torch.long), use_cache=False)
        return out.logits[0, -1].float().numpy()  # (vocab,)

    def greedy(self, ids: np.ndarray, n: int, advance: Any = None) -> np.ndarray:
        """n greedy tokens after ids, each from a fresh full-sequence forward."""
        seq = list(ids)
        new = []
        for _ in range(n):
            tok = int(np.argmax(self.last_logits(np.asarray(seq, dtype=np.int32))))
            new.append(tok)
            seq.append(tok)
            if advance:
                advance()
        return np.asarray(new, dtype=np.int32)


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("torch", "transformers", "accelerate", "gguf", "numpy", "tokenizers"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "absent"
    return out


DIGITS_DOC = (
    "no Digits pre-tokenizer (SmolLM2's tokenizer.json has one), but no vocabulary token longer "
    "than one character contains an ASCII digit, so ASCII digits are always single tokens either "
    "way; non-ASCII numerics (e.g. ' \u00bd') can differ. The prompts contain none."
)


class _Bar:
    """The export's one progress bar: a tick per model load, prompt forward and greedy token; a description
    saying what runs now."""

    LINE_EVERY_S = 10.0  # off a terminal (a CI log): a plain line when the step changes, at most this often

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.steps = 2 + len(REFERENCE_PROMPTS) * (1 + GREEDY_NEW_TOKENS) + 2 * GREEDY_NEW_TOKENS
        self.task = progress.add_task("loading transformers", total=self.steps)
        self.done_steps, self.desc, self.t0, self.last = 0, "loading transformers", time.perf_counter(), None
        self._line(force=True)

    def _line(self, force: bool = False) -> None:
        """Off a terminal the bar draws nothing: say where the export is in a plain line instead (a log that sat on
        "exporting" for five minutes looked hung)."""
        console = self.progress.console
        now = time.perf_counter()
        if console.is_terminal or not (force or self.last is None or now - self.last >= self.LINE_EVERY_S):
            return
        self.last = now
        console.print(
            f"oracle export: {self.done_steps}/{self.steps} {self.desc} ({now - self.t0:.0f} s)",
            highlight=False,
            soft_wrap=True,
        )

    def say(self, desc: str) -> None:
        self.progress.update(self.task, description=desc)
        self.desc = desc
        self._line()

    def advance(self, desc: str | None = None) -> None:
        self.progress.update(self.task, advance=1, **({"description": desc} if desc else {}))
        self.done_steps += 1
        self.desc = desc or self.desc
        self._line()

    def done(self) -> None:
        self.progress.update(self.task, completed=self.steps, description="done")
        self.done_steps, self.desc = self.steps, "done"
        self._line(force=True)


def _export_prompts(ref: _Reference, writer: ExportWriter, bar: _Bar) -> list[dict[str, Any]]:
    """Per reference prompt: ids, logits, hidden states, argmax and greedy tokens; returns the manifest's prompts."""
    prompts_meta = []
    for name, text in REFERENCE_PROMPTS.items():
        bar.say(f"prompt {name}: forward")
        ids = ref.encode(text)
        if name == "long":
            assert len(ids) >= MIN_LONG_TOKENS, f"long prompt has {len(ids)} tokens"
        logits, hidden, raw = ref.forward(ids)
        assert hidden.shape == (ref.n_layers + 1, len(ids), ref.model.config.hidden_size), hidden.shape
        bar.advance(f"prompt {name}: greedy")
        greedy = ref.greedy(ids, GREEDY_NEW_TOKENS, bar.advance)
        for fld, arr in (
            ("ids", ids),
            ("logits", logits),
            ("hidden", hidden),
            ("hidden_last_raw", raw),
            ("argmax", np.argmax(logits, axis=-1).astype(np.int32)),
            ("greedy", greedy),
        ):
            writer.save(prompt_path(name, fld), arr)
        prompts_meta.append(
            {"name": name, "text": text, "n_tokens": int(len(ids)), "greedy_text": ref.tokenizer.decode(greedy)}
        )
    return prompts_meta


def _export_eviction(ref: _Reference, writer: ExportWriter, bar: _Bar) -> dict[str, Any]:
    """The eviction fixture: segment ids, greedy after prefix+query and after prefix+poison+query; returns the
    manifest's ``eviction``."""
    bar.say("eviction fixture: greedy")
    seg = {k: ref.encode(v) for k, v in EVICTION_SEGMENTS.items()}
    never = ref.greedy(np.concatenate([seg["prefix"], seg["query"]]), GREEDY_NEW_TOKENS, bar.advance)
    poisoned = ref.greedy(np.concatenate([seg["prefix"], seg["poison"], seg["query"]]), GREEDY_NEW_TOKENS, bar.advance)
    for k, arr in seg.items():
        writer.save(eviction_path(f"{k}_ids"), arr)
    writer.save(eviction_path("never_greedy"), never)
    writer.save(eviction_path("poisoned_greedy"), poisoned)
    return {
        "segments": dict(EVICTION_SEGMENTS),
        "never_greedy": "greedy after prefix+query",
        "poisoned_greedy": "greedy after prefix+poison+query",
        "never_text": ref.tokenizer.decode(never),
        "poisoned_text": ref.tokenizer.decode(poisoned),
    }


def _model_doc(ref: _Reference) -> dict[str, Any]:
    cfg = ref.model.config
    return {
        "n_layers": ref.n_layers,
        "hidden": int(cfg.hidden_size),
        "vocab": int(cfg.vocab_size),
        "n_heads": int(cfg.num_attention_heads),
        "n_kv_heads": int(cfg.num_key_value_heads),
        "rope_theta": float(cfg.rope_parameters["rope_theta"]) if getattr(cfg, "rope_parameters", None) else None,
        "rms_norm_eps": float(cfg.rms_norm_eps),
    }


def _tokenizer_doc(ref: _Reference) -> dict[str, Any]:
    backend = ref.tokenizer.backend_tokenizer
    return {
        "call": "tokenizer(text, add_special_tokens=False)",
        "bos_added": False,
        "default_call_adds_bos": ref.default_call_adds_special(),
        "bos_token": ref.tokenizer.bos_token,
        "bos_token_id": ref.tokenizer.bos_token_id,
        "pre_tokenizer": backend.pre_tokenizer.__getstate__().decode() if backend.pre_tokenizer else None,
        "post_processor": backend.post_processor.__getstate__().decode() if backend.post_processor else None,
        "digits": DIGITS_DOC,
    }


def _manifest(
    ref: _Reference,
    weights_path: Path,
    weights_sha256: str,
    t0: float,
    prompts: list[dict[str, Any]],
    eviction: dict[str, Any],
) -> dict[str, Any]:
    """The manifest without its ``files`` table (:meth:`ExportWriter.commit` adds that); ``t0`` from perf_counter."""
    return {
        "created_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "export_seconds": round(time.perf_counter() - t0, 1),
        "weights": {
            "file": weights_path.name,
            "path": str(weights_path),
            "sha256": weights_sha256,
            "bytes": weights_path.stat().st_size,
        },
        "versions": _versions(),
        "reference": {
            "library": "transformers",
            "load": (
                "AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32, "
                "attn_implementation='eager')"
            ),
            "device": "cpu",
            "use_cache": False,
            "greedy": "argmax over the last position of a full-sequence forward, repeated",
            "greedy_new_tokens": GREEDY_NEW_TOKENS,
            "hidden_states": HIDDEN_STATES_DOC,
        },
        "model": _model_doc(ref),
        "tokenizer": _tokenizer_doc(ref),
        "prompts": prompts,
        "eviction": eviction,
    }


def export_oracle(
    target: Path, weights_path: Path, weights_sha256: str, console: Console | None = None
) -> dict[str, Any]:
    """Compute the reference and write it atomically to ``target``.

    Returns the manifest as written (with its ``files`` table). Raises ImportError when torch or
    transformers is missing, and whatever transformers raises on a GGUF it
    cannot read (the folder at ``target`` is then left as it was).
    """
    console = console or Console(stderr=True)
    t0 = time.perf_counter()
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress, ExportWriter(target) as writer:
        bar = _Bar(progress)
        ref = _Reference(weights_path)
        bar.advance("loading tokenizer + model")
        prompts = _export_prompts(ref, writer, bar)
        eviction = _export_eviction(ref, writer, bar)
        bar.say("writing")
        written = writer.commit(_manifest(ref, weights_path, weights_sha256, t0, prompts, eviction))
        bar.done()
    return written
