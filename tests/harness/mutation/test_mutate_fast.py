"""The fast mutation path (line coverage, covering witnesses killer-first, warm servers) gives the answers of the
reference path (``mutate --slow``: every mutant a fresh process against every witness in card order), mutant by
mutant, on a fixed sample: every mutant of the fixture project's cards-fast, and a few of real cards.

cards-fast/FX-TABLE is built to reach each way a mutant can run (tests/fixtures/project/fakeimpl/table.py):
``sizes`` runs while the witnesses are collected and ``double`` is held in a parametrize list (both must start
fresh), ``triple`` is imported by name into the witness module and ``Counter`` is a class (both fork from the
warm server), ``clamp``'s cap is never reached, and a mutant of ``spin`` loops in one witness and fails the
one card order puts first. FX-SCALE and FX-LOOP are the mutation fixture's cards
(a cap no witness reaches; mutants that loop until their timeout).
"""

from __future__ import annotations

import json
import re

import pytest
from test_cli_e2e import REPO, _copy_project, _no_traceback, kvproof


def _mutants(doc: dict) -> dict[tuple[str, str], dict]:
    return {(c["id"], m["key"]): m for c in doc["cards"] if c.get("mutation") for m in c["mutation"]["mutants"]}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return _copy_project(tmp_path_factory.mktemp("fast") / "project")


@pytest.fixture(scope="module")
def both(project):
    """(fast, slow): the same mutate run of every mutant of cards-fast, on the default path and with --slow."""
    docs = []
    for name, extra in (("fast", ()), ("slow", ("--slow",))):
        proc = kvproof(
            project,
            "mutate",
            "--cards",
            "cards-fast",
            "--max-mutants",
            "0",
            "-j",
            "2",
            "--json",
            f"{name}.json",
            *extra,
            timeout=600,
        )
        _no_traceback(proc)
        docs.append((proc, json.loads((project / f"{name}.json").read_text())))
    return docs


def test_every_mutant_gets_the_reference_paths_status(both):
    (_, fast), (_, slow) = both
    f, s = _mutants(fast), _mutants(slow)
    assert set(f) == set(s) and len(f) > 30
    assert {k: m["status"] for k, m in f.items()} == {k: m["status"] for k, m in s.items()}
    assert {m["status"] for m in f.values()} >= {"killed", "survived", "timeout"}
    assert all(m["how"] == "fresh" and m["tried"] >= 1 for m in s.values())  # --slow: every mutant runs


def test_a_mutant_no_witness_reaches_is_never_run_and_says_so(both):
    (proc, fast), _ = both
    m = _mutants(fast)[("FX-TABLE", "fakeimpl/table.py:21:8:drop")]  # x = top, past a cap no witness reaches
    assert (m["status"], m["how"], m["tried"], m["duration_s"]) == ("survived", "not reached", 0, 0.0)
    assert m["detail"] == "not reached: no witness runs fakeimpl/table.py:21 (never run)"
    assert "+        pass" in m["diff"]
    table = next(c for c in fast["cards"] if c["id"] == "FX-TABLE")["mutation"]
    assert table["not_reached"] == sum(x["how"] == "not reached" for x in table["mutants"]) >= 1
    assert re.search(r"\d+ not reached \(no witness runs their lines: never run\)", proc.stdout + proc.stderr)


def test_not_reached_means_unexecuted_and_an_executed_line_is_run(both, project):
    """Independently of the tracer: a line made to raise fails a witness exactly when its mutants were run."""
    (_, fast), _ = both
    lines: dict[tuple[str, int], set[str]] = {}
    for (cid, _), m in _mutants(fast).items():
        if cid == "FX-TABLE":
            lines.setdefault((m["path"], m["line"]), set()).add(m["how"])
    assert any(hows == {"not reached"} for hows in lines.values())
    assert any("not reached" not in hows for hows in lines.values())
    src = project / "fakeimpl" / "table.py"
    keep = src.read_text()
    try:
        for (_, line), hows in sorted(lines.items()):
            text = keep.splitlines(keepends=True)
            indent = re.match(r"\s*", text[line - 1]).group(0)
            text.insert(line - 1, f'{indent}raise AssertionError("line {line} ran")\n')
            src.write_text("".join(text))
            proc = kvproof(project, "run", "FX-TABLE", "--cards", "cards-fast", "-j", "1")
            assert (proc.returncode != 0) == ("not reached" not in hows), (line, hows, proc.stdout[-2000:])
    finally:
        src.write_text(keep)


