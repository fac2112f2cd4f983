"""A credential in `--base-url` is never echoed (issue 56, item 2), and a URL every engine could not use (a user or
password, a query, a fragment, a port that is not a number: item 4) is refused in one line before anything runs."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from biaslab.cli.runners_cli import runners
from biaslab.engines.base import check_base_url

SECRET = "sk-live-0123456789abcdef"
BAD = [f"http://user:{SECRET}@127.0.0.1:8000/v1", f"https://{SECRET}@api.example.org/v1",
       f"http://127.0.0.1:8000/v1?key={SECRET}", f"http://127.0.0.1:8000/v1#{SECRET}", f"http://127.0.0.1:80{SECRET}/v1",
       f"ftp://127.0.0.1/{SECRET}"]


@pytest.mark.parametrize("backend,extra", [("openai-chat", ["--mode", "sample"]), ("anthropic", ["--mode", "sample"]),
                                           ("gemini", ["--mode", "sample"]), ("openai", ["--dtype", "bf16"])])
@pytest.mark.parametrize("url", BAD)
def test_a_url_with_a_credential_is_refused_without_showing_it(tmp_path, backend, extra, url):
    db = tmp_path / "w.duckdb"
    model = "smollm2-135m" if backend == "openai" else "some-model"
    result = CliRunner().invoke(runners, ["collect", "--backend", backend, "--base-url", url, "--model", model,
                                          "--dataset", "winopron", "--db", str(db), *extra])
    output = result.output.strip()
    assert result.exit_code == 2, output
    assert SECRET not in output and len(output.splitlines()) == 1
    assert "engine argument base_url: must be http:// or https://" in output and "not shown" in output
    assert not db.exists()


@pytest.mark.parametrize("url,kept", [("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000/v1"),
                                      ("https://api.openai.com/v1", "https://api.openai.com/v1"),
                                      ("http://[::1]:8000/v1", "http://[::1]:8000/v1"),
                                      ("http://localhost", "http://localhost")])
def test_plain_urls_are_taken(url, kept):
    assert check_base_url(url) == kept
