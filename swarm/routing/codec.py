"""The routing protocol's messages on the wire: msgpack maps, never pickle.

Messages are the frozen dataclasses of `swarm.flow.messages`; each travels as a map with a type tag
and its fields. Only those classes decode, every field is type-checked, and anything else is a
`WireError` for the sender, so a malformed or hostile message cannot touch a peer's routing state.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import math
import types
import typing
from typing import Any

from swarm.flow import messages
from swarm.wire import WireError

MAX_ENTRIES = 4096
_CLASSES = {
    cls.__name__: cls
    for cls in vars(messages).values()
    if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == messages.__name__
}


def to_wire(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        out = {"_t": type(value).__name__}
        for f in dataclasses.fields(value):
            out[f.name] = to_wire(getattr(value, f.name))
        return out
    if isinstance(value, typing.Mapping):
        return {str(k): to_wire(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_wire(v) for v in value]
    if isinstance(value, float) and math.isinf(value):
        return {"_inf": 1 if value > 0 else -1}
    return value


def _check(value: Any, hint: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        errors = []
        for option in typing.get_args(hint):
            try:
                return _check(value, option, where)
            except WireError as exc:
                errors.append(str(exc))
        raise WireError(f"{where}: {errors[0] if errors else 'bad value'}")
    if hint is type(None):
        if value is not None:
            raise WireError(f"{where}: expected nothing")
        return None
    if isinstance(value, dict) and "_inf" in value and hint is float:
        return math.inf if value["_inf"] > 0 else -math.inf
    if isinstance(value, dict) and "_t" in value:
        return from_wire(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise WireError(f"{where}: expected a number")
        return float(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise WireError(f"{where}: expected true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise WireError(f"{where}: expected an integer")
        return value
    if hint is str:
        if not isinstance(value, str) or len(value) > 256:
            raise WireError(f"{where}: expected a short string")
        return value
    if origin is tuple:
        item_t, more = typing.get_args(hint)
        if more is not Ellipsis or not isinstance(value, (list, tuple)) or len(value) > MAX_ENTRIES:
            raise WireError(f"{where}: expected a list")
        return tuple(_check(v, item_t, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (typing.Mapping, dict, collections.abc.Mapping):
        key_t, val_t = typing.get_args(hint)
        if not isinstance(value, dict) or len(value) > MAX_ENTRIES:
            raise WireError(f"{where}: expected a map")
        return {_check(k, key_t, where): _check(v, val_t, f"{where}[{k}]") for k, v in value.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        obj = from_wire(value)
        if not isinstance(obj, hint):
            raise WireError(f"{where}: expected {hint.__name__}")
        return obj
    raise WireError(f"{where}: cannot check a field of type {hint}")


def from_wire(raw: Any) -> Any:
    """Rebuild a message; raises WireError on anything that is not exactly one of ours."""
    if not isinstance(raw, dict) or raw.get("_t") not in _CLASSES:
        raise WireError("not a routing message")
    cls = _CLASSES[raw["_t"]]
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    extra = set(raw) - names - {"_t"}
    if extra:
        raise WireError(f"{cls.__name__}: unknown fields {sorted(extra)}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in raw:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise WireError(f"{cls.__name__}: missing {f.name}")
            continue
        kwargs[f.name] = _check(raw[f.name], hints[f.name], f"{cls.__name__}.{f.name}")
    return cls(**kwargs)
