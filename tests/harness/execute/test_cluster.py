"""``run --executor ray``: the same verdicts as ``-j 2`` on a Ray cluster, jobs that name their node, a worker
killed mid-run retried with nothing lost, and a node with other weights UNVERIFIED, never judged.

The local-cluster tests start Ray through the command line (``--executor ray`` starts and stops a local cluster
per run); the multi-node tests build a cluster of simulated nodes on this machine with ``ray.cluster_utils``
and join it with ``--ray-address``. Ray comes with the cluster extra (``make cluster``; ``make test``
installs it), so these tests run in CI.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the cluster extra is not installed: make cluster")

from harness.errors import UsageError  # noqa: E402
from harness.execute.cluster import check_reachable  # noqa: E402
from harness.execute.shipping import ORACLE, WEIGHTS, Resource, provide  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "project"
ENTRY = REPO / "run_obligations.py"


def _env(root: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "KVPROOF_ROOT": str(root), "COLUMNS": "200", **extra}
    for name in (
        "KVPROOF_CARDS_DIR",
        "KVPROOF_REPORTS_DIR",
        "RAY_ADDRESS",
        "OPENBLAS_NUM_THREADS",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
    ):
        env.pop(name, None)
    return env


def kvproof(root: Path, *args: str, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ENTRY), *args],
        cwd=root,
        env=_env(root, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _verdicts(doc: dict) -> list[tuple]:
    """What must not depend on the executor: each card's verdict, reason, and each liar's outcome."""
    return [
        (c["id"], c["verdict"], c["reason"], [(lv["name"], lv["status"], tuple(lv["caught_by"])) for lv in c["liars"]])
        for c in doc["cards"]
    ]


@pytest.fixture()
def project(tmp_path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__", "reports"))
    return root


def test_local_cluster_gives_the_verdicts_of_j2_and_names_each_jobs_node(project, tmp_path):
    local = kvproof(project, "run", "--cards", "cards-mixed", "-j", "2", "--json", "local.json")
    assert local.returncode == 1 and "Traceback" not in local.stderr, local.stdout + local.stderr
    on_ray = kvproof(
        project,
        "run",
        "--cards",
        "cards-mixed",
        "--executor",
        "ray",
        "-j",
        "2",
        "--json",
        "ray.json",
        KVPROOF_NODE_CACHE=str(tmp_path / "node-cache"),
    )
    assert on_ray.returncode == 1 and "Traceback" not in on_ray.stderr, on_ray.stdout + on_ray.stderr
    a, b = (json.loads((project / f).read_text()) for f in ("local.json", "ray.json"))
    assert _verdicts(a) == _verdicts(b)
    # the mixed cards cover every verdict, a timeout and a crash: they behave on a node as they do here
    assert {c["verdict"] for c in b["cards"]} >= {"PROVEN", "FAILED", "VACUOUS", "UNVERIFIED", "ERROR"}
    assert a["header"]["executor"].startswith("local: 2 process(es)")
    assert b["header"]["executor"].startswith("ray: a local cluster started for this run, 1 node(s), 2 job(s)")
    ran = [c for c in b["cards"] if c["duration_s"]]
    assert ran and all(c["honest_node"] and "node " in c["honest_node"] for c in ran)
    assert all(lv["node"] for c in ran for lv in c["liars"] if lv["status"] != "not_run")
    assert not any(c.get("honest_node") for c in a["cards"])
    page = (project / "reports" / "latest" / "index.html").read_text()
    assert "<dt>executor</dt><dd>ray: a local cluster" in page and "honest process on " in page
    assert "<th>node</th>" in page
    assert "nodes" in on_ray.stdout.split("time per card")[1]  # the timing table names the nodes


def test_real_cards_on_a_local_cluster_match_j2(tmp_path):
    """Every card of this repository, liars included, on a local Ray cluster: the verdicts of -j 2."""
    reports = tmp_path / "reports"
    local = kvproof(REPO, "run", "-j", "2", "--reports", str(reports), "--json", str(tmp_path / "local.json"))
    assert local.returncode == 0, local.stdout[-3000:] + local.stderr[-3000:]
    on_ray = kvproof(
        REPO, "run", "--executor", "ray", "-j", "2", "--reports", str(reports), "--json", str(tmp_path / "ray.json")
    )
    assert on_ray.returncode == 0, on_ray.stdout[-3000:] + on_ray.stderr[-3000:]
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("local.json", "ray.json"))
    assert _verdicts(a) == _verdicts(b)
    assert all(c["verdict"] == "PROVEN" for c in b["cards"])
    assert all(lv["status"] == "caught" for c in b["cards"] for lv in c["liars"])
    assert "weights b179c9523d0e" in b["header"]["executor"] and "oracle " in b["header"]["executor"]
    assert b["header"]["numerics"] == a["header"]["numerics"]
    assert all(c["honest_node"] for c in b["cards"])


# ---------------------------------------------------------------- simulated nodes


@pytest.fixture()
def two_nodes(tmp_path):
    """A head with no CPU and two one-CPU nodes, all on this machine; yields (cluster, address)."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        yield cluster, cluster.address
    finally:
        cluster.shutdown()


