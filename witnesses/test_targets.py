"""TGT-*: cache contracts proven on any target (impl's own designs, transformers' cache classes, ...).

The witnesses are kvproof's generic target claims, :mod:`harness.targets.claims`
(installed with kvproof, so a project proves its own cache with the same
ones: docs/prove-your-own-cache.md); this module imports them so the TGT
cards name them here. Each takes ``kv_target`` (parametrized by
harness.targets.fixture over the selected targets; default: the reference
and impl's designs) and drives it and the list-of-rows reference with the
same calls (:mod:`harness.targets.judge`). Run them on transformers with::

    .venv/bin/python -m pytest witnesses/test_targets.py --kvproof-target transformers [--kvproof-repro DIR]

A target lacking a capability a witness needs is n/a (skipped, naming it).
"""

from harness.targets.claims import (  # noqa: F401 (pytest collects the test functions imported here)
    test_a_quantized_cache_decodes_within_the_bound_derived_from_its_own,
    test_any_chunking_gives_the_same_cache,
    test_append_then_read_back_at_their_positions,
    test_decode_with_the_cache_equals_recomputing_the_prefix,
    test_every_live_handle_agrees_after_every_step,
    test_fork_is_independent_of_its_source,
    test_occupancy_is_bounded_by_what_live_handles_hold,
    test_random_programs_agree_with_the_list_of_rows_reference,
    test_read_back_within_the_numerics_bound_over_magnitudes,
    test_reorder_equals_reordering_the_history,
    test_repeat_equals_repeating_the_history,
    test_select_equals_selecting_from_the_history,
    test_truncate_accepts_0_to_len_and_refuses_the_rest,
    test_truncate_then_append_equals_never_saw,
    test_window_holds_the_last_w_positions_and_the_mask_agrees,
)
