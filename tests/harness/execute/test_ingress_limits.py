"""What a witness process writes cannot take the runner's memory: its event stream is read a chunk at a time with
a bound on a line, and the tail of its output is read from the end (a witness may print gigabytes)."""

import json

from test_hostile_witnesses import _copy_project, _run, card, files

from harness.execute import ingress
from harness.wire import messages


def test_event_tail_drops_an_over_long_line_and_keeps_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr(ingress, "READ_CHUNK", 1000)
    monkeypatch.setattr(ingress, "LINE_LIMIT", 5000)
    path = tmp_path / "events.jsonl"
    good = messages.encode(messages.NodeStarted("w.py::t", 60.0)).encode()
    path.write_bytes(good + b"\n" + b"x" * 12345 + b"\n" + good + b"\n")
    tail = ingress.EventTail(path)
    events = tail.read()
    assert [type(e).__name__ for e in events] == ["NodeStarted", "NodeStarted"]
    assert tail.unreadable == ["a line of 12,345 bytes (no event is over 5,000): not read"]
    with open(path, "ab") as fh:  # an over-long line still being written, then its end and one more event
        fh.write(b"y" * 7000)
    assert tail.read() == [] and tail.partial == b""
    with open(path, "ab") as fh:
        fh.write(b"yyy\n" + good + b"\n")
    assert [type(e).__name__ for e in tail.read()] == ["NodeStarted"]
    assert tail.unreadable[-1] == "a line of 7,003 bytes (no event is over 5,000): not read"


def test_a_tail_reads_only_the_end_of_a_huge_log(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"a" * (1 << 22) + b"\nlast line\n")
    assert ingress.read_tail(path, 1) == "last line"
    assert len(ingress.tail_text(path)) == ingress.TAIL_BYTES


# writes a 70 MB line into its own event stream and 60 MB to stderr, then fails
FLOODS = """
import sys

from harness.wire.messages import JobPlan


def test_fails(evidence, request):
    evidence.record("max_abs_delta", 0)
    plan = JobPlan.read(request.config.getoption("kvproof_plan"))
    with open(plan.out, "a") as out:
        out.write("x" * (70 << 20) + "\\n")
    for _ in range(60):
        sys.stderr.write("y" * (1 << 20) + "\\n")
    assert 2 + 2 == 5
"""


def test_a_witness_that_floods_its_stream_and_stderr_is_judged_without_the_runner_reading_it_whole(tmp_path):
    root = _copy_project(tmp_path / "project")
    files(**card("test_fails"), witnesses__test_hostile_DOT_py=FLOODS)(root)
    proc = _run(root, "run", "--cards", "cards-case", "--json", "v.json", "-j", "1")
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in text, text[-3000:]
    (entry,) = json.loads((root / "v.json").read_text())["cards"]
    assert entry["verdict"] in ("FAILED", "ERROR"), entry["reason"]
    assert (root / "v.json").stat().st_size < 1 << 20