def _ancestors(pid: int) -> list[int]:
    out = []
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        out.append(pid)
    return out


def _ray_worker_of(pid: int) -> int | None:
    """The Ray worker process a witness process descends from (its cmdline starts with ``ray::``)."""
    for p in _ancestors(pid):
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if cmd.startswith("ray::"):
            return p
    return None


SLOW_ONCE = '''
import os, time
from pathlib import Path

MARK = Path({mark!r})


def test_slow_once():
    """The first attempt says where it runs and waits to be killed; a later attempt passes at once."""
    if not MARK.exists():
        MARK.write_text(str(os.getpid()))
        time.sleep(120)
    assert MARK.read_text().strip()
'''


def test_a_worker_killed_mid_run_is_retried_and_nothing_is_lost(project, tmp_path, two_nodes):
    _, address = two_nodes
    mark = tmp_path / "started"
    (project / "witnesses" / "test_slow_once.py").write_text(SLOW_ONCE.format(mark=str(mark)))
    cards = tmp_path / "cards"
    shutil.copytree(project / "obligations", cards)
    (cards / "fx-once.yaml").write_text(
        "id: FX-ONCE\ntitle: a job whose worker dies once\nmodule: fakeimpl.text\nregime: C\ntheorem: t\n"
        "proof: p\nrefs: [fakeimpl/text.py::shout]\nwitnesses:\n  - id: once\n"
        "    test: witnesses/test_slow_once.py::test_slow_once\n    timeout: 150\nversion: 1\n"
    )
    killed: list[int] = []

    def killer() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not killed:
            if mark.exists() and mark.read_text().strip():
                worker = _ray_worker_of(int(mark.read_text()))
                if worker:
                    os.kill(worker, signal.SIGKILL)
                    killed.append(worker)
                    return
            time.sleep(0.1)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    proc = kvproof(
        project,
        "run",
        "--cards",
        str(cards),
        "--executor",
        "ray",
        "--ray-address",
        address,
        "--json",
        "ray.json",
        KVPROOF_NODE_CACHE=str(tmp_path / "node-cache"),
    )
    thread.join(5)
    assert killed, "the witness never started, so no worker was killed: " + proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    doc = json.loads((project / "ray.json").read_text())
    once = next(c for c in doc["cards"] if c["id"] == "FX-ONCE")
    assert once["verdict"] == "PROVEN"
    assert "retried after attempt 1: the Ray worker died on node" in once["honest_node"]
    assert "WorkerCrashedError" in once["honest_node"]
    assert doc["header"]["executor"].startswith(f"ray: the cluster at {address}, 3 node(s), 2 job(s) in flight")
    # nothing lost: every other card has its verdict, as on this machine
    local = kvproof(project, "run", "--cards", str(project / "obligations"), "-j", "2", "--json", "local.json")
    assert local.returncode == 0, local.stdout + local.stderr
    others = [c for c in _verdicts(doc) if c[0] != "FX-ONCE"]
    assert others == _verdicts(json.loads((project / "local.json").read_text()))


