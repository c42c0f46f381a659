"""The PDL chain: programmatic dependent launch (PDL) on every kernel of a decode layer, so that
each kernel's launch and prologue overlap its predecessor's tail (CUDA sm_90+).

A kernel launched with PDL (``launch_pdl=True``) may be scheduled as soon as every program of the
kernel before it in the stream has executed ``griddepcontrol.launch_dependents`` (or exited);
``griddepcontrol.wait`` then blocks until that predecessor has completed and its writes are
visible. A predecessor that completed only after its own wait completed after everything before
it, so the guarantee is transitive along the chain.

The chain of one decode layer (``ENABLED``; stage 1 and the combine of split-KV decode have run
this way on their own since ``kernels.tiles.DecodeTiles.pdl``)::

    rmsnorm -> qkv GEMV -> q/k-norm + RoPE | KV store -> stage 1 -> combine -> o_proj GEMV
        -> add + rmsnorm -> gate/up GEMV -> down GEMV -> (next layer's add + rmsnorm)

With the norms inside the GEMVs (``models.qwen3_fused.NORM_IN_GEMV``, the default where
``o_proj`` and ``down_proj`` run without split-K: the 4B and larger) the add + RMSNorm kernels
drop out: ``o_proj`` and ``down_proj`` end with the residual add and the next norm's operand,
the qkv and gate/up GEMVs load the producer's sums of squares right after their wait.

``|``: the KV store is launched without PDL, so it starts when the q/k-norm + RoPE kernel has
completed (stage 1 reads earlier keys before its wait: ``kernels/decode_split.py``). Where the
store is fused into q/k-norm + RoPE (``models.qwen3.FUSED_KV_STORE``; INT8 pools by default)
that one kernel precedes stage 1, which then waits before it loads q. With a 16-bit pool's
attention prologue (``models.qwen3_fused.ATTENTION_PROLOGUE``, on by default) neither runs: stage
1 follows the qkv GEMV, computes its first token's cos/sin, waits, and does both itself
(``kernels/decode_prologue.py``).

The contract every kernel of the chain keeps (``NOTE``: a new kernel on the chain must too):

- before its ``gdc_wait`` it reads only what no kernel of the chain writes (weights, positions,
  ``inv_freq``: written before the step's first kernel started), and writes nothing;
- it signals ``gdc_launch_dependents`` where its successor may take the SMs it leaves: a GEMV
  after its weight stream (its successor's programs then fill the tail of its last wave),
  the small row kernels (norms, the split-K reduce) at their start.

An L2 prefetch of each GEMV's first weight tiles before its wait was measured slower and removed
(BENCHMARKS.md). Results are bit-identical with the chain on or off: only the time at which each
kernel starts moves. Ignored before sm_90 and under the interpreter (``chain_pdl``).

PDL: CUDA programming guide, "Programmatic Dependent Launch and Synchronization"; the PTX ISA's
``griddepcontrol``. The same overlap by other means: the persistent "megakernel" decoders (Hazy
Research 2025), which issue the next operation's weight loads while the current one finishes.
"""

from __future__ import annotations

import torch

from kernels.device import supports_pdl

# Whether the decode layer's row kernels and GEMVs run as a PDL chain (module notes): on, +2.0 %
# and +1.6 % tok/s for the 8B (BF16, 4k and 32k) on the H200 (BENCHMARKS.md; the A/B:
# ``benchmarks/decode_e2e.py --variants split_k,split_k+pdl_chain``).
ENABLED = True


def chain_pdl(device: torch.device | str) -> bool:
    """Whether a chain kernel on ``device`` launches with PDL: ``ENABLED`` on sm_90+."""
    return ENABLED and supports_pdl(device)