def test_each_mutant_starts_the_way_a_fork_can_reproduce(both):
    (proc, fast), _ = both
    hows = {k: m["how"] for (cid, k), m in _mutants(fast).items() if cid == "FX-TABLE"}

    def how(qualname_line: int) -> set[str]:
        return {h for k, h in hows.items() if int(k.split(":")[1]) == qualname_line}

    assert {h.split(":")[0] for h in how(6)} == {"fresh"}  # sizes() builds the parametrize list
    assert all("runs while the witnesses are imported or collected" in h for h in how(6))
    assert how(11) and all("double is also held by a " in h for h in how(11))  # in a parametrize list
    assert how(16) == {"warm"}  # triple, imported by name: rebound in the fork
    assert how(27) == {"warm"} and how(30) == {"warm"}  # Counter.__init__, Counter.bump
    said = r"mutate: \d+ mutant\(s\) forked from their card's warm server, \d+ started fresh"
    assert re.search(said, proc.stdout + proc.stderr)


def test_a_mutant_runs_against_the_witnesses_that_run_its_line_only(both):
    (_, fast), (_, slow) = both
    f, s = _mutants(fast), _mutants(slow)
    key = ("FX-TABLE", "fakeimpl/table.py:16:11:arith")  # x * 3 -> x / 3: only the triple witness runs it
    assert (f[key]["status"], f[key]["killer"], f[key]["tried"]) == ("killed", "triple", 1)
    assert s[key]["killer"] == "triple" and s[key]["tried"] == 3  # card order: sizes and double pass first
    survivor = ("FX-TABLE", "fakeimpl/table.py:20:7:compare")  # x > top -> x >= top: run, and nothing fails
    assert f[survivor]["status"] == "survived" and f[survivor]["tried"] == 1
    assert "(7 of 8 never run them)" in f[survivor]["detail"]


def test_of_a_parametrized_witness_only_the_nodes_that_run_the_line_run(both, project):
    """pick's negation (line 47) runs in test_pick[neg] only: its mutant runs that node alone, and survives as on
    the reference path (the witness checks no sign); line 46 runs in every node: its mutants run all three.
    Independently of the tracer: that line made to raise fails exactly the [neg] node."""
    (_, fast), (_, slow) = both
    f, s = _mutants(fast), _mutants(slow)
    at = {line: [k for (cid, k) in f if cid == "FX-TABLE" and int(k.split(":")[1]) == line] for line in (46, 47)}
    assert at[46] and at[47]
    for key in at[47]:
        m = f[("FX-TABLE", key)]
        assert (m["status"], s[("FX-TABLE", key)]["status"], m["tried"]) == ("survived", "survived", 1), key
        assert "; pick ran only the node(s) that run them (1) (7 of 8 never run them)" in m["detail"], m["detail"]
    for key in at[46]:
        assert "ran only the node(s)" not in f[("FX-TABLE", key)]["detail"], key
    src = project / "fakeimpl" / "table.py"
    keep = src.read_text()
    try:
        text = keep.splitlines(keepends=True)
        assert text[46].strip() == "return -x"
        text.insert(46, '        raise AssertionError("line 47 ran")\n')
        src.write_text("".join(text))
        kvproof(project, "run", "FX-TABLE", "--cards", "cards-fast", "-j", "1", "--no-liars", "--json", "raised.json")
        card = json.loads((project / "raised.json").read_text())["cards"][0]
        pick = next(w for w in card["witnesses"] if w["id"] == "pick")
        failed = sorted(n["nodeid"] for n in pick["nodes"] if n["outcome"] != "passed")
        assert failed == ["witnesses/test_table.py::test_pick[neg]"], pick
    finally:
        src.write_text(keep)


def test_spin_mutants_get_the_reference_paths_status(both):
    """spin-guarded comes first in card order: under i -= 1 it refuses (killed); under i += 0 both loop (timeout)."""
    (_, fast), (_, slow) = both
    f, s = _mutants(fast), _mutants(slow)
    for key, want in (("fakeimpl/table.py:38:8:arith", "killed"), ("fakeimpl/table.py:38:13:const-1", "timeout")):
        got = {(f[("FX-TABLE", key)]["status"], f[("FX-TABLE", key)]["killer"])}
        got.add((s[("FX-TABLE", key)]["status"], s[("FX-TABLE", key)]["killer"]))
        assert got == {(want, "spin-guarded")}, key


