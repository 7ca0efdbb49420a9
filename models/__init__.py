"""Staged GPT-2 and Llama models (transformers' classes), the partitioner, tokenizers and data."""

from models.checkpoint import full_state_dict, load_part, save_checkpoint
from models.data import EMBEDDED, DataError, DataStream, Schedule, open_source
from models.partition import PartitionError, StageSpec, partition
from models.presets import PRESETS, ModelConfigError, load_config
from models.randomness import EMBED_STAGE, seeded
from models.staged import HolderPart, StageModule, build_full_model, build_holder, build_stage
from models.tokenizer import load_tokenizer

__all__ = [
    "EMBEDDED",
    "EMBED_STAGE",
    "PRESETS",
    "DataError",
    "DataStream",
    "HolderPart",
    "ModelConfigError",
    "PartitionError",
    "Schedule",
    "StageModule",
    "StageSpec",
    "build_full_model",
    "build_holder",
    "build_stage",
    "full_state_dict",
    "load_config",
    "load_part",
    "load_tokenizer",
    "open_source",
    "partition",
    "save_checkpoint",
    "seeded",
]