def test_a_node_with_other_weights_makes_its_jobs_unverified_never_judged(project, tmp_path):
    """A node whose KVPROOF_GGUF holds other bytes: with --ray-ship never its jobs skip with the reason (the cards
    are UNVERIFIED); with the default (auto) the node takes the driver's shipped copy and the cards are PROVEN."""
    from ray.cluster_utils import Cluster

    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF" + b"\0" * 1024)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        # the node's own settings (its raylet's environment): its weights, and where it keeps what it is sent
        cluster.add_node(num_cpus=1, env_vars={"KVPROOF_GGUF": str(other), "KVPROOF_NODE_CACHE": str(tmp_path / "nc")})
        cluster.wait_for_nodes()
        never = kvproof(
            project,
            "run",
            "FX-ADD",
            "--executor",
            "ray",
            "--ray-address",
            cluster.address,
            "--ray-ship",
            "never",
            "--json",
            "never.json",
        )
        assert never.returncode == 1 and "Traceback" not in never.stderr, never.stdout + never.stderr
        card = json.loads((project / "never.json").read_text())["cards"][0]
        assert card["verdict"] == "UNVERIFIED"
        assert "has no weights as the driver has them" in card["reason"] and str(other) in card["reason"]
        auto = kvproof(
            project, "run", "FX-ADD", "--executor", "ray", "--ray-address", cluster.address, "--json", "auto.json"
        )
        assert auto.returncode == 0, auto.stdout + auto.stderr
        assert json.loads((project / "auto.json").read_text())["cards"][0]["verdict"] == "PROVEN"
        shipped = list((tmp_path / "nc" / WEIGHTS).glob("*/*.gguf"))
        assert len(shipped) == 1 and shipped[0].stat().st_size > 90_000_000  # the driver's GGUF, fetched once
    finally:
        cluster.shutdown()


# ---------------------------------------------------------------- without a cluster


def test_provide_uses_a_matching_own_copy_and_refuses_another(tmp_path):
    f = tmp_path / "w.gguf"
    f.write_bytes(b"weights")
    import hashlib

    good = hashlib.sha256(b"weights").hexdigest()
    where, why = provide(Resource(WEIGHTS, good, str(f), f.name), "auto", "n1")
    assert where == f and why == ""
    where, why = provide(Resource(WEIGHTS, "0" * 64, str(f), f.name), "never", "n1")
    assert where is None and "node n1 has no weights as the driver has them" in why and "000000000000" in why
    where, why = provide(Resource(ORACLE, "0" * 64, str(tmp_path / "none"), ""), "never", "n1")
    assert where is None and f"nothing at {tmp_path / 'none'}" in why


def test_bad_addresses_and_options_are_refused_before_anything_runs(project):
    with pytest.raises(UsageError, match="is not host:port"):
        check_reachable("nowhere")
    proc = kvproof(project, "run", "--executor", "ray", "--ray-address", "127.0.0.1:1", timeout=60)
    assert proc.returncode == 2 and "nothing accepts connections there" in proc.stderr and not proc.stdout
    proc = kvproof(project, "run", "--ray-address", "127.0.0.1:1", timeout=60)
    assert proc.returncode == 2 and "needs --executor ray" in proc.stderr
    proc = kvproof(project, "run", "--ray-ship", "always", timeout=60)
    assert proc.returncode == 2 and "needs --executor ray" in proc.stderr
    assert not (project / "reports").exists()


def test_without_ray_the_executor_says_how_to_install_it(project, tmp_path):
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "ray.py").write_text("raise ImportError('No module named ray (shadowed by the test)')\n")
    proc = kvproof(project, "run", "--executor", "ray", timeout=60, PYTHONPATH=str(shadow))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "--executor ray needs the `ray` package" in proc.stderr and "pip install -e '.[cluster]'" in proc.stderr
    local = kvproof(project, "run", "FX-ADD", timeout=120, PYTHONPATH=str(shadow))  # the default run needs no ray
    assert local.returncode == 0, local.stdout + local.stderr


