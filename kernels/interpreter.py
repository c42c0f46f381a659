"""A fix for running the kernels under Triton's CPU interpreter (``TRITON_INTERPRET=1``).

Applied by ``kernels/__init__.py`` whenever the interpreter is on, so the test suite and the CLI
(``--attention triton`` on a CPU) run the same code.
"""

from __future__ import annotations


def patch_interpreter_for_numpy_2_4() -> None:
    """Triton 3.6's interpreter turns a loaded scalar (a 1-element array) into a Python int with
    ``int(array)``, which numpy >= 2.4 rejects, so loops bounded by a loaded length fail. Same fix
    as triton-lang/triton#9171: squeeze first. Idempotent."""
    import triton.runtime.interpreter as interp

    orig = interp._patch_lang_tensor
    if getattr(orig, "_numpy24_fix", False):
        return

    def patched(tensor, scope):
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patched._numpy24_fix = True
    interp._patch_lang_tensor = patched
