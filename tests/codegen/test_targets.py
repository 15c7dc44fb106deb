"""The backend registry (lezero/codegen/targets.py): what it lists, that loading a backend
registers what it runs with placement, and that every backend has the same contract."""
import pytest

from lezero.codegen import targets
from lezero.passes import placement

CONTRACT = ("lower_kernel", "lower_module", "kernel_text", "unsupported_reason")


def test_the_registry_lists_each_target_once():
    assert targets.TARGETS == ("cpu", "cuda")
    with pytest.raises(ValueError, match=r"unknown target 'tpu' \(targets: 'cpu', 'cuda'\)"):
        targets.backend("tpu")


@pytest.mark.parametrize("target", targets.TARGETS)
def test_every_backend_has_the_contract(target):
    backend = targets.backend(target)
    assert backend.__name__ == targets.BACKENDS[target]
    assert all(callable(getattr(backend, name)) for name in CONTRACT)


def test_loading_a_backend_registers_it_with_placement(monkeypatch):
    monkeypatch.delitem(placement._TARGETS, "cuda", raising=False)
    assert "cuda" not in placement.known_targets()
    backend = targets.backend("cuda")
    assert placement._TARGETS["cuda"] is backend.unsupported_reason
