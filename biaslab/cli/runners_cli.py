"""The `runners` command: run models over stimuli and append raw evidence to the warehouse."""

from __future__ import annotations

import time

import click

from ..runners.aliases import DEFAULT_MODEL
from .common import Group, data_dir_option, db_option


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
def runners() -> None:
    """Run language models over loaded stimuli and store raw evidence (scores, choice logits, samples).

    Every command appends to a DuckDB warehouse idempotently: running it twice adds nothing, and an interrupted
    run resumes where it stopped.
    """


@runners.command("collect")
@click.option("--dataset", required=True, help="Dataset name (see `biaslab data list`).")
@click.option("--protocol", default=None,
              help="prob: score each option filled into the slot (or the whole sentence). Default per dataset.")
@click.option("--model", default=DEFAULT_MODEL, show_default=True,
              help="Built-in alias, local folder, .gguf file, or Hugging Face hub id.")
@click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp32"]), default=None,
              help="Weights dtype (default: bf16 on GPU and on CPUs with bf16 support, else fp32).")
@click.option("--quant", type=click.Choice(["none", "nf4"]), default="none", show_default=True,
              help="nf4: 4-bit NF4 weights with bf16 compute through bitsandbytes (GPU only).")
@click.option("--device", default=None, help="torch device (default: cuda when present, else cpu).")
@click.option("--pll", type=click.Choice(["original", "within_word_l2r"]), default="original", show_default=True,
              help="Masked LMs: pseudo-log-likelihood scheme (Salazar et al. 2020 / Kauf and Ivanova 2023).")
@click.option("--limit", type=int, default=None, help="Only the first N stimuli.")
@click.option("--batch-tokens", "max_tokens", type=int, default=4096, show_default=True,
              help="Token budget of one padded batch (length-sorted; halved automatically on out-of-memory).")
@click.option("--chunk-size", type=int, default=256, show_default=True,
              help="Requests written per transaction (the most an interruption can lose).")
@click.option("--subset", default=None, help="Dataset subset (loader option), e.g. type2 for winobias.")
@click.option("--pronouns", default=None, help="Pronoun families (loader option), e.g. all for tango.")
@click.option("--seed", type=int, default=None, help="Loader seed (misgendered name draws).")
@db_option
@data_dir_option
def collect_command(dataset, protocol, model, dtype, quant, device, pll, limit, max_tokens, chunk_size, subset,
                    pronouns, seed, db, data_dir) -> None:
    """Collect raw evidence for DATASET with MODEL into the warehouse.

    Loads the dataset's stimuli (from --data-dir / $BIASLAB_DATA, or those already stored), skips requests this
    model has already answered, and appends the rest chunk by chunk. Example:

        runners collect --dataset negation-examples --db n.duckdb
    """
    from ..runners.collect import CollectConfig, collect
    from .progress import progress_bar

    options = {k: v for k, v in {"subset": subset, "pronouns": pronouns, "seed": seed}.items() if v is not None}
    config = CollectConfig(dataset=dataset, protocol=protocol, model=model, dtype=dtype, quant=quant, device=device,
                           db=db, data_dir=data_dir, limit=limit, pll=pll, max_tokens=max_tokens,
                           chunk_size=chunk_size, loader_options=options)
    config.validate()
    started = time.perf_counter()
    bar, factory = progress_bar(f"{dataset} / {model}")
    with bar:
        result = collect(config, progress=factory)
    click.echo(f"{dataset}: {result.stimuli} stimuli, {result.requests} requests, {result.pending} pending, "
               f"{result.added} added for model {result.model_key} in {time.perf_counter() - started:.1f} s "
               f"(run {result.run_id[:8]})")
