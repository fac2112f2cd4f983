"""The collect spec: common options, a protocol's own settings (refused for another protocol), engine settings as
`--engine-arg KEY=VALUE`, and the command line a run records. No model is loaded."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from biaslab.cli.runners_cli import collect_config, runners
from biaslab.runners.collect import CollectConfig


def _invoke(*args):
    return CliRunner().invoke(runners, ["collect", *args], catch_exceptions=False)


@pytest.mark.parametrize("args, message", [
    (["--dataset", "winogender", "--mode", "sample"], "--mode does not apply to --protocol prob (it takes --pll)"),
    (["--dataset", "winopron", "--pll", "original"], "--pll does not apply to --protocol choice"),
    (["--dataset", "ruff", "--protocol", "gen", "--k-store", "128"], "--k-store does not apply to --protocol gen"),
    (["--dataset", "winopron", "--temperature", "-1"], "--temperature must be > 0, got -1.0"),
    (["--dataset", "winopron", "--mode", "sample", "--samples", "1000000000"],
     "--samples must be at most 200000, got 1000000000"),
    (["--dataset", "winopron", "--engine-arg", "colour=red"], "--backend hf takes no engine arguments (got colour)"),
    (["--dataset", "winopron", "--backend", "openai", "--dtype", "fp32", "--base-url", "http://x/v1",
      "--engine-arg", "base_url=http://y/v1"], "base_url is given twice"),
    (["--dataset", "winopron", "--engine-arg", "oops"], "'oops' is not KEY=VALUE"),
])
def test_options_of_another_protocol_or_engine_are_refused_in_one_line(args, message, tmp_path):
    result = _invoke(*args, "--db", str(tmp_path / "w.duckdb"))
    assert result.exit_code != 0
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "w.duckdb").exists()  # refused before anything is written


def test_engine_args_reach_the_engines_own_options():
    config = collect_config({**_defaults(), "dataset": "winopron", "backend": "openai", "dtype": "fp32",
                             "base_url": "http://127.0.0.1:9/v1", "engine_arg": ("max_concurrency=3", "retries=0")})
    assert config.engine_args == {"base_url": "http://127.0.0.1:9/v1", "max_concurrency": "3", "retries": "0"}
    from biaslab.engines import openai

    settings = openai.engine_settings(config.backend_options())
    assert (settings["max_concurrency"], settings["retries"], settings["base_url"]) == (3, 0, "http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match="unknown engine argument 'tensor_parallel_size'"):
        openai.engine_settings(CollectConfig(dataset="winopron", engine_args={
            "base_url": "http://x/v1", "tensor_parallel_size": "2"}).backend_options())
    with pytest.raises(ValueError, match="max_concurrency: .*at least 1"):
        openai.engine_settings(CollectConfig(dataset="winopron", engine_args={
            "base_url": "http://x/v1", "max_concurrency": "0"}).backend_options())


def test_the_recorded_command_names_every_option_given():
    config = CollectConfig(dataset="winopron", mode="sample", limit=5, samples=20, seed=1, dtype="fp32",
                           engine_args={}, loader_options={"subset": "x"})
    line = config.command_line()
    assert line.startswith("runners collect --dataset winopron")
    for part in ("--mode sample", "--limit 5", "--samples 20", "--seed 1", "--dtype fp32", "--option subset=x"):
        assert part in line, part
    assert "--db" not in line and "--chunk-size" not in line  # defaults not given are not invented


def test_settings_resolve_per_protocol_with_defaults():
    choice = CollectConfig(dataset="winopron").settings()
    meta = CollectConfig(dataset="winopron", protocol="meta").settings()
    assert (choice.prompt, choice.max_new_tokens) == ("forced_choice_v1", 6)
    assert (meta.prompt, meta.max_new_tokens) == ("metaprompt_v1", 8)
    with pytest.raises(ValueError, match="--protocol gen is not available for winogender"):
        CollectConfig(dataset="winogender", protocol="gen").settings()
    with pytest.raises(ValueError, match="--protocol nope is unknown for winogender"):
        CollectConfig(dataset="winogender", protocol="nope").settings()


def _defaults() -> dict:
    """Every option of `runners collect` at its default, as click passes them."""
    return runners.get_command(None, "collect").make_context("collect", ["--dataset", "winopron"]).params


def test_the_command_line_says_how_a_limit_picks_only_where_it_matters():
    assert CollectConfig(dataset="bbq", limit=3, limit_order="spread", limit_seed=0).command_line() == \
        "runners collect --dataset bbq --limit 3"
    assert CollectConfig(dataset="bbq", limit=3, limit_order="file", limit_seed=2).command_line() == \
        "runners collect --dataset bbq --limit 3 --limit-order file --limit-seed 2"
    assert CollectConfig(dataset="bbq", limit_order="file").command_line() == "runners collect --dataset bbq"
