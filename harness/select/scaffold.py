"""`kvproof new ID`: scaffold a card and a witness that fails until written; `kvproof init`: a new project.

The scaffolded card holds placeholders (TODO in its title, theorem and
proof: :data:`harness.select.problems.PLACEHOLDER`; ``refs: []``) that
``validate`` names and ``run`` refuses (the card is ERROR, not run) until
they are replaced; the scaffolded witness calls pytest.fail, so the card is
then FAILED, never PROVEN, until someone writes its check. ``init``
writes a project that runs at once: a small example cache, its target
adapter, the witness conftest, a witness module importing kvproof's shipped
claims, one liar and one card (:data:`STARTER_CARD`: no placeholder, its
refs listed), PROVEN by ``kvproof run``; the cache and adapter are
then replaced by one's own (docs/prove-your-own-cache.md).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from harness.errors import UsageError
from harness.select.cards import SCHEMA_PATH, display_path, find_card_files, load_card, valid_card_id

CARD_TEMPLATE = """\
# yaml-language-server: $schema={schema}
id: {id}
title: TODO one line saying what is claimed
module: {module}{pad}# the module under proof, e.g. {example}
regime: N                   # N numerical, A algebraic/structural, C integrity, D decision soundness
theorem: >
  TODO: state the claim so that it could be false.
proof: >
  TODO: why it holds, citing the mechanism by symbol (list the symbols in refs).
refs: []                    # e.g. [impl/kv.py::KVCache.evict]
witnesses:
  - id: claim
    test: {test}
    # bounds: {{max_abs_delta: {{le: 0}}}}   # a tolerance above zero needs `reason:`
controls: []                # witnesses that must show a difference, e.g. bounds {{max_abs_delta: {{gt: 0}}}}
liars: []                   # wrong variants the witnesses must catch (witnesses/liars/)
version: 1
"""

WITNESS_TEMPLATE = '''\
"""Witnesses for {id} ({card}).

Record what you measure: evidence.record(key, value) once per test,
evidence.observe(key, value) once per Hypothesis example (the worst value
for each bound counts), evidence.count(key) for tallies. The card puts
bounds on those keys.
"""
import pytest


def test_claim(evidence):
    pytest.fail("{id}: witness not written yet; write {test} so it checks the theorem")
'''


def project_module(root: Path) -> str:
    """The module a new card of this project is most likely about: ``impl`` in kvproof's own checkout, else the
    project's distribution name as a module (pyproject.toml ``[project] name``), else the folder's name."""
    if (root / "impl" / "__init__.py").is_file():
        return "impl"
    name = root.resolve().name
    try:
        import tomllib

        if (root / "pyproject.toml").is_file():  # never a FIFO: reading one would block
            with open(root / "pyproject.toml", "rb") as fh:
                name = str(tomllib.load(fh).get("project", {}).get("name") or name)
    except (OSError, ValueError):
        pass
    return re.sub(r"\W", "_", name.replace("-", "_")).strip("_") or "impl"


def scaffold(root: Path, folder: Path, card_id: str) -> tuple[Path, str]:
    """Write the card and its witness module; returns (card path, witness path relative to root).

    Raises UsageError for a bad or taken id, or when either file exists.
    """

    if not valid_card_id(card_id):
        raise UsageError(f"id={card_id!r}: expected a letter then letters, digits, '.', '_' or '-' (e.g. KV-T9)")
    for path in find_card_files(folder):
        _, _, existing = load_card(path, root)
        if existing == card_id:
            raise UsageError(f"id={card_id!r} is already used by {display_path(path, root)}; pick another id")
    slug = re.sub(r"[^a-z0-9]+", "_", card_id.lower()).strip("_")
    card_path = folder / f"{card_id}.yaml"  # like every shipped card: KV-T2.yaml
    witness_rel = f"witnesses/test_{slug}.py"
    witness_path = root / witness_rel
    for path in (card_path, witness_path):
        if path.exists():
            raise UsageError(f"{display_path(path, root)} already exists; remove it or pick another id")
    folder.mkdir(parents=True, exist_ok=True)
    witness_path.parent.mkdir(parents=True, exist_ok=True)
    test = f"{witness_rel}::test_claim"
    schema = os.path.relpath(SCHEMA_PATH, folder)
    module = project_module(root)
    example = "impl.kv" if module == "impl" else f"{module}.cache"
    text = CARD_TEMPLATE.format(
        id=card_id, test=test, schema=schema, module=module, pad=" " * max(1, 20 - len(module)), example=example
    )
    card_path.write_text(text, encoding="utf-8")
    witness_path.write_text(
        WITNESS_TEMPLATE.format(id=card_id, test=test, card=display_path(card_path, root)), encoding="utf-8"
    )
    return card_path, witness_rel


# ---------------------------------------------------------------- kvproof init

STARTER_CACHE = '''"""An example KV cache, the one `kvproof init` proves first: replace it with your own.

