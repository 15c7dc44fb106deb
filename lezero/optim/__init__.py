"""``lz.optim``: optimizers whose per-parameter update is one compiled, fused kernel (their
``update_rule``, which ``lz.jit.compile_train_step`` builds into the compiled step too; LBFGS,
driven by a closure, runs eagerly), and learning-rate schedules (``lz.optim.lr_scheduler``)."""
from lezero.optim.optimizer import Optimizer  # noqa: F401
from lezero.optim.sgd import SGD  # noqa: F401
from lezero.optim.adam import Adam, AdamW  # noqa: F401
from lezero.optim.adam_variants import Adamax, NAdam, RAdam  # noqa: F401
from lezero.optim.adadelta import Adadelta  # noqa: F401
from lezero.optim.adagrad import Adagrad  # noqa: F401
from lezero.optim.rmsprop import RMSprop  # noqa: F401
from lezero.optim.lbfgs import LBFGS  # noqa: F401
from lezero.optim import lr_scheduler  # noqa: F401
