"""Triton kernels and their PyTorch references (``reference.py``).

Each kernel file holds its ``@triton.jit`` kernels and one public launcher. Beside them: the tile
parameters of each kernel family and their defaults (``tiles.py``), device facts (``device.py``),
launcher argument checks (``checks.py``), jit helpers shared by several kernels (``paged_walk.py``,
``query_int8.py``) and host helpers of one kernel (``decode_plan.py``, ``pool_tma.py``).
"""

import os

if os.environ.get("TRITON_INTERPRET") == "1":
    from kernels.interpreter import patch_interpreter_for_numpy_2_4

    patch_interpreter_for_numpy_2_4()
