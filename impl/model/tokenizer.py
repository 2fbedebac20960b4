"""Byte-level BPE tokenizer built with ``tokenizers`` from the GGUF vocabulary.

Pre-tokenization follows SmolLM2's Hugging Face tokenizer (llama.cpp calls
it pre='smollm'): every digit is its own piece, then GPT-2 byte-level
splitting. Control tokens (token_type 3: <|endoftext|>, <|im_start|>, ...)
are special tokens, matched whole in text.

NOTE: the GGUF's tokenizer.ggml.add_bos_token is not what Hugging Face does
for SmolLM2: its tokenizer adds no BOS. We follow Hugging Face (our oracle),
so ``encode`` never adds special tokens.
"""

from __future__ import annotations

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

CONTROL = 3  # GGUF token_type of special/control tokens


class BPETokenizer:
    """encode(text) -> list[int]; decode(ids) -> str."""

    def __init__(self, tokens: list[str], token_types: list[int], merges: list[str]) -> None:
        vocab = {tok: i for i, tok in enumerate(tokens)}
        pairs = [tuple(m.split(" ", 1)) for m in merges]
        tk = Tokenizer(models.BPE(vocab=vocab, merges=pairs, ignore_merges=False))
        tk.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
        tk.decoder = decoders.ByteLevel()
        specials = [tokens[i] for i, t in enumerate(token_types) if t == CONTROL]
        tk.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
        self._tk = tk
        self.vocab_size = len(tokens)

    def to_json(self) -> str:
        """The whole tokenizer as tokenizers' JSON (for the weights cache)."""
        return self._tk.to_str()

    @classmethod
    def from_json(cls, text: str) -> BPETokenizer:
        """Rebuilt from :meth:`to_json`, lazily: the JSON (49k tokens and merges, ~0.25 s) is parsed on first use,
        so a process that only feeds token ids never pays for it."""
        self = cls.__new__(cls)
        self._json = text
        return self

    def __getattr__(self, name: str):
        # NOTE: only reached for attributes not set yet: _tk and vocab_size of a from_json tokenizer
        if name in ("_tk", "vocab_size") and "_json" in self.__dict__:
            tk = Tokenizer.from_str(self.__dict__.pop("_json"))
            self._tk, self.vocab_size = tk, tk.get_vocab_size(with_added_tokens=True)
            return getattr(self, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; no BOS or other special token is added."""
        return self._tk.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self._tk.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def id_to_token(self, i: int) -> str | None:
        return self._tk.id_to_token(i)
