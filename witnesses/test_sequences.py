"""TGT-SEQ*: claims that hold for any sequence cache (llama.cpp's memory API, reference.sequences).

The witnesses are kvproof's generic sequence-cache claims,
:mod:`harness.targets.seqclaims` (installed with kvproof, so a project proves
its own sequence cache with the same ones); this module imports them so the
TGT-SEQ cards name them here. Each takes ``kv_target`` and needs the
capability ``sequences``: on a row or block target it is n/a.
"""

from harness.targets.seqclaims import (  # noqa: F401 (pytest collects the test functions imported here)
    test_a_copied_sequence_continues_as_its_source,
    test_a_saved_sequence_restores_as_it_was,
    test_a_shift_rotates_exactly_the_shifted_keys,
    test_copies_keep_the_books,
    test_keep_keeps_the_books,
    test_rewinding_equals_a_fresh_decode,
    test_sequence_caches_keep_the_books,
)
