"""The pass base class and its typed options (``lezero.passes.registry`` finds passes by name).

A pass is a small dataclass: its fields are its options, ``name`` is what pipelines call it,
``summary`` is one line for ``lezero-opt --list-passes``::

    @dataclass
    class Fuse(Pass):
        name = "fuse"
        summary = "Group elementwise ops into lz.kernel ops"
        max_ops: int = option(16, "largest number of ops in one kernel")

        def run(self, module):
            ...

In a pipeline its options are spelled with dashes: ``fuse{max-ops=8}``.  Option types are
``int``, ``float``, ``bool``, ``str`` and ``list[int]`` / ``list[float]`` / ``list[str]``.
"""
from __future__ import annotations

import dataclasses
import difflib
import logging
import typing
from dataclasses import dataclass
from typing import ClassVar

from lezero.ir.core import ModuleOp

OPTION_TYPES = (int, float, bool, str, list[int], list[float], list[str])


class PipelineError(ValueError):
    """A bad pipeline: unknown pass or option, a malformed value, broken syntax.

    ``text`` is the whole pipeline and ``position`` the offset of the offending part (or None).
    """

    def __init__(self, message: str, text: str = "", position: int | None = None):
        super().__init__(message)
        self.message = message
        self.text = text
        self.position = position

    def __str__(self) -> str:
        if not self.text or self.position is None:
            return self.message
        return f"{self.message}\n  {self.text}\n  {' ' * self.position}^"


def option(default, help: str = ""):
    """A pass option with a default and a line of help (lists get a fresh copy per instance)."""
    if isinstance(default, (list, tuple)):
        values = list(default)
        return dataclasses.field(default_factory=lambda: list(values), metadata={"help": help})
    return dataclasses.field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class OptionInfo:
    """One option as pipelines and ``--list-passes`` see it."""

    name: str        # pipeline spelling: max-ops
    field: str       # Python attribute: max_ops
    type: type       # one of OPTION_TYPES
    default: object
    help: str = ""

    @property
    def type_name(self) -> str:
        return type_name(self.type)


@dataclass(frozen=True)
class PassInfo:
    name: str
    summary: str
    options: tuple  # of OptionInfo
    cls: type


def type_name(t) -> str:
    if typing.get_origin(t) is list:
        return f"list[{typing.get_args(t)[0].__name__}]"
    return getattr(t, "__name__", str(t))


@dataclass
class Pass:
    """Base of all passes.  Subclasses set ``name`` and ``summary`` and override ``run``."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def run(self, module: ModuleOp) -> None:
        """Transform ``module`` in place."""
        raise NotImplementedError(f"pass '{self.name}' does not implement run()")

    # --- options ---------------------------------------------------------------------------------
    @classmethod
    def options(cls) -> tuple[OptionInfo, ...]:
        hints = typing.get_type_hints(cls)
        out = []
        for f in dataclasses.fields(cls):
            t = hints[f.name]
            if t not in OPTION_TYPES:
                raise TypeError(f"option '{f.name}' of pass '{cls.name}' has type {type_name(t)}; "
                                f"options are {', '.join(type_name(x) for x in OPTION_TYPES)}")
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            else:
                raise TypeError(f"option '{f.name}' of pass '{cls.name}' needs a default")
            out.append(OptionInfo(f.name.replace("_", "-"), f.name, t, default, f.metadata.get("help", "")))
        return tuple(out)

    @classmethod
    def from_options(cls, values: dict[str, str], text: str = "", position: int | None = None) -> "Pass":
        """An instance from option text (``{"max-ops": "16"}``), checking names and values."""
        infos = {o.name: o for o in cls.options()}
        kwargs = {}
        for key, raw in values.items():
            info = infos.get(key) or infos.get(key.replace("_", "-"))
            if info is None:
                valid = ", ".join(f"{o.name} ({o.type_name})" for o in infos.values()) or "none"
                close = difflib.get_close_matches(key, list(infos), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                raise PipelineError(f"unknown option '{key}' for pass '{cls.name}'{hint} "
                                    f"(valid options: {valid})", text, position)
            try:
                kwargs[info.field] = parse_option_value(raw, info.type)
            except ValueError:
                raise PipelineError(f"option '{key}' of pass '{cls.name}' expects {_article(info.type)}, "
                                    f"got '{raw}'", text, position) from None
        return cls(**kwargs)

    def option_values(self) -> dict[str, object]:
        return {o.name: getattr(self, o.field) for o in self.options()}

    def pipeline_text(self) -> str:
        """How this pass is written in a pipeline; options at their default are left out."""
        changed = [f"{o.name}={format_option_value(getattr(self, o.field))}"
                   for o in self.options() if getattr(self, o.field) != o.default]
        return self.name + ("{" + " ".join(changed) + "}" if changed else "")


def _article(t) -> str:
    return {int: "an int", float: "a float", bool: "a bool (true or false)", str: "a string"}.get(
        t, f"a comma-separated {type_name(t)}")


def parse_option_value(raw: str, t):
    """``"16"`` as int, ``"0,1"`` as list[int], ...; raises ValueError for a bad value."""
    if typing.get_origin(t) is list:
        item = typing.get_args(t)[0]
        return [] if raw.strip() == "" else [parse_option_value(x.strip(), item) for x in raw.split(",")]
    if t is bool:
        lowered = raw.lower()
        if lowered in ("true", "1", "on", "yes"):
            return True
        if lowered in ("false", "0", "off", "no"):
            return False
        raise ValueError(raw)
    if t is int:
        return int(raw, 0)
    if t is float:
        return float(raw)
    if t is str:
        if len(raw) >= 2 and raw[0] == raw[-1] == '"':
            return raw[1:-1]
        return raw
    raise ValueError(raw)


def format_option_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(format_option_value(v) for v in value)
    if isinstance(value, str) and (value == "" or any(c in value for c in " {},=\"")):
        return '"' + value + '"'
    return str(value)


# --- debug channels ----------------------------------------------------------------------------

_DEBUG_CHANNELS: dict[str, logging.Logger] = {}


def debug_channel(name: str) -> logging.Logger:
    """The logger of debug channel ``name`` (``lezero.<name>``), which ``lezero-opt --debug=name``
    turns on; passes log their decisions on it at DEBUG level."""
    logger = logging.getLogger("lezero." + name.replace("-", "_"))
    _DEBUG_CHANNELS[name] = logger
    return logger


def debug_channels() -> dict[str, logging.Logger]:
    """Every registered debug channel by name."""
    return dict(_DEBUG_CHANNELS)