def test_ctrl_c_cancels_the_clusters_tasks_and_leaves_no_process(tmp_path):
    """SIGINT to a run on a local cluster: exit 130, nothing recorded, and every witness process (and what it
    started, in its group, its own session, or orphaned) is gone with the cluster."""
    sys.path.insert(0, str(Path(__file__).parent))
    from test_orphans import Run, _wait_for_pids, _wait_until_gone

    run = Run(tmp_path)
    pids_file = tmp_path / "pids"
    proc = subprocess.Popen(
        [sys.executable, str(ENTRY), "run", "--cards", "cards-slow", "FX-SLOW", "--executor", "ray", "-j", "1"],
        cwd=run.root,
        env={**run.env(pids_file), "RAY_TMPDIR": "/tmp/ray"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as a terminal's Ctrl-C finds it: a suite started in the background inherits SIGINT ignored, and Python
        # then never installs its KeyboardInterrupt handler
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        pids = _wait_for_pids(pids_file, proc)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=180)  # a hang guard: Ray's shutdown on 2 loaded cores took over 60 s once
        assert proc.returncode == 130, out + err
        _wait_until_gone(run, pids)
        assert not (run.root / "reports" / "latest").exists()  # an interrupted run records nothing
    finally:
        if proc.poll() is None:
            proc.kill()
        for line in run.survivors():
            os.kill(int(line.split(":")[0]), signal.SIGKILL)


def test_mutate_on_a_local_cluster_scores_as_locally(project):
    """mutate's mutants are jobs like any other: the same mutants, the same statuses, the same scores."""
    docs = []
    for name, extra in (("local", ("-j", "2")), ("ray", ("--executor", "ray", "-j", "2"))):
        proc = kvproof(project, "mutate", "--cards", "cards-mutation", *extra, "--json", f"{name}.json")
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
        docs.append(json.loads((project / f"{name}.json").read_text()))
    scores = [
        [
            (
                c["id"],
                c["verdict"],
                c["mutation"]["score"],
                sorted((m["key"], m["status"]) for m in c["mutation"]["mutants"]),
            )
            for c in d["cards"]
        ]
        for d in docs
    ]
    assert scores[0] == scores[1] and scores[0][0][2] is not None


def test_a_job_whose_worker_dies_twice_is_error_naming_both_nodes_and_a_bug_is_not_retried(tmp_path):
    """The retry rule on its own (no cluster): one retry after a lost worker, then ERROR with both attempts
    named; an exception raised by kvproof's own code on the node is not retried."""
    from harness.execute.cluster import RayExecutor, _Flight, _Session
    from harness.execute.executor import ExecutorSpec, Finished
    from harness.execute.jobs import Job, RunConfig

    class WorkerCrashedError(Exception):  # stands in for ray.exceptions.WorkerCrashedError (matched by name)
        pass

    class RayTaskError(Exception):
        pass

    submitted = []

    class Remote:
        def remote(self, job, cfg, data):
            submitted.append(job)
            return object()

    ex = RayExecutor(RunConfig(root=tmp_path), ExecutorSpec("ray"), 2)
    ex.session = _Session(ray=None, started_local=True, address="", remote=Remote())
    job = Job(card=None, witnesses=())  # type: ignore[arg-type]
    flight = _Flight("item", job, t0=0.0, node="n1 (10.0.0.1, node aaaa)")
    assert ex._died(flight, WorkerCrashedError("died")) == [] and len(submitted) == 1  # retried once
    (again,) = ex.flights.values()
    assert again.attempt == 2 and again.node == "" and len(again.history) == 1
    again.node = "n2 (10.0.0.2, node bbbb)"
    (done,) = ex._died(again, WorkerCrashedError("died again"))
    assert isinstance(done, Finished) and len(submitted) == 1
    lost = done.result.lost
    assert "attempt 1: the Ray worker died on node n1" in lost and "attempt 2: the Ray worker died on node n2" in lost
    assert done.result.node == "n2 (10.0.0.2, node bbbb)"
    (bug,) = ex._died(_Flight("item", job, t0=0.0, node="n1"), RayTaskError("ValueError: boom"))
    assert "its task failed on node n1: RayTaskError: ValueError: boom" in bug.result.lost and len(submitted) == 1


def test_a_lost_job_makes_the_card_error_and_a_lost_liar_is_never_caught(tmp_path):
    from harness.execute.jobs import JobResult, RunConfig
    from harness.execute.outcomes import after_honest, assemble, liar_run
    from harness.liars import scan
    from harness.select.cards import Card, load_cards
    from harness.verdict import evaluate, judge_liar

    sites, _ = scan(FIXTURE)
    card: Card = next(c for c in load_cards(FIXTURE / "obligations", FIXTURE, sites).cards if c.id == "FX-ADD")
    cfg = RunConfig(root=FIXTURE)
    lost = JobResult(lost="attempt 1: the Ray worker died on node n1; attempt 2: ... on node n2")
    honest = after_honest(card, cfg, lost)
    v = evaluate(card, assemble(card, honest, ()).outcomes)
    assert v.verdict == "ERROR" and "the Ray worker died on node n1" in v.reason
    (name,) = card.liars[:1]
    lv = judge_liar(card, liar_run(card, name, lost), name)  # its witnesses never ran: not caught, ERROR
    assert lv.status == "error" and lv.why.startswith("was lost: attempt 1") and not lv.caught_by
