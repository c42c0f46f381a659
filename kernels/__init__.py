"""Triton kernels (each file: its kernels and one launcher) and their PyTorch references."""

import os

if os.environ.get("TRITON_INTERPRET") == "1":
    from kernels.interpreter import patch_interpreter_for_numpy_2_4

    patch_interpreter_for_numpy_2_4()
