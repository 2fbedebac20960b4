"""docs/adding-a-theorem.md runs: its card, witness module and liar, extracted from the Markdown by their
``<!-- walkthrough: NAME -->`` markers, reach PROVEN in a scratch copy of the project; the variants the page
describes (a weaker witness: VACUOUS; a wrong truncate: FAILED with the shrunk example) do what it says."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "adding-a-theorem.md"
BLOCK = re.compile(r"<!-- walkthrough: ([\w-]+) -->\n```(\w+)\n(.*?)\n```", re.S)
TRUNCATE = "        self._n = n\n"  # the body line of impl.kv.KVCache.truncate the FAILED variant replaces


def doc_blocks() -> dict[str, tuple[str, str]]:
    """name -> (language, code) of every marked fenced block."""
    return {name: (lang, code + "\n") for name, lang, code in BLOCK.findall(DOC.read_text(encoding="utf-8"))}


def scratch_project(dest: Path, blocks: dict[str, tuple[str, str]]) -> Path:
    """What the walk-through needs of the project, plus the doc's files, under ``dest``."""
    shutil.copytree(REPO / "impl", dest / "impl", ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "witnesses" / "liars").mkdir(parents=True)
    for rel in (
        "witnesses/conftest.py",
        "witnesses/synthetic.py",
        "witnesses/liars/__init__.py",
        "obligations/card.schema.json",
        "run_obligations.py",
    ):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, dest / rel)
    (dest / "obligations" / "KV-T9.yaml").write_text(blocks["card"][1])
    (dest / "witnesses" / "test_kv_t9.py").write_text(blocks["witness"][1])
    (dest / "witnesses" / "liars" / "rewind.py").write_text(blocks["liar"][1])
    return dest


def kvproof(root: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    env = {
        **os.environ,
        "KVPROOF_ROOT": str(root),
        "COLUMNS": "200",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    for name in ("KVPROOF_CARDS_DIR", "KVPROOF_REPORTS_DIR"):
        env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, str(root / "run_obligations.py"), *args, "--json", "v.json", "-j", "1"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    path = root / "v.json"
    assert path.exists(), proc.stdout + proc.stderr
    return proc, json.loads(path.read_text())


@pytest.fixture(scope="module")
def blocks() -> dict[str, tuple[str, str]]:
    return doc_blocks()


def test_the_page_marks_a_card_a_witness_a_liar_and_a_weak_witness(blocks):
    assert {k: lang for k, (lang, _) in blocks.items()} == {
        "card": "yaml",
        "witness": "python",
        "liar": "python",
        "weak-witness": "python",
    }
    card = yaml.safe_load(blocks["card"][1])
    assert card["id"] == "KV-T9" and card["liars"] == ["kv.truncate_keeps_tail"]
    assert "obligations/KV-T9.yaml" in DOC.read_text()  # the file `new KV-T9` writes
    assert "worst = " not in blocks["witness"][1]  # the accumulator, not a hand-kept maximum


def test_the_walkthrough_card_is_proven_with_its_liar_caught(blocks, tmp_path):
    root = scratch_project(tmp_path / "project", blocks)
    proc, doc = kvproof(root, "run", "KV-T9")
    (card,) = doc["cards"]
    assert (proc.returncode, card["verdict"]) == (0, "PROVEN"), card["reason"] + proc.stdout + proc.stderr
    assert [(entry["name"], entry["caught_by"]) for entry in card["liars"]] == [
        ("kv.truncate_keeps_tail", ["rewind-equals-never-saw"])
    ]
    evidence = card["witnesses"][0]["evidence"]
    assert evidence["max_abs_delta"]["max"] == 0.0 and evidence["examples"] == evidence["max_abs_delta"]["observed"]


def test_the_card_naming_only_the_weak_witness_is_vacuous(blocks, tmp_path):
    root = scratch_project(tmp_path / "project", blocks)
    weak = blocks["weak-witness"][1]
    name = re.search(r"def (test_\w+)", weak).group(1)
    with open(root / "witnesses" / "test_kv_t9.py", "a") as fh:
        fh.write("\n\n" + weak)
    card = root / "obligations" / "KV-T9.yaml"
    card.write_text(card.read_text().replace("test_truncate_then_append_equals_never_saw", name))
    proc, doc = kvproof(root, "run", "KV-T9")
    (entry,) = doc["cards"]
    assert (proc.returncode, entry["verdict"]) == (1, "VACUOUS"), entry["reason"]
    assert "liar kv.truncate_keeps_tail survived" in entry["reason"]


def test_a_truncate_that_keeps_a_rewound_row_is_failed_with_the_shrunk_example(blocks, tmp_path):
    root = scratch_project(tmp_path / "project", blocks)
    kv = root / "impl" / "kv.py"
    text = kv.read_text()
    body = text[text.index("    def truncate(self, n: int)") :]
    assert body.count(TRUNCATE) >= 1, "impl.kv.KVCache.truncate changed: update TRUNCATE"
    wrong = re.search(r"def truncate\(self, n\):\n(.*)", blocks["liar"][1], re.S).group(1)  # the liar's body
    kv.write_text(text.replace(body, body.replace(TRUNCATE, "    " + wrong.strip("\n") + "\n", 1)))
    proc, doc = kvproof(root, "run", "KV-T9", "--timeout", "300")  # shrinking runs ~200 more examples
    (card,) = doc["cards"]
    assert (proc.returncode, card["verdict"]) == (1, "FAILED"), card["reason"]
    hyp = card["witnesses"][0]["hypothesis"]
    assert "prop(" in hyp["example"] and "n=" in hyp["example"]
    assert hyp["replay"].endswith("run_obligations.py run KV-T9 --profile ci --seed 0"), hyp["replay"]
    assert card["liars"][0]["status"] == "not_run"
