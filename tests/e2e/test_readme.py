"""README.md stays a two-minute read that tells the truth.

It is short and names no issue; its first code block holds the two commands CI and the Makefile
really run; the card it shows is the named file's own text and loads as ``validate`` loads it; the
output it shows has the shape the same command prints now; every relative link of the README and of
the docs pages it leads to points at a file (and a heading) that exists.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.select.selection import load
from harness.statuses import Verdict

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
INDEX = ROOT / "docs" / "index.md"
# the pages the README leads to first; every page here is checked for links and issue numbers
PAGES = [
    README,
    INDEX,
    *(
        ROOT / "docs" / f"{name}.md"
        for name in ("benchmarks", "cli", "ci", "refusals", "verdicts", "runtime", "oracle")
    ),
]
MAX_LINES = 210  # the README's budget is about 200 lines; this is the hard limit
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```$", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
ISSUE = re.compile(r"\bissues?\s*#?\d+", re.I)


def blocks(text: str) -> list[tuple[str, str, int]]:
    """(language, body, offset of the opening fence) of every fenced block, in order."""
    return [(m.group(1), m.group(2), m.start()) for m in FENCE.finditer(text)]


def readme() -> str:
    return README.read_text(encoding="utf-8")


def shown_card() -> tuple[Path, str]:
    """The YAML block of the README and the card file named in the paragraph before it."""
    text = readme()
    (found,) = [(body, at) for lang, body, at in blocks(text) if lang == "yaml"]
    body, at = found
    names = re.findall(r"obligations/[\w.-]+\.yaml", text[max(0, at - 400) : at])
    assert names, "name the card file (obligations/ID.yaml) just before the YAML block"
    return ROOT / names[-1], body


def shown_run() -> tuple[list[str], str]:
    """The command (``$ ...``, first line) and the output of the README's console block."""
    (body,) = [body for lang, body, _ in blocks(readme()) if lang == "console"]
    first, _, output = body.partition("\n")
    assert first.startswith("$ "), "the console block starts with the command it shows: $ COMMAND"
    return shlex.split(first[2:]), output


def test_readme_is_short_and_names_no_issue():
    lines = readme().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/ (index: docs/index.md)"
    for page in PAGES:
        hits = [m.group(0) for m in ISSUE.finditer(page.read_text(encoding="utf-8"))]
        assert hits == [], f"{page.relative_to(ROOT)} names issues {hits}: say what changed and when instead"


def test_readme_starts_with_the_two_commands_ci_and_the_makefile_run():
    text = readme()
    lang, body, at = blocks(text)[0]
    assert text[:at].count("\n") <= 3, "the two commands come first, right under the title"
    commands = [line.split("#", 1)[0].strip() for line in body.splitlines() if line.split("#", 1)[0].strip()]
    assert commands == ["make verify", "make test"]

    ci = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.startswith(("#", "set ", "cd "))
    ]
    assert ci == ["make test"], f".ci/run runs {ci}: the README's test command must be what CI runs"

    makefile = (ROOT / "Makefile").read_text()
    recipes = {m.group(1): m.group(2) for m in re.finditer(r"^(\w+):[^\n=]*\n((?:\t[^\n]*\n)*)", makefile, re.M)}
    assert re.search(r"^\.DEFAULT_GOAL := verify$", makefile, re.M)
    assert "run_obligations.py run" in recipes["verify"]
    assert "pytest" in recipes["test"] and "run_obligations.py run" in recipes["test"]


def test_the_card_shown_is_the_named_file_verbatim_and_loads_as_validate_loads_it():
    path, body = shown_card()
    text = path.read_text(encoding="utf-8")
    assert body in text and (text.startswith(body) or f"\n{body}" in text), (
        f"the README's YAML block is not whole lines of {path.relative_to(ROOT)}: paste it again"
    )
    card_id = yaml.safe_load(body)["id"]
    assert path.stem == card_id

    loaded = load(ROOT, ROOT / "obligations", "obligations")
    (card,) = [c for c in loaded.result.cards if c.id == card_id]
    assert card.source == path.resolve()
    problems = [p for p in (*loaded.result.problems, *loaded.liar_problems) if p.path == card.display_path]
    assert problems == []


def _table(output: str) -> list[dict[str, str]]:
    """The rows of the terminal's verdict table as {column: text} (a wrapped row's first line)."""
    header = next(line for line in output.splitlines() if line.startswith("┃"))
    names = [cell.strip() for cell in header.strip("┃").split("┃")]
    rows = [line for line in output.splitlines() if line.startswith("│") and line[1:2].strip()]
    return [dict(zip(names, (cell.strip() for cell in row.strip("│").split("│")), strict=True)) for row in rows]


def test_the_run_shown_has_the_shape_the_same_command_prints_now(tmp_path):
    argv, shown = shown_run()
    assert argv[:2] == [".venv/bin/python", "run_obligations.py"] and argv[2] == "run"
    path, _ = shown_card()
    assert path.stem in argv, "the README runs the card it shows"

    env = {**os.environ, "COLUMNS": "200"}
    for name in ("KVPROOF_ROOT", "KVPROOF_CARDS_DIR", "KVPROOF_REPORTS_DIR"):
        env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, *argv[1:], "--reports", str(tmp_path / "reports")],  # the project's ledger is left alone
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    now = proc.stdout

    def start(output: str) -> str:  # the start line up to the worker count (which follows the machine's cores)
        return next(line for line in output.splitlines() if line.startswith("kvproof: ")).split(", -j")[0]

    def gate(output: str) -> str:
        line = next(line for line in output.splitlines() if line.startswith("gate "))
        return line.split(" in ")[0]  # "gate PASS: 1 PROVEN of 1 card(s)", without the time

    columns = ("id", "regime", "verdict", "witnesses", "controls", "liars")
    assert start(now) == start(shown), now + proc.stderr
    assert [{k: row[k] for k in columns} for row in _table(now)] == [
        {k: row[k] for k in columns} for row in _table(shown)
    ], now + proc.stderr
    assert gate(now) == gate(shown), now + proc.stderr
    assert proc.returncode == (0 if gate(shown).startswith("gate PASS") else 1), now + proc.stderr
    assert re.search(r"^report \S+index\.html$", now, re.M) and re.search(r"^report \S+index\.html$", shown, re.M)


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_points_at_an_existing_file_and_heading(page):
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert broken == [], f"{page.relative_to(ROOT)}: broken links {broken}"


def test_readme_glossary_names_every_verdict_and_links_the_architecture_page():
    text = readme()
    for word in (*Verdict, "STALE"):
        assert re.search(rf"\b{word}\b", text), f"the README's glossary does not say what {word} means"
    assert "(docs/architecture.md)" in text and "(docs/index.md)" in text


def test_the_docs_index_lists_every_card():
    listed = set(re.findall(r"^\| ([A-Z][\w.-]*) \|", INDEX.read_text(encoding="utf-8"), re.M))
    on_disk = {p.stem for p in (ROOT / "obligations").glob("*.yaml")} - {
        "configurations",
        "equivalent-mutants",
        "targets",
    }
    assert listed == on_disk, "docs/index.md's card table and obligations/ disagree: add or drop a row"
