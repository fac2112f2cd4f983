"""`runners collect` and `runners backends` (the `runners` group is `runners_cli`, which imports this module when
one of them is used: building `collect` reads every engine's declared flags)."""

from __future__ import annotations

import re
import time

import click

from .. import engines
from ..engines.aliases import DEFAULT_MODEL
from ..schema.records import DTYPES
from .common import data_dir_option, db_option, is_interrupt


def engine_flags(after: str):
    """Add the engines' shortcut flags (`engines.flags()`: each engine's `FLAGS`, declared in its module) to the
    command, in its help right after the option `after`; fills `ENGINE_FLAGS`. One flag serves every engine that
    declares it for a field of the same name and kind (its help names them); a flag that would take the name of
    another option of the command, or that two engines declare differently, is left out with a note in
    `FLAG_NOTES` (listed by `runners backends`)."""

    def decorate(f):
        params = f.__click_params__  # the options declared so far, the last one in the help first
        taken = {p.name for p in params} | {opt for p in params for opt in (*p.opts, *p.secondary_opts)}
        taken |= {"help", "-h", "--help"}
        found, problems = engines.flags()
        FLAG_NOTES.extend(problems)
        shared: dict[str, tuple[engines.Flag, type, list[str]]] = {}
        for entry in found:
            flag, kind = entry.flag, (str if entry.flag.size else entry.type)
            if flag.flag in shared:
                first, first_kind, users = shared[flag.flag]
                if (first.field, first.size, first_kind) == (flag.field, flag.size, kind):
                    users.append(entry.engine)
                else:
                    FLAG_NOTES.append(f"engine {entry.engine!r}: shortcut flag {flag.flag} is left out: "
                                      f"{'/'.join(users)} declares it for another setting")
                continue
            if flag.flag in taken or flag.field in taken or not flag.flag.startswith("--"):
                FLAG_NOTES.append(f"engine {entry.engine!r}: shortcut flag {flag.flag} ({flag.field}) is left out: "
                                  f"the name is another option's of `runners collect`")
                continue
            shared[flag.flag] = (flag, kind, [entry.engine])
        options = []
        for name, (flag, kind, users) in shared.items():
            ENGINE_FLAGS[flag.field] = flag
            if kind is bool:  # a switch: --batch, not --batch true
                options.append(click.Option([name, flag.field], is_flag=True, flag_value=True, default=None,
                                            help=f"{', '.join(users)}: {flag.help}"))
                continue
            options.append(click.Option([name, flag.field], type=click.types.convert_type(kind), default=None,
                                        metavar=flag.metavar, help=f"{', '.join(users)}: {flag.help}"))
        at = next(i for i, p in enumerate(params) if p.name == after)
        params[at:at] = options[::-1]
        return f

    return decorate


#: the engine flags of `runners collect` (shortcuts of --engine-arg KEY=VALUE): engine setting -> its `Flag`, from
#: the engine registry when the command is defined (`engine_flags`)
ENGINE_FLAGS: dict[str, engines.Flag] = {}
#: engines' flag declarations left out, one line each
FLAG_NOTES: list[str] = []


@click.command("collect")
@engine_flags(after="device")
@click.option("--dataset", required=True, help="Dataset name (see `biaslab data list`).")
@click.option("--protocol", default=None,
              help="prob: score each option filled into the slot (or the whole sentence); choice: forced-choice "
                   "chat prompt (winopron); meta: comprehension questions about the winopron passages "
                   "(anaphora, part of speech, "
                   "tracking: the contextual-invariance paper's Table 4); gen: sampled continuations of "
                   "misgendering prompts (misgendered, ruff: "
                   "cut before the slot and with the gold pronoun; tango: the prompt). tango's prob scores "
                   "templates built from the model's own stored gen continuations. Default per dataset.")
@click.option("--model", default=DEFAULT_MODEL, show_default=True,
              help="Built-in alias, local folder, .gguf file, or Hugging Face hub id (openai: the served model's "
                   "folder or alias, whose tokenizer is loaded here; the served name comes from the server's "
                   "/v1/models).")
@click.option("--backend", type=click.Choice(engines.names()), default=engines.DEFAULT_BACKEND, show_default=True,
              help="Engine: hf (in-process transformers), vllm (in-process vLLM engine), openai (an OpenAI-compatible "
                   "completions server, with --base-url), or an engine plugin of an installed package (entry-point "
                   "group biaslab.engines). Part of the model key: engines never mix. See `runners backends`.")
