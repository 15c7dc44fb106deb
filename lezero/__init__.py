"""lezero: a compiler-first deep learning framework.

Everything becomes one typed SSA IR (``lezero.ir``), goes through pass pipelines
(``lezero.passes``) and is compiled for the CPU with LLVM (``lezero.codegen``, ``lezero.runtime``).
"""
__version__ = "0.1.0"


def compile(module_or_text, entry=None, target="cpu"):  # noqa: A001 - the name users expect
    """Compile ``@entry`` of an IR module (or MLIR text); see ``lezero.runtime.compiled_function``."""
    from lezero.runtime.compiled_function import compile as _compile

    return _compile(module_or_text, entry, target)