def test_a_timeout_first_is_checked_against_the_witnesses_card_order_puts_before_it(project):
    """A killer guessed from a neighbour puts spin-plain first; it loops under i -= 1. The pool then runs
    spin-guarded, which card order puts before it, and the mutant is killed, as the reference path says."""
    from harness.execute.jobs import JobResult
    from harness.mutation import generate as gen
    from harness.mutation import score
    from harness.mutation.pool import MutantPool
    from harness.mutation.reach import Killers
    from harness.select.cards import load_card
    from harness.wire.messages import NodeResult

    card, problems, _ = load_card(project / "cards-fast" / "FX-TABLE.yaml", project)
    assert not problems
    m = gen.find(project, "fakeimpl/table.py:38:8:arith")[0]
    by = {w.id: w for w in card.witnesses}
    job = score.mutant_job(card, m, {}, ["spin-plain", "spin-guarded"])
    pool = MutantPool({card.id: card}, [(card.id, m, job)], {}, project, killers={card.id: Killers()}, fast=True)
    test = by["spin-plain"].test
    first = JobResult(duration=2.5, stopped=f"the process was stopped after {test} timed out")
    first.results[test] = NodeResult(test, "error", 2.0, message="timeout: still running after 2 s")
    assert not pool.done(job, first)
    follow = pool.more(job, first)
    assert [[w.id for w in j.witnesses] for j in follow] == [["spin-guarded"]]
    then = JobResult(duration=0.2)
    test = by["spin-guarded"].test
    then.results[test] = NodeResult(test, "error", 0.01, message="ValueError: past 10")
    assert pool.done(follow[0], then)  # a follow-up
    r = pool.ran[(card.id, m.key)]
    assert (r.status, r.killer, r.tried, r.duration_s) == ("killed", "spin-guarded", 2, 2.7)
    assert pool.more(follow[0], then) == []


def test_a_real_sample_gets_the_reference_paths_status(tmp_path):
    """Five mutants each of three real cards (seed 0), both ways: the statuses agree mutant by mutant."""
    docs = []
    for name, extra in (("fast", ()), ("slow", ("--slow",))):
        args = ("mutate", "RING-T5", "PKV-KAT", "KV-T1", "--no-liars", "--max-mutants", "5", "-j", "2")
        proc = kvproof(
            REPO,
            *args,
            *extra,
            "--reports",
            str(tmp_path / name),
            "--json",
            str(tmp_path / f"{name}.json"),
            timeout=900,
        )
        _no_traceback(proc)
        docs.append(json.loads((tmp_path / f"{name}.json").read_text()))
    f, s = _mutants(docs[0]), _mutants(docs[1])
    assert set(f) == set(s) and len(f) == 15
    assert {k: m["status"] for k, m in f.items()} == {k: m["status"] for k, m in s.items()}
    assert all(m["how"] in ("warm", "not reached") or m["how"].startswith("fresh: ") for m in f.values())


def test_c_mutants_get_the_same_status_from_the_schema_as_built_alone(tmp_path):
    """A fixed sample of kernels.c's mutants (chosen by what they change, not by line) against KERNEL-ACC: the fast
    path (one schema; the preprocessor's word on #if branches) and --slow (each built alone, compared by bytes)
    agree mutant by mutant."""
    from harness.mutation import cgen

    ms = cgen.generate(REPO, "impl/kernels.c")

    def first(qualname: str, operator: str, nth: int = 0) -> str:
        return [m.key for m in ms if m.qualname == qualname and m.operator == operator][nth]

    keys = [
        first("vexp", "const+1", 2),  # a polynomial coefficient
        first("kv_rope", "arith"),
        first("softmax_numerators", "compare"),
        first("kv_default_threads", "drop"),  # how many threads: results do not depend on it
        first("VFMA", "drop"),  # the generic vector fma: another ISA build's code on an x86-64 with FMA
    ]
    docs = []
    for name, extra in (("fast", ()), ("slow", ("--slow",))):
        args = ["mutate", "KERNEL-ACC", "--no-liars", "-j", "2", *(f"--mutant={k}" for k in keys)]
        proc = kvproof(REPO, *args, *extra, "--reports", str(tmp_path / name), "--json", str(tmp_path / f"{name}.json"))
        _no_traceback(proc)
        docs.append(json.loads((tmp_path / f"{name}.json").read_text()))
    f, s = _mutants(docs[0]), _mutants(docs[1])
    assert set(f) == set(s) and len(f) == len(keys)
    assert {k: m["status"] for k, m in f.items()} == {k: m["status"] for k, m in s.items()}
    assert "killed" in {m["status"] for m in f.values()}