Keys and values of every layer and head, appended a few positions at a time, read back, truncated,
forked. Rows are (layers, heads, positions, head_dim) float32.
"""

import numpy as np


class ExampleCache:
    def __init__(self, n_layers, n_heads, head_dim):
        self.k = np.zeros((n_layers, n_heads, 0, head_dim), np.float32)
        self.v = np.zeros_like(self.k)

    def __len__(self):
        return self.k.shape[2]

    def append(self, k, v):
        self.k = np.concatenate([self.k, k], axis=2)  # a new array: the caller's k stays the caller's
        self.v = np.concatenate([self.v, v], axis=2)

    def truncate(self, n):
        if not 0 <= n <= len(self):
            raise ValueError(f"truncate({n}): n must be in 0..{len(self)}")
        self.k, self.v = self.k[:, :, :n].copy(), self.v[:, :, :n].copy()

    def fork(self):
        other = ExampleCache(1, 1, 1)
        other.k, other.v = self.k.copy(), self.v.copy()
        return other
'''

STARTER_ADAPTER = '''"""The example cache as a kvproof target (docs/targets.md says what each verb means).

Replace ExampleCache with your cache, map each verb to its calls, and declare the capabilities it has.
"""

import numpy as np

from example_cache import ExampleCache
from harness.targets.protocol import Numerics, Rows, Target, Visible, check_rows, not_capable


class ExampleHandle:
    """One ExampleCache per batch element; rows go in and out as (L, B, H, T, D) float32."""

    trace = None  # kvproof records the verbs itself: a failure's reproduction replays them

    def __init__(self, geometry, window, caches):
        self.target, self.geometry, self.window, self.caches = TARGET, geometry, window, caches
        self.batch = len(caches)

    def __len__(self):
        return len(self.caches[0])

    def mask_sizes(self, query_len):
        return len(self) + query_len, 0  # no window: every query sees every position from 0

    def append(self, k, v):
        check_rows(self.geometry, self.batch, k, v)
        length, offset = self.mask_sizes(k.shape[3])
        for b, cache in enumerate(self.caches):
            cache.append(k[:, b], v[:, b])
        rows = self.read()
        return Visible(rows.k, rows.v, rows.positions, length, offset)

    def read(self):
        k = np.stack([c.k for c in self.caches], axis=1)  # a copy: rows returned are the caller's
        v = np.stack([c.v for c in self.caches], axis=1)
        return Rows(k, v, np.arange(len(self), dtype=np.int64))

    def truncate(self, n):
        for cache in self.caches:
            cache.truncate(n)

    def fork(self):
        return ExampleHandle(self.geometry, self.window, [c.fork() for c in self.caches])

    def reorder(self, idx):
        raise not_capable(self.target, "reorder", "reorder")

    def select(self, idx):
        raise not_capable(self.target, "select", "select")

    def repeat(self, r):
        raise not_capable(self.target, "repeat", "repeat")


def build(geometry, batch, window, capacity, trace=None):
    g = geometry
    return ExampleHandle(g, window, [ExampleCache(g.n_layers, g.n_kv_heads, g.head_dim) for _ in range(batch)])


TARGET = Target(
    name="example",
    title="example_cache.ExampleCache: one per batch element",
    distribution="example",
    capabilities=frozenset({"append", "read", "truncate", "fork", "mask", "grow"}),
    numerics=Numerics.exact(),
    refs=("example_cache.py::ExampleCache.append", "example_cache.py::ExampleCache.truncate"),
    build=build,
    own=True,
)
'''

STARTER_WITNESSES = '''"""Witnesses for the example cache: shipped claims (harness.targets.claims has them all)."""

from harness.targets.claims import (  # noqa: F401 (pytest collects the claims imported here)
    test_every_live_handle_agrees_after_every_step,
)
'''

STARTER_LIAR = '''"""Liars: wrong versions of the example cache's code that the card's witnesses must catch."""

from harness import liar


@liar(
    "example.truncate_keeps_one_more",
    target="example_cache:ExampleCache.truncate",
    why="an off-by-one: truncate(n) keeps the first position it should drop",
)
def truncate(self, n):
    if not 0 <= n <= len(self):
        raise ValueError(f"truncate({n}): n must be in 0..{len(self)}")
    keep = min(n + 1, len(self))
    self.k, self.v = self.k[:, :, :keep].copy(), self.v[:, :, :keep].copy()
'''

STARTER_CARD = """# yaml-language-server: $schema={schema}
id: EXAMPLE-HANDLES
title: Every live handle of the example cache agrees with a list of rows after every step
module: example_cache
regime: A
theorem: >
  Random programs over up to 4 live handles of the example cache (appends,
  truncates, forks of forks), with every handle checked after every step,
  leave each holding exactly the rows appended to it and never to another.
