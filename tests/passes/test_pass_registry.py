"""The pass registry (``lezero.passes.registry``): ``BUILTIN_PASSES`` lists every pass the
package defines, by the name pipelines call it."""
from __future__ import annotations

import importlib
import inspect
import pathlib

import lezero.passes
from lezero.passes import BUILTIN_PASSES, Pass, get_pass, pass_names


def test_each_builtin_pass_is_listed_under_its_own_name():
    for name, cls in BUILTIN_PASSES.items():
        assert cls.name == name and get_pass(name) is cls
    assert set(BUILTIN_PASSES) <= set(pass_names())


def test_every_pass_in_the_package_is_listed():
    defined = set()
    for path in pathlib.Path(lezero.passes.__file__).parent.glob("*.py"):
        module = importlib.import_module(f"lezero.passes.{path.stem}")
        defined |= {cls for _, cls in inspect.getmembers(module, inspect.isclass)
                    if issubclass(cls, Pass) and cls.name and cls.__module__ == module.__name__}
    assert defined == set(BUILTIN_PASSES.values())