@click.option("--revision", default=None,
              help="hf: hub revision (branch, tag or commit) of a hub id; the resolved commit is part of the "
                   "model key.")
@click.option("--model-arg", "model_args", multiple=True, metavar="KEY=VALUE",
              help="hf: model constructor argument (repeatable), e.g. trust_remote_code=true (never on unless given), "
                   "attn_implementation=eager. Part of the model key.")
@click.option("--dtype", type=click.Choice(DTYPES), default=None,
              help="Weights dtype (default: bf16 on GPU; on a CPU with native bf16 (AVX512-BF16 or AMX), bf16 "
                   "only where it measured faster on this CPU and model shape (measured once, cached and recorded "
                   "in the run), else fp32). With --backend "
                   "openai it is required: the dtype the server runs (part of the model key).")
@click.option("--quant", type=click.Choice(["none", "nf4"]), default="none", show_default=True,
              help="nf4: 4-bit NF4 weights with bf16 compute through bitsandbytes (GPU only).")
@click.option("--device", default=None,
              help="hf: torch device (default: cuda when present, else cpu), or auto: accelerate's device_map over "
                   "every visible GPU, for models that do not fit one.")
@click.option("--pll", type=click.Choice(["original", "within_word_l2r"]), default=None,
              help="prob, masked LMs: pseudo-log-likelihood scheme (Salazar et al. 2020 / Kauf and Ivanova 2023; "
                   "default original).")
@click.option("--limit", type=int, default=None, metavar="N",
              help="Only N items, whole (a CrowS-Pairs pair, a WinoPron template with its 10 stimuli, a BBQ "
                   "example), after --where: a fair sample spread over the dataset's strata (BBQ's categories, "
                   "CrowS-Pairs' bias types, ...) in a seeded order, so a larger limit, a rerun or a shard extends "
                   "the same sample.")
@click.option("--limit-order", type=click.Choice(["spread", "file"]), default="spread", show_default=True,
              help="Which items --limit takes: spread (seeded, stratified) or file (the dataset's own order, ids "
                   "in natural order: what another tool's limit takes).")
