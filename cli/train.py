"""`swarm train`: the initiator. `--local` runs the single-process baseline the swarm must equal."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cli.errors import check_region, fail, user_errors
from models.data import EMBEDDED, DataError
from models.partition import PartitionError
from models.presets import ModelConfigError
from models.tokenizer import TokenizerError
from swarm.config import OPTIMIZERS, ConfigError, TrainConfig

USER_ERRORS = (ConfigError, DataError, PartitionError, ModelConfigError, TokenizerError)


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]iteration"),
        MofNCompleteColumn(),
        BarColumn(),
        TextColumn("loss [cyan]{task.fields[loss]}"),
        TextColumn("[green]{task.fields[tps]}[/] tokens/s"),
        TimeElapsedColumn(),
        console=console,
    )


def resumed_config(directory: str, cfg: TrainConfig) -> TrainConfig:
    """The checkpointed run's options (same model, data stream and schedule); this call may change
    only how long it runs and where."""
    from dataclasses import fields

    from swarm.recovery.checkpoints import read_progress

    try:
        saved = read_progress(directory)["train_config"]
    except (ValueError, KeyError, OSError) as exc:
        raise ConfigError(f"cannot resume from {directory}: {exc}") from None
    keep = {"iterations", "device", "run_id"}
    known = {f.name for f in fields(TrainConfig)}
    options = {k: v for k, v in saved.items() if k in known and k not in keep}
    options["betas"] = tuple(options.get("betas", cfg.betas))
    return TrainConfig(**{**cfg.to_dict(), **options, "model": directory})


def register(app: typer.Typer) -> None:
    @app.command()
    @user_errors(*USER_ERRORS)
    def train(
        local: bool = typer.Option(False, "--local", help="Train the whole model in this one process."),
        model: str = typer.Option("llama-tiny", help="Preset, config.json or checkpoint dir."),
        data: str = typer.Option(EMBEDDED, help="'embedded' (stdlib sources), a text/JSONL file or folder."),
        tokenizer: str = typer.Option("bytes", help="'bytes' or a local transformers tokenizer directory."),
        text_field: str = typer.Option("text", help="JSONL field holding the text."),
        stages: int = typer.Option(2, help="Pipeline stages the model is cut into."),
        iterations: int = typer.Option(50),
        batch_size: int = typer.Option(16, help="Sequences per iteration (global batch)."),
        microbatch_size: int = typer.Option(4, help="Sequences per microbatch; must divide --batch-size."),
        seq_len: int = typer.Option(128),
        lr: float = typer.Option(3e-3),
        weight_decay: float = typer.Option(0.01),
        optimizer: str = typer.Option("adamw", help=f"One of {', '.join(OPTIMIZERS)}."),
        seed: int = typer.Option(0),
        device: str = typer.Option("cpu", help="cpu or cuda."),
        save: str | None = typer.Option(None, help="Write a full transformers checkpoint here at the end."),
        metrics_out: str | None = typer.Option(None, help="JSON lines, one per iteration."),
        compression: str = typer.Option("none", help="Activations/gradients on the wire: none, fp16, int8."),
        exact_gradients: bool = typer.Option(
            True, help="Sum microbatch gradients in float64 (bit-stable under any order; 2x gradient memory)."
        ),
        stage_recovery: str = typer.Option(
            "auto", help="A stage that lost every replica comes back from: auto, checkpoint, neighbours."
        ),
        recovery_max_age: int = typer.Option(
            50, help="With auto: a checkpoint older than this many iterations loses to the neighbours."
        ),
        holder_demand: str = typer.Option(
            "all",
            help="What data holders ask the routing for: all (as much as the swarm carries) or "
            "adaptive (twice the microbatches/s they measured in their last iteration).",
        ),
        run: str = typer.Option("swarm", "--run", help="Run id (the DHT key prefix)."),
        initial_peers: list[str] = typer.Option([], "--initial-peers", help="Join an existing DHT."),
        host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0 for a public peer)."),
        region: str = typer.Option(
            "", help="Where this initiator (a data holder) is: one of the geo matrix's regions (see join)."
        ),
        local_swarm: int = typer.Option(
            0, help="Start N stage volunteers on loopback beside this initiator."
        ),
        holders: int = typer.Option(1, help="With --local-swarm: data holders in all (this one included)."),
        min_peers: int | None = typer.Option(
            None,
            help="Wait for this many serving stage peers before the first iteration "
            "(default: the --local-swarm count; 0: one per stage is enough).",
        ),
        log_dir: str = typer.Option("runs/local-swarm", help="Where --local-swarm peers write their logs."),
        threads: int = typer.Option(
            0,
            help="torch threads per process (0: default; 1 with --local-swarm). Bit parity between two "
            "runs needs equal thread counts: some CPU reductions depend on it.",
        ),
        verbose: bool = typer.Option(False, "--verbose", "-v"),
        checkpoint_every: int = typer.Option(0, help="With --save: also save every N iterations."),
        resume: str | None = typer.Option(None, help="Continue a run from this checkpoint directory."),
    ) -> None:
        """Start a training run (initiator). With --local: the single-process baseline."""
        cfg = TrainConfig(
            model=model, data=data, tokenizer=tokenizer, text_field=text_field, stages=stages,
            iterations=iterations, batch_size=batch_size, microbatch_size=microbatch_size, seq_len=seq_len,
            lr=lr, weight_decay=weight_decay, optimizer=optimizer, seed=seed, device=device,
            compression=compression, exact_gradients=exact_gradients, run_id=run,
            stage_recovery=stage_recovery, recovery_max_age=recovery_max_age, holder_demand=holder_demand,
        )  # fmt: skip
        if device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                fail("--device cuda asked for, but torch sees no CUDA device")
        check_region(region)
        if local_swarm < 0 or holders < 1:
            fail("--local-swarm must be >= 0 and --holders >= 1")
        if min_peers is not None and min_peers < 0:
            fail(f"--min-peers must be >= 0, got {min_peers}")
        if checkpoint_every < 0 or (checkpoint_every and not save):
            fail("--checkpoint-every needs --save DIR and a positive N")
        if resume:
            cfg = resumed_config(resume, cfg)
        if not local:
            cfg.validate()
            from cli.swarm_train import train_swarm

            train_swarm(cfg, initial_peers=list(initial_peers), host=host, local_swarm=local_swarm,
                        holders=holders, log_dir=log_dir, threads=threads, verbose=verbose, region=region,
                        save=save, metrics_out=metrics_out, resume=resume,
                        checkpoint_every=checkpoint_every, min_peers=min_peers)  # fmt: skip
            return
        from swarm.trainer.local import LocalTrainer, train_local

        if threads:
            import torch

            torch.set_num_threads(threads)  # reductions (LayerNorm's backward) depend on the count

        console = Console(stderr=True)
        trainer = LocalTrainer(cfg)  # every user error surfaces here, before the progress bar
        if resume:
            trainer.resume(resume)
        with _progress(console) as progress:
            task = progress.add_task("train", total=iterations, loss="-", tps="-")

            def show(m) -> None:
                progress.update(task, advance=1, loss=f"{m.loss:.4f}", tps=f"{m.tokens_per_s:,.0f}")

            progress.update(task, completed=trainer.iteration)
            history = train_local(trainer, save=save, metrics_out=metrics_out, on_iteration=show,
                                  checkpoint_every=checkpoint_every)  # fmt: skip
        if history:
            first, last = history[0], history[-1]
            mean_tps = sum(m.tokens for m in history) / max(sum(m.seconds for m in history), 1e-9)
            console.print(
                f"done: {len(history)} iterations, loss {first.loss:.4f} -> {last.loss:.4f}, "
                f"{mean_tps:,.0f} tokens/s" + (f", checkpoint in {save}" if save else "")
            )
