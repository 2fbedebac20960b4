"""TGT-GENERATE's model paths (harness/targets/model.py): which runtime drives which target's cache.

A project's target that says ``own=True`` (it gates, as docs/prove-your-own-cache.md writes it) is not one of
impl's designs: it must run over its verbs, not be taken for a handle over impl's stores (issue 37: the guide's
own adapter was FAILED by decode-equals-recompute although its cache was correct).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from harness.errors import NotCapable
from harness.targets import model
from harness.targets.own import TARGETS as OWN
from harness.targets.protocol import Numerics


def project_target(**changes) -> object:
    """A correct project cache as the guide declares one: the list-of-rows reference under the project's name."""
    return dataclasses.replace(
        OWN["reference"],
        name="toycache",
        title="a project's own list-of-rows cache",
        distribution="toycache",
        own=True,
        **changes,
    )


def test_a_projects_own_target_runs_over_its_verbs_and_decode_equals_recompute():
    target = project_target()
    assert model.path_of(target) == "impl-protocol"
    toks, dec = model.impl_decode(target, [3, 1, 4, 1, 5], [2, 3], 3, None)
    ref = model.impl_recompute(target, toks, None)
    assert len(toks) == 8 and dec.shape == ref.shape == (8, model.VOCAB)
    assert np.array_equal(dec.view(np.uint32), ref.astype(np.float32).view(np.uint32))  # exact: bit for bit


def test_impls_designs_keep_the_store_path_the_reference_and_libraries_theirs():
    rows = {n: t for n, t in OWN.items() if "append" in t.capabilities}  # block managers have no model path
    assert {n: model.path_of(t) for n, t in rows.items()} == {
        "reference": "impl-protocol",
        "impl.contiguous": "impl-store",
        "impl.paged": "impl-store",
        "impl.ring": "impl-store",
        "impl.ring-int8": "impl-store",
    }


def test_a_lossy_project_target_is_not_given_impls_int8_bound_it_is_left_to_tgt_lossy():
    """impl's int8 recompute-through-itself argument is about impl's quantizer; a project's lossy cache gets no
    fixed tolerance here (never a 0 borrowed from impl): it runs over its verbs and TGT-LOSSY judges it against
    the logit bound derived from the bound it states (harness/targets/logitbound.py)."""
    quantized = OWN["reference"].capabilities | {"quantized"}
    lossy = project_target(numerics=OWN["impl.ring-int8"].numerics, capabilities=quantized)
    with pytest.raises(NotCapable, match="TGT-LOSSY judges its decode"):
        model.logit_tolerance(lossy)
    assert model.derives_bound(lossy) and model.path_of(lossy) == "impl-protocol"
    assert model.recompute_through(lossy) is model.REFERENCE
    assert model.logit_tolerance(OWN["impl.ring-int8"]).rtol == 0.0 and not model.derives_bound(OWN["impl.ring-int8"])
    unstated = project_target(numerics=Numerics.lossy(None, "a scheme not stated yet"), capabilities=quantized)
    with pytest.raises(ValueError, match="lack 'quantized'"):
        project_target(numerics=Numerics.lossy(None, "a scheme not stated yet"))
    assert model.derives_bound(unstated)
