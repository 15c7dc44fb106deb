"""L-BFGS, PyTorch's algorithm step for step (its two-loop recursion, its first step size, its
stopping tests, and ``line_search_fn="strong_wolfe"`` with its cubic interpolation), on the
parameters flattened into one host vector.

Why not one fused kernel, like the other optimizers: a step calls the closure several times and
decides in Python between the calls (line search, history, tolerances), so the work between
evaluations is a handful of dot products on one vector, which numpy does directly.  For the same
reason ``compile_train_step`` refuses it: the eager ``step(closure)`` is its interface.  The
state (``d``, ``t``, ``old_dirs``, ``old_stps``, ``ro``, ``H_diag``, ``prev_flat_grad``,
``prev_loss``, ``al``, ``func_evals``, ``n_iter``) is PyTorch's, kept on the first parameter."""
from __future__ import annotations

import numpy as np

from lezero.eager.core import wrap as _wrap
from lezero.eager.device_arrays import copy_into, host, like, numpy_dtype, size
from lezero.eager.tensor import Tensor
from lezero.optim.optimizer import Optimizer, check_hyperparameters


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None):
    """The minimizer of the cubic through two points with their slopes, kept within ``bounds``."""
    xmin_bound, xmax_bound = bounds if bounds is not None else ((x1, x2) if x1 <= x2 else (x2, x1))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 ** 2 - g1 * g2
    if d2_square >= 0:
        d2 = np.sqrt(d2_square)
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, xmin_bound), xmax_bound)
    return (xmin_bound + xmax_bound) / 2.0


def _strong_wolfe(obj_func, x, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25):
    """A step size ``t`` along ``d`` meeting the strong Wolfe conditions: bracket, then zoom."""
    d_norm = np.abs(d).max()
    g = g.copy()
    f_new, g_new = obj_func(x, t, d)
    ls_func_evals = 1
    gtd_new = g_new.dot(d)
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    done = False
    ls_iter = 0
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f, bracket_g, bracket_gtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new.copy()], \
                [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f, bracket_g, bracket_gtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new.copy()], \
                [gtd_prev, gtd_new]
            break
        min_step = t + 0.01 * (t - t_prev)
        max_step = t * 10
        tmp = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(min_step, max_step))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new.copy(), gtd_new
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = g_new.dot(d)
        ls_iter += 1
    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0, t], [f, f_new], [g, g_new]

    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1])
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                t = max(bracket) - eps if abs(t - max(bracket)) < abs(t - min(bracket)) else min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = g_new.dot(d)
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            bracket[high_pos], bracket_f[high_pos] = t, f_new
            bracket_g[high_pos], bracket_gtd[high_pos] = g_new.copy(), gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                bracket[high_pos], bracket_f[high_pos] = bracket[low_pos], bracket_f[low_pos]
                bracket_g[high_pos], bracket_gtd[high_pos] = bracket_g[low_pos], bracket_gtd[low_pos]
            bracket[low_pos], bracket_f[low_pos] = t, f_new
            bracket_g[low_pos], bracket_gtd[low_pos] = g_new.copy(), gtd_new
    return bracket_f[low_pos], bracket_g[low_pos], bracket[low_pos], ls_func_evals


def _stored(value):
    """A state value as PyTorch keeps it: arrays (and lists of them) as tensors."""
    if isinstance(value, np.ndarray):
        return _wrap(value)
    if isinstance(value, np.generic):
        return _wrap(np.asarray(value))
    if isinstance(value, list):
        return [_stored(v) for v in value]
    return value


def _loaded(value):
    """A state value (ours, or PyTorch's loaded through ``load_state_dict``) as numpy."""
    if isinstance(value, Tensor):
        value = host(value._data)
    elif isinstance(value, list):
        return [_loaded(v) for v in value]
    elif value is None or isinstance(value, (int, float)):
        return value
    array = np.array(np.asarray(value))  # torch tensors too (their __array__ takes no copy argument)
    return array[()] if array.ndim == 0 else array


