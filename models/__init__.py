"""Staged GPT-2 and Llama models (transformers' classes), the partitioner, tokenizers and data.

The names below load on first use (PEP 562): `swarm sim` and `swarm bench flow` import a few light
modules of this package and should not pay for torch and transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "models.checkpoint": ("full_state_dict", "load_part", "save_checkpoint"),
    "models.data": ("EMBEDDED", "DataError", "DataStream", "Schedule", "open_source"),
    "models.partition": ("PartitionError", "StageSpec", "partition"),
    "models.presets": ("PRESETS", "ModelConfigError", "load_config"),
    "models.randomness": ("EMBED_STAGE", "seeded"),
    "models.staged": ("HolderPart", "StageModule", "build_full_model", "build_holder", "build_stage"),
    "models.tokenizer": ("load_tokenizer",),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}
__all__ = sorted(_HOME_OF)


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'models' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
