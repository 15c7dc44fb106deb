"""Passes over lz IR: the pass base, the registry (``registry.py``: every pass by name), pipelines
as text, the pass manager, the pattern rewriter, and the passes themselves (one module each).

    from lezero.passes import run_pipeline
    run_pipeline(module, "canonicalize,cse,dce")
"""
import lezero.ir.dialect  # noqa: F401  (op definitions: the passes ask them about every op)
from lezero.passes.pass_base import OptionInfo, Pass, PassInfo, PipelineError, debug_channel, debug_channels, option
from lezero.passes.registry import BUILTIN_PASSES, format_pass_list, get_pass, list_passes, pass_names, register_pass
from lezero.passes.pipeline import format_pipeline, parse_pipeline
from lezero.passes.pass_manager import (IRPrinter, PassError, PassInstrumentation, PassManager, PassTimer,
                                        make_pipeline_runner, run_pipeline)
from lezero.passes.rewriter import (ConvergenceError, Match, PatternRewriter, RewritePattern, Rule, RulePattern,
                                    apply_patterns_greedily, is_pure, is_trivially_dead, patterns_from_rules)

__all__ = [
    "Pass", "PassInfo", "OptionInfo", "PipelineError", "option", "BUILTIN_PASSES", "register_pass", "get_pass",
    "list_passes",
    "pass_names", "format_pass_list", "debug_channel", "debug_channels", "parse_pipeline", "format_pipeline",
    "PassManager", "PassError",
    "PassInstrumentation", "IRPrinter", "PassTimer", "run_pipeline", "make_pipeline_runner", "RewritePattern",
    "PatternRewriter", "Rule", "RulePattern", "Match", "ConvergenceError", "apply_patterns_greedily",
    "patterns_from_rules", "is_pure", "is_trivially_dead",
]
