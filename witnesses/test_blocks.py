"""TGT-BLOCKS*: claims that hold for any block manager (impl's paged pool, a prefix-caching manager, vLLM's later).

The witnesses are kvproof's generic block-manager claims,
:mod:`harness.targets.blockclaims` (installed with kvproof, so a project proves
its own block manager with the same ones); this module imports them so the
TGT-BLOCKS cards name them here. Each takes ``kv_target`` and needs the
capability ``blocks``: on a row target (the reference, impl's row designs,
transformers') it is n/a, as every row witness is on a block manager.
"""

from harness.targets.blockclaims import (  # noqa: F401 (pytest collects the test functions imported here)
    test_block_managers_keep_the_books,
    test_blocks_are_reused_in_the_declared_order,
    test_blocks_are_shared_only_as_declared,
    test_freeing_again_is_idempotent_or_refused,
    test_prefix_hits_are_as_long_as_the_cache_can_serve,
    test_prefix_hits_serve_computed_prefixes,
    test_releasing_blocks_is_idempotent_or_refused,
    test_requests_with_other_extra_keys_share_no_block,
    test_reset_refuses_while_blocks_are_held,
)