@click.option("--limit-seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="The seed of the spread order (stored with the run).")
@click.option("--where", "where", multiple=True, metavar="FIELD=VALUE",
              help="Only stimuli whose FIELD has VALUE (repeatable: all must hold; VALUE|VALUE for either): a "
                   "stimulus field (context, option_order, item_id, occupation, referent_role, pronoun_set, ...) or "
                   "attrs.NAME for an attribute of your own study, e.g. --where context=unprimed "
                   "--where attrs.name_rating='0.9|0.1'. `biaslab sql \"describe stimuli\"` lists the fields.")
@click.option("--batch-tokens", "max_tokens", type=int, default=4096, show_default=True,
              help="Token budget of one padded batch (length-sorted; halved automatically on out-of-memory).")
@click.option("--chunk-size", type=int, default=256, show_default=True,
              help="Requests written per transaction (the most an interruption can lose). Exact mode writes whole "
                   "explorations: at least --prompt-batch prompts per transaction where that many are pending.")
@click.option("--mode", type=click.Choice(["exact", "sample", "logprobs"]), default=None,
              help="choice / meta: exact probabilities from one pass per trie level (default), or seeded samples; "
                   "logprobs: a chat API's approximation from the top log-probabilities of the first answer token "
                   "(--backend openai-chat; labelled approximate, never pooled with exact).")
@click.option("--samples", type=int, default=None,
              help="Samples per prompt (choice sample mode: 200; gen: 5).")
@click.option("--seed", type=int, default=None, help="Sampling: run seed (one derived seed per sample; default 0).")
@click.option("--temperature", type=float, default=None, help="Sampling temperature (choice: 0.5; gen: 1.0).")
@click.option("--top-k", type=int, default=None,
              help="Sampling top-k (choice: 40; gen: 50); 0: no top-k truncation (chat APIs without top_k).")
@click.option("--top-p", type=float, default=None, help="Sampling top-p (choice: 1.0, sample mode only; gen: 0.95).")
@click.option("--max-new-tokens", type=int, default=None,
              help="Tokens generated (choice: 6 after the prefill; gen: 50).")
@click.option("--min-new-tokens", type=int, default=None,
              help="gen: end-of-text is impossible before this many tokens (default: --max-new-tokens, as upstream).")
@click.option("--k-store", type=int, default=None,
              help="Exact mode: logits kept per trie node (default 64; later re-derivation works for any top-k <= "
                   "this).")
@click.option("--prompt-batch", type=int, default=None,
              help="Exact mode: prompts explored together (default 96): their answer-trie levels share forward "
                   "passes, and "
                   "their own tokens are encoded up to 16 per pass after the template's shared prefix (computed "
                   "once); fewer are taken where their key/value cache would pass 2 GiB, and 16 at most for models "
                   "whose cache has sliding-window layers or whose attention takes no tree mask. fp32 numbers move by "
                   "~1e-5 with the batch; in bf16 by up to the dtype's own rounding (see docs/decisions.md). 1 "
                   "makes every prompt's numbers independent of the batch.")
@click.option("--threads", type=int, default=None,
              help="CPU threads for torch, fixed (default: every core this process may run on, from its CPU "
                   "affinity, less the cores other processes keep busy, measured once at the start and fixed for "
                   "the run: a busy neighbour otherwise slows many small multi-threaded steps far more than it "
                   "takes; the count is recorded in the run, and a resumed run takes the count its first run "
                   "recorded). bf16 numbers can change with the count on some CPUs: "
                   "fix it for bf16 evidence that does not depend on the machine's load.")
@click.option("--prompt", default=None,
              help="choice / meta: prompt file, a packaged name or a .json file with version/system/user/prefill/"
                   "closing (default forced_choice_v1; with --protocol meta metaprompt_v1).")
@click.option("--subset", default=None, help="Dataset subset (loader option), e.g. type2 for winobias.")
@click.option("--pronouns", default=None, help="Pronoun families (loader option), e.g. all for tango.")
@click.option("--option", "-o", "extra", multiple=True, metavar="KEY=VALUE", help="Other loader option (repeatable).")
@click.option("--shard", default=None, metavar="I/N",
              help="Collect only shard I (0-based) of N: stimuli whose content hash is I modulo N (into --db, or "
                   "with --out-shard into the shard's own file).")
@click.option("--out-shard", default=None, type=click.Path(file_okay=False),
              help="With --shard: write this shard's own warehouse file into this folder (merge them later with "
                   "`biaslab warehouse merge FOLDER --db ...`).")
@click.option("--accept-modified", is_flag=True,
              help="Load dataset files whose sha256 differs from the pinned upstream file (a modified copy); their "
                   "stimuli record the file's own sha256 as upstream_version. Without it such files are refused.")
@click.option("--engine-arg", "engine_arg", multiple=True, metavar="KEY=VALUE",
              help="Engine setting of --backend (repeatable), checked by the engine's own options; the flags above "
                   "are shortcuts for the common ones. `runners backends` lists each engine's settings.")
@click.option("--yes", "-y", is_flag=True,
              help="A chat API (billed per token): send without asking. Without it, the number of requests, the "
                   "estimated tokens and the cost are shown first and, on a terminal, confirmed.")
@db_option
@data_dir_option
def collect_command(**options) -> None:
    """Collect raw evidence for DATASET with MODEL into the warehouse.

    Loads the dataset's stimuli (from --data-dir / $BIASLAB_DATA, or those already stored), skips requests this
    model has already answered, and appends the rest chunk by chunk. A protocol's own options (choice: --mode,
    --samples, --seed, --temperature, --top-k, --top-p, --max-new-tokens, --k-store, --prompt, --prompt-batch;
    gen: the sampling options and --min-new-tokens; prob: --pll) are refused with any other protocol. Examples:

        runners collect --dataset winopron                      (exact choice probabilities, default model)

        runners collect --dataset winopron --mode sample --samples 200 --seed 1

        runners collect --dataset negation-examples --db n.duckdb

        runners collect --dataset ruff --protocol gen --limit 20   (5 continuations each, pre and post)

        runners collect --dataset tango --limit 20; runners collect --dataset tango --protocol prob --limit 20
    """
    from ..runners.collect import collect
    from .progress import progress_bar

    yes = options.pop("yes")
    config = collect_config(options)
    config.validate()
    started = time.perf_counter()
    from pathlib import Path

    shown = Path(config.model).name if Path(config.model).exists() else config.model  # a folder: its name
    bar, factory = progress_bar(f"{config.dataset} / {shown}")
    try:
        with bar:
            result = collect(config, progress=factory,
                             confirm=confirmation(bar, yes, capped=lambda: has_cost_cap(config)))
    except BaseException as exc:  # Ctrl-C, SIGTERM, or DuckDB's InterruptException: the run is marked
        if not is_interrupt(exc):  # interrupted and its finished chunks are stored
            raise
        click.echo(interrupted_line(config, exc), err=True)
        raise SystemExit(130) from None
    click.echo(f"{config.dataset}: {result.stimuli} stimuli, {result.requests} requests, {result.pending} pending, "
               f"{result.added} {result.added_unit} added for model {result.model_key} in "
               f"{time.perf_counter() - started:.1f} s (run {result.run_id[:8]})")
    for line in result.notes:
        click.echo(line)
    if result.note:
        click.echo(f"{config.dataset}: {result.note}")


def interrupted_line(config, exc: BaseException | None = None) -> str:
    """One line after Ctrl-C (or SIGTERM, SIGHUP: `exc`, the exception that ended the collection, names it) during
    a collection: what the interrupted run kept and how to resume."""
    import os

    from ..runners.runs import RunInterrupted
    from ..schema import evidence
    from ..warehouse import Warehouse

    kept = ""
    try:
        with Warehouse.open(config.database(), read_only=True) as wh:
            row = wh.rows("SELECT run_id, rows_added FROM runs WHERE pid = ? AND status = 'interrupted' "
                          "ORDER BY started_at DESC LIMIT 1", [os.getpid()])
        if row:
            unit = evidence.added_unit(config.plugin().table)
            kept = f"run {row[0][0][:8]} kept {row[0][1] or 0} {unit} (whole chunks); "
    except Exception:  # noqa: BLE001 - the line must come out whatever the warehouse's state
        kept = ""
    why = (str(exc).removeprefix("received ") if isinstance(exc, RunInterrupted)
           else "Ctrl-C" if exc is None or isinstance(exc, KeyboardInterrupt) else "a signal during a DuckDB statement")
    return f"interrupted ({why}): {kept}run the same command again to resume, it computes only what is missing: " \
           f"{config.command_line()}"


def confirmation(bar, yes: bool, capped=lambda: False):
    """The question asked before a chat API is sent anything: the estimate on stderr, then, on a terminal and
    without --yes, "Send them?" (the progress display paused meanwhile). Without a terminal to ask (cron, Slurm,
    `</dev/null`) and without --yes, billed requests are sent only under a cost cap (`capped()`: --max-cost given,
    which the estimate was checked against); else nothing is sent and the line says what to give."""
    import sys

    def confirm(line: str) -> bool:
        bar.stop()
        try:
            click.echo(f"about to send {line}", err=True)
            if yes:
                return True
            if not sys.stdin.isatty():
                if capped():
                    return True
                click.echo("no terminal to ask, and neither --yes nor --max-cost given: billed requests are sent "
                           "only when agreed to", err=True)
                return False
            return click.confirm("Send them?", default=False, err=True)
        finally:
            bar.start()

    return confirm


def has_cost_cap(config) -> bool:
    """Whether a collection's engine takes a cost cap and it is given (--max-cost)."""
    return config.engine_args.get("max_cost") is not None


#: the common fields of `CollectConfig` the command passes as they are
COMMON = ("dataset", "protocol", "model", "backend", "revision", "dtype", "quant", "device", "limit", "limit_order",
          "limit_seed", "max_tokens",
          "chunk_size", "threads", "shard", "out_shard", "accept_modified", "db", "data_dir")


def collect_config(options: dict):
    """The `CollectConfig` of the command's options: the common ones as they are, the engine flags and
    --engine-arg pairs as engine arguments, --subset / --pronouns / --option as loader options, every other option
    given as a setting of the protocol."""
    from ..runners.collect import CollectConfig
    from .data_cmd import parse_options

    options = dict(options)
    engine = {}
    for field, flag in ENGINE_FLAGS.items():
        value = options.pop(field, None)
        if value is not None:
            engine[field] = parse_size(value, flag.flag) if flag.size else value
    for key, value in parse_pairs(options.pop("engine_arg"), "--engine-arg").items():
        if key in engine:
            raise click.BadParameter(f"{key} is given twice (as its own flag and as --engine-arg)",
                                     param_hint="--engine-arg")
        engine[key] = value
    loader = {k: v for k, v in {"subset": options.pop("subset"), "pronouns": options.pop("pronouns")}.items()
              if v is not None}
    loader.update(parse_options(options.pop("extra")))
    model_args = parse_model_args(options.pop("model_args"))
    where = parse_pairs(options.pop("where"), "--where")
    common = {k: options.pop(k) for k in COMMON}
    protocol = {k: v for k, v in options.items() if v is not None}
    return CollectConfig(**common, model_args=model_args, engine_args=engine, loader_options=loader, where=where,
                         **protocol)


def parse_pairs(pairs, option: str) -> dict[str, str]:
    """KEY=VALUE strings of a repeatable option as a dict (values kept as strings; the receiver types them)."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint=option)
        if key.strip() in out:
            raise click.BadParameter(f"{key.strip()} given twice", param_hint=option)
        out[key.strip()] = value.strip()
    return out


def parse_model_args(pairs) -> dict[str, str]:
    """KEY=VALUE strings of --model-arg as a dict (values kept as strings; `models.parse_model_args` types them)."""
    return parse_pairs(pairs, "--model-arg")


#: unit suffixes of `parse_size` (binary and decimal, as written by people and by vLLM's own flags)
SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6, "mib": 2**20,
              "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12, "tib": 2**40}


def parse_size(text: str | None, option: str) -> int | None:
    """A byte count from "4GiB", "1.5 GB", "512MiB" or "1073741824" (None stays None); a one-line
    `click.BadParameter` naming `option` for anything else or a size below one byte."""
    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([A-Za-z]*)\s*", text)
    unit = match[2].lower() if match else None
    if match is None or unit not in SIZE_UNITS:
        raise click.BadParameter(f"{text!r} is not a size (examples: 4GiB, 512MiB, 1073741824)", param_hint=option)
    value = int(float(match[1]) * SIZE_UNITS[unit])
    if value < 1:
        raise click.BadParameter(f"{text!r} is below one byte", param_hint=option)
    return value


@click.command("backends", short_help="List the backends: installed or not, what each can run, the settings it takes.")
def backends_command() -> None:
    """List the backends: whether each is installed here (with its engine version, or why not), what it can
    run (score: prob on causal LMs; pll: masked LMs; top_k: choice exact mode; sample: choice sample mode, gen), and
    the settings it takes as `--engine-arg KEY=VALUE`: the built-in engines and the plugins of installed packages
    (entry-point group biaslab.engines; a plugin that does not import is listed as not installed, with why)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="runners backends")
    for column in ("backend", "installed", "version", "capabilities"):
        table.add_column(column, overflow="fold")
    settings, plugins, reasons = [], [], []
    for name in engines.names():
        why = engines.problem(name)
        ok, detail, capabilities = False, why, ""
        if not why:
            module = engines.get(name)
            try:
                ok, detail = module.installed()
                capabilities = ", ".join(sorted(module.CAPABILITIES))
                settings.append(f"{name}: {', '.join(module.Options.model_fields) or 'none'}")
            except Exception as exc:  # a plugin's own failure is listed, not raised
                if name in engines.BACKENDS:
                    raise
                ok, detail = False, f"its installed() fails ({type(exc).__name__}: {exc})"
        if not ok:  # a reason is a sentence: below the table, where it does not squeeze the columns
            reasons.append(f"{name} is not installed: {detail}")
        table.add_row(name, "yes" if ok else "no", detail if ok else "(see below)", capabilities)
        if name not in engines.BACKENDS:
            plugins.append(f"{name}: {engines.origin(name)}")
    Console().print(table)
    for line in reasons:
        click.echo(line)
    click.echo("engine settings (--engine-arg KEY=VALUE): " + "; ".join(settings))
    if plugins:
        click.echo(f"engine plugins ({engines.GROUP} entry points): " + "; ".join(plugins))
    for line in (*engines.notes(), *FLAG_NOTES):
        click.echo(line)
