"""The dtype names the project reads and writes, in one place.

- ``TORCH_DTYPES``: ``config.json``'s ``torch_dtype`` names (also ``--dtype`` and
  ``EngineConfig.dtype``) to torch dtypes;
- ``SAFETENSORS_DTYPES``: the safetensors header's dtype codes to torch dtypes, and
  ``SAFETENSORS_CODES`` back;
- ``SHORT_NAMES``: the short names a table shows (``bf16``), where there is one.
"""

from __future__ import annotations

import torch

TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
SAFETENSORS_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
SAFETENSORS_CODES = {dtype: code for code, dtype in SAFETENSORS_DTYPES.items()}
SHORT_NAMES = {"bfloat16": "bf16", "float16": "fp16"}