proof: >
  ExampleCache.append concatenates into new arrays, ExampleCache.truncate
  keeps a copy of the first n positions, ExampleCache.fork copies both
  arrays: no two handles ever share storage.
refs:
  - example_cache.py::ExampleCache.append
  - example_cache.py::ExampleCache.truncate
  - example_cache.py::ExampleCache.fork
  - example_kvproof.py::ExampleHandle
witnesses:
  - id: handles-agree
    test: witnesses/test_example_cache.py::test_every_live_handle_agrees_after_every_step
    bounds: {{examples: {{ge: 10}}, truncates_inside_a_shared_history: {{ge: 20}}}}
liars: [example.truncate_keeps_one_more]
tags: [example]
version: 1
"""

TOOL_TABLE = """
[tool.kvproof]
targets = ["example_kvproof:TARGET"]  # module:NAME of each Target this project proves
"""


def init_project(dest: Path) -> list[Path]:
    """Write a new kvproof project into ``dest`` (made if missing); returns the files written or changed.

    Refuses (UsageError, nothing written) when ``dest`` is already a kvproof project or any file it would
    write exists. An existing ``pyproject.toml`` without a ``[tool.kvproof]`` table gets one appended."""
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"init {dest}: not a folder; name a folder to make the project in")
    pyproject = dest / "pyproject.toml"
    if pyproject.exists() and not pyproject.is_file():  # a folder, a FIFO (reading it would block), a device
        raise UsageError(f"init {dest}: {pyproject} is not a regular file; remove it or init another folder")
    try:
        text = pyproject.read_text(encoding="utf-8") if pyproject.is_file() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"init {dest}: {pyproject} cannot be read ({exc}); fix it or init another folder") from None
    has_table = bool(re.search(r"^\[tool\.kvproof\]", text, re.M))
    if has_table or (dest / "obligations").exists():
        why = "[tool.kvproof] in pyproject.toml" if has_table else "an obligations/ folder"
        raise UsageError(f"init {dest}: already a kvproof project ({why}); add cards with `kvproof new ID`")
    files = {
        "example_cache.py": STARTER_CACHE,
        "example_kvproof.py": STARTER_ADAPTER,
        "witnesses/conftest.py": 'pytest_plugins = ["harness.plugin", "harness.targets.fixture"]\n',
        "witnesses/test_example_cache.py": STARTER_WITNESSES,
        "witnesses/liars/example.py": STARTER_LIAR,
        "obligations/EXAMPLE-HANDLES.yaml": STARTER_CARD.format(
            schema=os.path.relpath(SCHEMA_PATH, dest / "obligations")
        ),
    }
    taken = [rel for rel in files if (dest / rel).exists()]
    if taken:
        raise UsageError(f"init {dest}: {', '.join(taken)} already exist(s); init writes only new files")
    written = []
    for rel, body in files.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(body, encoding="utf-8")
        written.append(dest / rel)
    if text:
        pyproject.write_text(text.rstrip("\n") + "\n" + TOOL_TABLE, encoding="utf-8")
    else:
        head = f'[project]\nname = "{dest.resolve().name}"\nversion = "0.1.0"\n'
        pyproject.write_text(head + TOOL_TABLE, encoding="utf-8")
    written.append(pyproject)
    return written
