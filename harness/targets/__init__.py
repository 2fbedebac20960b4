"""Targets: other engines' caches (and impl's own) behind one typed protocol, so one witness proves them all.

A *target* is a KV cache a witness can drive through one vocabulary, whatever
engine it belongs to. Witnesses take the ``kv_target`` fixture; the harness
(or ``--kvproof-target`` / ``KVPROOF_TARGETS``) chooses which targets it is
parametrized over; a witness that needs a capability a target lacks is "n/a"
for that target (a skip naming the capability), never a verdict.

    protocol.py      Target, Handle, Numerics, Geometry, Visible, Rows, NotCapable: what a target
                     declares (name, distribution + version it binds to, capabilities, numerics class,
                     refs) and the verbs a handle offers
    own.py           impl's contiguous, paged and ring caches (f32 and int8) as targets, and the
                     trivially correct list-of-rows reference target that known answers come from
    transformers.py  thin adapters over the installed transformers' cache layer classes (Dynamic,
                     Static, both sliding-window layers, the quantized layers whose backend imports
                     here; the others are visible "not runnable here" targets with the reason)
    torchtune.py     torchtune's KVCache (torchtune.kvcache) and litgpt.py litgpt's KVCache, plain and ring
                     (litgpt.kvcache, litgpt.kvcache-sliding): optional engines, survey mode, imported lazily
    vllm.py          vLLM's v1 KVCacheManager + BlockPool as a block manager (vllm.kvcache-manager): its own venv,
                     make engines-vllm; survey mode, imported lazily
    sequences.py     the sequence-cache protocol (capability "sequences": llama.cpp's memory API, cells shared
                     by sequences, caller-given positions; decode/rm/cp/keep/add/pos_min/pos_max), its
                     Positions known answer and Rope (how a cache rotates K, for a float64 check)
    seqclaims.py     kvproof's generic sequence-cache witnesses (cards TGT-SEQ-*): books, rewind, copy, shift
    seqown.py        reference.sequences: a cell cache written from llama.h over impl's model pieces
    seqrepro.py      a failed sequence claim -> a standalone script with the engine's calls embedded
    llamacpp.py      llama.cpp's KV cache (llama.cpp, llama.cpp.f32) over llamacpp_calls.py (ctypes, struct,
                     numpy, llama_cpp only); make engines-llamacpp; survey mode
    pyproject.py     a project's own targets: ``[tool.kvproof] targets = ["module:NAME"]`` in its
                     pyproject.toml, imported from the project root and checked (one message per bad entry)
    registry.py      name -> Target (built-in and the project's); selections (own, transformers, project,
                     all, a comma list; default: project when it declares targets, else own); available()
    judge.py         what target witnesses share: a handle beside the reference, the checks, strategies
    claims.py        kvproof's generic target witnesses (cards TGT-*), installed so a project's witness
                     module can import the ones its cards name
    blocks.py        the block-manager protocol (capability "blocks"): requests by id with token ids,
                     allocate/table/read/free and fork, truncate, refcount, prefix, reset, evict; the
                     list-of-requests known answer (Requests) and the declared reuse orders
    blockclaims.py   kvproof's generic block-manager witnesses (cards TGT-BLOCKS*): Hypothesis programs
                     over many requests, the books checked after every step, shrunk to numbered steps
    blockown.py      impl's BlockPool + PagedSequence as a block manager (impl.blocks) and reference.blocks,
                     a prefix-caching manager after vLLM's contract; own.py adds them to the own group
    model.py         TGT-GENERATE's model paths: impl's runtime over a target's own store (impl's
                     designs) or over its verbs (ProtocolStore), transformers' Llama/MistralForCausalLM
                     with the target's Cache; the recompute each is compared with, and the tolerance
    fixture.py       the pytest plugin: ``kv_target`` (parametrized), ``--kvproof-target``, the
                     ``kv_capabilities`` marker, ``--kvproof-repro DIR`` and the ``kv_repro`` fixture
    repro.py         a falsifying example -> a standalone script that imports only the library and
                     numpy/torch, replays the calls literally, prints what differs and exits 1 while
                     the problem is present (0 once fixed)
    known.py         obligations/targets.yaml (+ targets.schema.json): per target the expected
                     failures (card, witness, link, reproduction), validated
    guard.py         project code imported into the runner (a project target adapter, the configuration
                     probe's module) cannot end it: exits and exit handlers become errors naming it
    survey.py        survey mode: the TGT witnesses over third-party targets, printed as a card x
                     target matrix; exit 1 for a cell the known list does not expect, or (--drift) for a
                     known finding gone or broken on the installed version

Arrows run one way: protocol, repro <- own, transformers, pyproject (guard) <- registry <- fixture, known <- survey;
own, repro <- judge <- claims; own <- model <- claims; protocol <- blocks <- blockown <- own;
blocks <- blockclaims; protocol <- sequences <- seqown <- own; sequences, seqrepro <- seqclaims;
llamacpp_calls <- llamacpp <- registry. Nothing here imports the harness's verdict
code (verdict.py), the ledger or the report; own imports impl (the project under proof), transformers
imports torch and transformers only inside its functions (they are optional).
"""
