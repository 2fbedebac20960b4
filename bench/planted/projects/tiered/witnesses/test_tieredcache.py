"""Witnesses for tieredcache: kvproof's generic target claims that apply to it (no witness of our own)."""

from harness.targets.claims import (  # noqa: F401 (pytest collects the claims imported here)
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
)
