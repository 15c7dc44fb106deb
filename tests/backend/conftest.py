"""The backend tests run the cuda target in Triton's interpreter (on the CPU, torch CPU tensors as
buffers): ``TRITON_INTERPRET`` must be set before any kernel is loaded."""
import os

os.environ["TRITON_INTERPRET"] = "1"


def pytest_configure(config):
    # numpy's warnings for the lanes a kernel computes and masks off (log of 0 and such)
    config.addinivalue_line("filterwarnings", "ignore::RuntimeWarning:triton.runtime.interpreter")