class LBFGS(Optimizer):
    """``step(closure)``: ``closure()`` re-evaluates the model (zero_grad, forward, backward) and
    returns the loss.  One parameter group only, as PyTorch's."""

    def __init__(self, params, lr=1, max_iter: int = 20, max_eval: int | None = None, tolerance_grad: float = 1e-7,
                 tolerance_change: float = 1e-9, history_size: int = 100, line_search_fn: str | None = None):
        check_hyperparameters(lr=lr)
        if line_search_fn not in (None, "strong_wolfe"):
            raise ValueError(f"LBFGS: line_search_fn must be None or 'strong_wolfe', got {line_search_fn!r}")
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        super().__init__(params, dict(lr=lr, max_iter=max_iter, max_eval=max_eval, tolerance_grad=tolerance_grad,
                                      tolerance_change=tolerance_change, history_size=history_size,
                                      line_search_fn=line_search_fn))
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    def add_param_group(self, group: dict) -> None:
        if self.param_groups:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        super().add_param_group(group)

    def _gather_flat_grad(self) -> np.ndarray:
        return np.concatenate([np.zeros(size(p._data), numpy_dtype(p._data)) if p.grad is None else
                               host(p.grad._data).reshape(-1).astype(numpy_dtype(p._data), copy=False)
                               for p in self._params])

    def _flat_params(self) -> list:
        return [host(p._data).copy() for p in self._params]

    def _set_params(self, arrays: list) -> None:
        for p, a in zip(self._params, arrays):
            copy_into(p._data, like(a, p._data))
            p._version += 1

    def _add_grad(self, step_size, update: np.ndarray) -> None:
        """``p += step_size update`` (``p.add_(update, alpha=step_size)``), slice by slice."""
        offset, arrays = 0, []
        for p in self._params:
            n = size(p._data)
            arrays.append(host(p._data) + step_size * update[offset:offset + n].reshape(p.shape))
            offset += n
        self._set_params(arrays)

    def _directional_evaluate(self, closure, x, t, d):
        self._add_grad(t, d)
        loss = float(closure())
        flat_grad = self._gather_flat_grad()
        self._set_params(x)
        return loss, flat_grad

    def step(self, closure=None):
        if closure is None:
            raise RuntimeError("LBFGS.step needs a closure that re-evaluates the model and returns the loss")
        from lezero.eager.autograd import enable_grad, no_grad
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        line_search_fn, history_size = group["line_search_fn"], group["history_size"]

        def evaluate():
            with enable_grad():
                return closure()

        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        with no_grad():
            orig_loss = evaluate()
            loss = float(orig_loss)
            current_evals = 1
            state["func_evals"] += 1
            flat_grad = self._gather_flat_grad()
            if np.abs(flat_grad).max() <= tolerance_grad:
                return orig_loss
            d, t, old_dirs, old_stps, ro, H_diag, prev_flat_grad, prev_loss = (
                _loaded(state.get(key)) for key in ("d", "t", "old_dirs", "old_stps", "ro", "H_diag",
                                                     "prev_flat_grad", "prev_loss"))
            n_iter = 0
            while n_iter < max_iter:
                n_iter += 1
                state["n_iter"] += 1
                if state["n_iter"] == 1:
                    d = -flat_grad
                    old_dirs, old_stps, ro, H_diag = [], [], [], 1
                else:
                    y = flat_grad - prev_flat_grad
                    s = d * t
                    ys = y.dot(s)
                    if ys > 1e-10:
                        if len(old_dirs) == history_size:
                            old_dirs.pop(0)
                            old_stps.pop(0)
                            ro.pop(0)
                        old_dirs.append(y)
                        old_stps.append(s)
                        ro.append(1.0 / ys)
                        H_diag = ys / y.dot(y)
                    num_old = len(old_dirs)
                    al = _loaded(state["al"]) if "al" in state else [None] * history_size
                    q = -flat_grad
                    for i in range(num_old - 1, -1, -1):
                        al[i] = old_stps[i].dot(q) * ro[i]
                        q = q + (-al[i]) * old_dirs[i]
                    d = r = q * H_diag
                    for i in range(num_old):
                        be_i = old_dirs[i].dot(r) * ro[i]
                        r += (al[i] - be_i) * old_stps[i]
                    state["al"] = _stored(al)
                prev_flat_grad = flat_grad.copy()
                prev_loss = loss
                t = min(1.0, 1.0 / np.abs(flat_grad).sum()) * lr if state["n_iter"] == 1 else lr
                gtd = flat_grad.dot(d)
                if gtd > -tolerance_change:
                    break
                ls_func_evals = 0
                if line_search_fn is not None:
                    loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                        lambda x, t, d: self._directional_evaluate(evaluate, x, t, d), self._flat_params(), t, d,
                        loss, flat_grad, gtd, max_ls=max_eval - current_evals)
                    self._add_grad(t, d)
                    opt_cond = np.abs(flat_grad).max() <= tolerance_grad
                else:
                    self._add_grad(t, d)
                    opt_cond = False
                    if n_iter != max_iter:
                        loss = float(evaluate())
                        flat_grad = self._gather_flat_grad()
                        opt_cond = np.abs(flat_grad).max() <= tolerance_grad
                        ls_func_evals = 1
                current_evals += ls_func_evals
                state["func_evals"] += ls_func_evals
                if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                    break
                if np.abs(d * t).max() <= tolerance_change or abs(loss - prev_loss) < tolerance_change:
                    break
            for key, value in (("d", d), ("t", t), ("old_dirs", old_dirs), ("old_stps", old_stps), ("ro", ro),
                               ("H_diag", H_diag), ("prev_flat_grad", prev_flat_grad), ("prev_loss", prev_loss)):
                state[key] = _stored(value)
        return orig_loss
