"""A mutant's name and what it changes: the one type Python (:mod:`harness.mutation.generate`) and C
(:mod:`harness.mutation.cgen`) mutants share.

A mutant is named by its key ``path:line:col:operator[#nth]`` (``impl/kv.py:131:12:compare``,
``impl/kernels.c:412:27:compare``): the file, where the change starts (1-based line, 0-based byte
column) and which operator made it. The key alone rebuilds the mutant from the file's bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from harness.errors import LiarError

OPERATORS = ("arith", "compare", "boolop", "unary", "bool", "const+1", "const-1", "loopctl", "noloop", "minmax", "drop")
C_OPERATORS = (*OPERATORS, "incdec")  # C has ++ and -- (harness.mutation.cgen)

KEY_PATTERN = re.compile(
    r"^(?P<path>[^:]+\.(?:py|c|h)):(?P<line>\d+):(?P<col>\d+):(?P<op>[a-z]+(?:[+-]1|\.\d+)?)(?:#(?P<nth>\d+))?$"
)


@dataclass(frozen=True)
class Mutant:
    """One mutant: where, what it changes, and the text before and after."""

    path: str  # relative to the project root, posix
    qualname: str  # the function or method it changes ("KVCache.evict")
    line: int
    col: int
    operator: str
    before: str  # the source text replaced
    after: str  # what replaces it
    nth: int = 1  # several nodes start at one place (``a * b * c``): the outermost is 1, in ast.walk order
    end_line: int = 0  # the last line of the changed code (0: ``line``); see :attr:`lines`

    @property
    def key(self) -> str:
        return f"{self.path}:{self.line}:{self.col}:{self.operator}" + (f"#{self.nth}" if self.nth > 1 else "")

    @property
    def lines(self) -> range:
        """The lines the changed code spans: the mutant can change what runs only when one of them runs."""
        return range(self.line, max(self.line, self.end_line) + 1)

    @property
    def module(self) -> str:
        """The importable module the file is (``impl/model/__init__.py`` -> ``impl.model``)."""
        parts = list(Path(self.path).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts)

    @property
    def target(self) -> str:
        return f"{self.module}:{self.qualname}"

    @property
    def change(self) -> str:
        """One line: ``before -> after`` (long texts clipped)."""

        def clip(s: str) -> str:
            s = " ".join(s.split())
            return s if len(s) <= 60 else s[:57] + "..."

        return f"{clip(self.before)} -> {clip(self.after)}"


def parse_key(key: str) -> tuple[str, int, int, str, int]:
    """(path, line, col, operator, nth) of a mutant key; LiarError when it is not one."""
    m = KEY_PATTERN.match(key)
    ops = OPERATORS if m is None or m["path"].endswith(".py") else C_OPERATORS
    if not m or m["op"].split(".")[0] not in ops:
        raise LiarError(
            f"mutant={key!r}: not a mutant key; expected PATH.py:LINE:COL:OPERATOR such as impl/kv.py:131:12:compare "
            "(or PATH.c:LINE:COL:OPERATOR for C)"
        )
    return m["path"], int(m["line"]), int(m["col"]), m["op"], int(m["nth"] or 1)


__all__ = ["C_OPERATORS", "KEY_PATTERN", "OPERATORS", "Mutant", "parse_key"]
