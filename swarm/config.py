"""The run configuration: the single source of truth for the CLI, the manifest and the trainers."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from models.data import EMBEDDED, Schedule
from models.partition import StageSpec, partition
from models.presets import ModelConfigError, load_config
from swarm.recovery.policy import STAGE_RECOVERY
from swarm.routing.demand import POLICIES as DEMAND_POLICIES

if TYPE_CHECKING:
    from transformers import PretrainedConfig

OPTIMIZERS = ("adamw", "adamw8bit")


class ConfigError(ValueError):
    """An option combination that cannot run; the message says which and why."""


@dataclass
class TrainConfig:
    model: str = "llama-tiny"
    data: str = EMBEDDED
    tokenizer: str = "bytes"
    text_field: str = "text"
    stages: int = 2
    iterations: int = 50
    batch_size: int = 16
    microbatch_size: int = 4
    seq_len: int = 128
    lr: float = 3e-3
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.95)
    optimizer: str = "adamw"
    seed: int = 0
    device: str = "cpu"
    compression: str = "none"
    exact_gradients: bool = True  # float64 accumulation: bit-stable under any arrival order
    stage_recovery: str = "auto"  # a stage that lost every replica: auto, checkpoint or neighbours
    recovery_max_age: int = 50  # auto: checkpoints older than this many iterations lose to neighbours
    holder_demand: str = "all"  # what holders ask the routing for: all or adaptive (swarm/routing/demand.py)
    run_id: str = "swarm"
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def validate(self) -> tuple[PretrainedConfig, list[StageSpec], Schedule]:
        """Check every option; return the model config, the stage layout and the batch schedule."""
        if self.iterations < 0:
            raise ConfigError("--iterations must be >= 0")
        if not self.lr > 0:
            raise ConfigError("--lr must be positive")
        if self.compression not in ("none", "fp16", "int8"):
            raise ConfigError(f"unknown compression {self.compression!r} (use none, fp16 or int8)")
        if self.holder_demand not in DEMAND_POLICIES:
            choices = ", ".join(DEMAND_POLICIES)
            raise ConfigError(f"unknown --holder-demand {self.holder_demand!r} (use {choices})")
        if self.stage_recovery not in STAGE_RECOVERY:
            choices = ", ".join(STAGE_RECOVERY)
            raise ConfigError(f"unknown --stage-recovery {self.stage_recovery!r} (use {choices})")
        if self.recovery_max_age < 0:
            raise ConfigError("--recovery-max-age must be >= 0")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"unknown optimizer {self.optimizer!r} (use one of {', '.join(OPTIMIZERS)})")
        try:
            config = load_config(self.model)
        except ModelConfigError as exc:
            raise ConfigError(str(exc)) from None
        max_positions = getattr(config, "n_positions", None) or getattr(
            config, "max_position_embeddings", None
        )
        if self.seq_len < 2 or (max_positions and self.seq_len > max_positions):
            raise ConfigError(f"--seq-len must be between 2 and the model's {max_positions} positions")
        layout = partition(config.num_hidden_layers, self.stages)
        schedule = Schedule(self.batch_size, self.microbatch_size)
        return config, layout, schedule
