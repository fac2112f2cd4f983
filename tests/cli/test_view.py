"""`biaslab view` (issue 43, item 3) over a small warehouse collected with a tiny model (a user spec: exact and
sampled forced choice, scored sentences): every page loads in headless Chromium with no console message and every
link resolves; the trie's numbers are the stored ones; a crafted id is a 404 page, never SQL or a traceback; the
warehouse's sha256 is unchanged after a session of clicks; the app holds no lock between requests."""

from __future__ import annotations

import hashlib
import re
import subprocess
import threading
from collections import deque
from urllib.parse import urljoin, urlparse

import pytest

from biaslab.cli.view import create_app
from biaslab.cli.view.queries import stimulus as stimulus_facts
from biaslab.warehouse import Warehouse
from report_layout import chromium
from user_specs import spec_warehouse

SPEC = """
name: view-demo
protocols: [choice, prob]
options:
  - {label: female, forms: {nom: she}}
  - {label: male, forms: {nom: he}}
orders: [[female, male], [male, female]]
fillers:
  occupation: [{value: nurse}, {value: pilot}]
templates:
  - {id: late, text: "The {occupation} said that {pronoun} was late.", case: nom, gold: female}
contexts:
  - {name: unprimed}
  - {name: primed_f, prime: "{pronoun:female} is kind."}
"""


@pytest.fixture(scope="module")
def db(tmp_path_factory, tiny_gpt2):
    return spec_warehouse(tmp_path_factory.mktemp("view"), SPEC, "view-demo", tiny_gpt2,
                          [{"protocol": "prob"}, {"protocol": "choice"},
                           {"protocol": "choice", "mode": "sample", "samples": 3}])


def _crawl(client, start: str = "/", limit: int = 60) -> dict[str, str]:
    """Pages reached from `start` by following the app's own links (breadth first): path -> HTML."""
    seen, queue = {}, deque([start])
    while queue and len(seen) < limit:
        path = queue.popleft()
        if path in seen:
            continue
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code)
        seen[path] = page = response.get_data(as_text=True)
        for href in re.findall(r'href="([^"]+)"', page):
            href = href.replace("&amp;", "&")
            if href.startswith("/") and href not in seen:
                queue.append(href)
    return seen


def test_every_link_resolves_and_nothing_is_written(db):
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    client = create_app(db).test_client()
    pages = _crawl(client)
    stimuli = [p for p in pages if p.startswith("/stimulus/")]
    assert len(stimuli) >= 8 and any(p.startswith("/study/") for p in pages) and "/stimuli" in "".join(pages)
    for path in ("/study/options?dataset=view-demo", "/stimuli?model=tiny&option=she&p_min=0.1&p_max=0.9",
                 "/stimuli?text=pilot&context=primed_f"):
        assert client.get(path).status_code == 200, path
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest


@pytest.mark.parametrize("crafted", ["x' OR 1=1 --", "0000000000000000", "ABCDEF0123456789", "1d3ef87a4da232cd'",
                                     "%27%3B%20DROP%20TABLE%20stimuli%3B"])
def test_a_crafted_id_is_a_404_page(db, crafted):
    response = create_app(db).test_client().get(f"/stimulus/{crafted}")
    body = response.get_data(as_text=True)
    assert response.status_code == 404 and "Traceback" not in body and "<h1>Not found</h1>" in body
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.rows("SELECT count(*) FROM stimuli")[0][0] == 8


def test_bad_filters_are_one_line_not_a_traceback(db):
    body = create_app(db).test_client().get("/stimuli?p_min=abc&p_max=2").get_data(as_text=True)
    assert "p_min: &#39;abc&#39; is not a number" in body and "p_max: 2 is not a probability in [0, 1]" in body


def test_the_trie_shows_the_stored_probabilities(db):
    with Warehouse.open(db, read_only=True) as wh:
        rows = wh.rows("SELECT r.stimulus_id, r.request_id, p.option, p.prob FROM choice_requests r JOIN choice_probs p"
                       " USING (model_key, request_id) WHERE r.mode = 'exact'")
        checked = 0
        for stimulus_id in sorted({r[0] for r in rows}):
            facts = stimulus_facts(wh, stimulus_id)
            exact = next(r for r in facts["requests"] if r["mode"] == "exact")
            stored = {o: p for sid, rid, o, p in rows if rid == exact["request_id"]}
            for option in exact["options"]:  # the option's stored probability = its edges' path probabilities
                shown = sum(e.p_path for e in exact["trie"] if e.outcome == option)
                assert shown == pytest.approx(stored[option], abs=2e-6), (stimulus_id, option)
            assert exact["tokens"] and "".join(exact["tokens"]) == exact["prompt_text"]  # tokenizer boundaries
            checked += 1
    assert checked == 8


def test_the_app_holds_no_lock_between_requests(db):
    client = create_app(db).test_client()
    assert client.get("/").status_code == 200
    with Warehouse.open(db) as writer:  # a collection could write now
        assert writer.rows("SELECT count(*) FROM stimuli")[0][0] == 8


def _serve(db):
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, create_app(db), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server


def _chromium(url: str, profile) -> tuple[str, list[str]]:
    """(DOM after load, console lines) of `url` in headless Chromium."""
    done = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--no-first-run", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
                           "--virtual-time-budget=3000", "--dump-dom", url], capture_output=True, text=True,
                          timeout=120)
    return done.stdout, [line for line in done.stderr.splitlines() if "CONSOLE" in line]


@pytest.mark.skipif(chromium() is None, reason="Chromium is not installed (CI installs Debian's chromium)")
def test_pages_load_in_chromium_without_console_messages(db, tmp_path):
    console_check = tmp_path / "error.html"  # the check itself can fail: a page that logs is caught
    console_check.write_text("<html><body><script>console.error('boom')</script></body></html>")
    assert _chromium(console_check.as_uri(), tmp_path / "profile")[1]
    server = _serve(db)
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        pages = list(_crawl(create_app(db).test_client(), limit=40))
        chosen = ["/", "/study/options?dataset=view-demo", "/stimuli?dataset=view-demo",
                  *[p for p in pages if p.startswith("/stimulus/")][:3], "/study/contextuality",
                  "/compare/options?dataset=view-demo"]
        for path in chosen:
            dom, console = _chromium(urljoin(base, path), tmp_path / "profile")
            assert "<h1>" in dom and "</html>" in dom, path
            assert console == [], (path, console)
            if path.startswith("/study/options"):  # the report's figures, loaded as images
                assert 'data-images-loaded="2/2"' in dom, dom[-600:]
            for href in re.findall(r'href="(/[^"]*)"', dom):
                assert urlparse(href).path.startswith(("/", "/stimulus/", "/study/", "/stimuli"))
        # a screenshot of each page type: rendered, not blank, and for the study page the figure's pixels
        for path in ("/", "/study/options?dataset=view-demo", "/compare/options?dataset=view-demo", chosen[3]):
            shot = tmp_path / "shot.png"
            subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                            f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,1000",
                            "--virtual-time-budget=3000", f"--screenshot={shot}", urljoin(base, path)],
                           capture_output=True, timeout=120)
            plotted = _plot_pixels(shot)
            if path.startswith("/study/"):
                assert plotted >= 50, (path, plotted)  # the figure is drawn on the page
            else:
                assert plotted == 0, (path, plotted)  # no figure here: the check tells one from the other
            shot.unlink()
    finally:
        server.shutdown()


def _plot_pixels(png) -> int:
    """Pixels of a screenshot in matplotlib's first colour (tab:blue, #1f77b4): a figure's markers and bars (the
    page's text is black or grey, its links another blue)."""
    import numpy as np
    from PIL import Image

    with Image.open(png) as image:
        pixels = np.asarray(image.convert("RGB"), dtype=int)
    return int((np.abs(pixels - np.array([31, 119, 180])).max(axis=2) <= 12).sum())


@pytest.mark.parametrize("value", ["\x00", "view-demo\x00", "x" * 5000, "view-demo' OR 1=1 --", "../../etc/passwd"])
def test_a_crafted_dataset_value_is_a_404_page_never_sql(db, value):
    client = create_app(db).test_client()
    response = client.get("/study/options", query_string={"dataset": value})
    body = response.get_data(as_text=True)
    assert response.status_code == 404 and "Traceback" not in body and "no dataset with options named" in body
    assert len(body) < 20000  # a huge value is not echoed whole
    searched = client.get("/stimuli", query_string={"dataset": value, "text": value, "model": value})
    assert searched.status_code in (200, 400, 404) and "Traceback" not in searched.get_data(as_text=True)


def test_token_text_comes_from_the_models_own_record(tmp_path, tiny_gpt2_dir, monkeypatch):
    """A stored model whose source is an alias or a .gguf file finds the folder it was converted into (by its
    stamp); a local folder is itself; a model recorded without a tokenizer (a hosted chat model) has none; anything
    else is a hub id. ("tok" stands for a recorded tokenizer identity.)"""
    import json
    import shutil

    from biaslab.cli.view.queries import _tokenizer, tokenizer_place
    from biaslab.engines import aliases

    monkeypatch.setattr(aliases, "cache_dir", lambda: tmp_path / "cache")
    folder = tmp_path / "cache" / "converted"
    shutil.copytree(tiny_gpt2_dir, folder)
    (folder / aliases.STAMP).write_text(json.dumps({"source": "pkg==1.0:model.Q4_1.gguf", "revision": "abc"}))
    assert tokenizer_place("pkg==1.0:model.Q4_1.gguf", "abc", "tok") == str(folder)
    assert tokenizer_place("pkg==1.0:model.Q4_1.gguf", "other-revision", "tok") == "pkg==1.0:model.Q4_1.gguf"
    assert tokenizer_place(str(tiny_gpt2_dir), None, "tok") == str(tiny_gpt2_dir)
    assert tokenizer_place("gpt-4o", "gpt-4o-2024-08-06", None) is None
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert tokenizer_place(str(gguf), "r", "tok") is None  # a file never converted here has no tokenizer
    tokenizer = _tokenizer(tokenizer_place("pkg==1.0:model.Q4_1.gguf", "abc", "tok"))
    assert tokenizer is not None and tokenizer.decode(tokenizer("she said")["input_ids"]) == "she said"


def test_two_sampler_settings_of_one_model_are_labelled_apart(tmp_path_factory, tiny_gpt2):
    """Issue 58: samples of one request at T = 0.5 and T = 1.0 are two settings: the heading names both, each row
    its own (they used to look like duplicate rows)."""
    db = spec_warehouse(tmp_path_factory.mktemp("view-settings"), SPEC, "view-demo", tiny_gpt2,
                        [{"protocol": "choice", "mode": "sample", "samples": 2},
                         {"protocol": "choice", "mode": "sample", "samples": 2, "temperature": 1.0}])
    with Warehouse.open(db, read_only=True) as wh:
        stimulus_id = wh.rows("SELECT stimulus_id FROM choice_requests ORDER BY stimulus_id LIMIT 1")[0][0]
        stored = wh.rows("SELECT temperature, count(*) FROM samples WHERE stimulus_id = ? GROUP BY ALL ORDER BY 1",
                         [stimulus_id])
    assert stored == [(0.5, 2), (1.0, 2)]
    page = create_app(db).test_client().get(f"/stimulus/{stimulus_id}").get_data(as_text=True)
    heading = re.search(r'<h2 id="request-[0-9a-f-]+">([^<]+)</h2>', page).group(1)
    assert "T=0.5 top_k=40 top_p=1" in heading and "T=1 top_k=40 top_p=1" in heading
    rows = re.findall(r'<tr><td class="num">([0-9.]+)</td><td class="num">40</td>', page)
    assert sorted(rows) == ["0.5", "0.5", "1", "1"]


def _labels(client, path: str) -> list[str]:
    page = client.get(path).get_data(as_text=True)
    select = re.search(r'<select name="a">(.*?)</select>', page, re.S).group(1)
    return re.findall(r"<option[^>]*>([^<]+)</option>", select)


def test_the_comparison_page_shows_what_compare_computes(db):
    """Issue 58: a comparison page per study: two chosen settings, the paired differences with intervals and
    adjusted p (the numbers of `compare_observations`), each row linked to its stimuli; a label not offered is 404."""
    from biaslab.metrics.compare.core import compare_observations
    from biaslab.metrics.registry import get_study
    from biaslab.warehouse.handle import open_warehouse

    client = create_app(db).test_client()
    labels = _labels(client, "/compare/options?dataset=view-demo")
    assert len(labels) >= 2
    response = client.get("/compare/options", query_string={"dataset": "view-demo", "a": labels[0], "b": labels[1]})
    page = response.get_data(as_text=True)
    assert response.status_code == 200 and f"{labels[0]} − {labels[1]}" in page
    with open_warehouse(str(db)) as handle:
        expected = compare_observations(get_study("options").comparer(handle, dataset="view-demo"),
                                        between=labels[:2], bootstrap=1000, permutations=2000, seed=0)
    body = page.split('id="differences"')[1]
    shown = re.findall(r"<tr[^>]*>\s*<td><a href=\"(/stimuli\?[^\"]*)\">stimuli</a></td>\s*<td>([^<]*)</td>", body)
    assert [m for _, m in shown] == list(expected["measure"])
    assert all("dataset=view-demo" in link for link, _ in shown)
    from biaslab.cli.view.queries import number

    assert number(expected["estimate"].iloc[0]) in body and number(expected["p_holm"].iloc[0]) in body
    for a, b in ((labels[0], "nope"), ("x\x00", labels[0]), (labels[0], labels[0])):
        bad = client.get("/compare/options", query_string={"dataset": "view-demo", "a": a, "b": b})
        assert bad.status_code == 404 and "Traceback" not in bad.get_data(as_text=True)
    assert client.get("/compare/no-such-study").status_code == 404
    assert client.get("/compare/options", query_string={"dataset": "\x00"}).status_code == 404


def test_a_study_page_is_computed_once_per_warehouse_state(db, tmp_path, monkeypatch):
    """Issue 58: a study page's tables come from memory until the warehouse changes (evidence added)."""
    import shutil

    from biaslab.metrics import registry

    copy = tmp_path / "w.duckdb"
    shutil.copy(db, copy)
    entry = registry.get_study("options")
    calls = []

    def counting(handle, *args, **kwargs):
        calls.append(1)
        return entry.function(handle, *args, **kwargs)

    import dataclasses

    monkeypatch.setitem(registry._STUDIES, "options", dataclasses.replace(entry, metrics=counting))
    client = create_app(copy).test_client()
    first = client.get("/study/options?dataset=view-demo").get_data(as_text=True)
    second = client.get("/study/options?dataset=view-demo").get_data(as_text=True)
    assert len(calls) == 1 and first == second
    with Warehouse.open(copy) as wh:  # evidence added (any write changes the file's state)
        wh.set_meta("touched", "yes")
    client.get("/study/options?dataset=view-demo")
    assert len(calls) == 2



def test_a_study_page_shows_its_reports_figures(db):
    """Issue 58: a study page opens with the figures of the study's report (the same plots), served from memory;
    an index past them answers an SVG saying so, never a broken image; an unknown study is a 404."""
    client = create_app(db).test_client()
    page = client.get("/study/options?dataset=view-demo").get_data(as_text=True)
    sources = re.findall(r'<img class="figure" src="([^"]+)"', page)
    assert sources == ["/figure/options/0?dataset=view-demo", "/figure/options/1?dataset=view-demo"]
    first = client.get(sources[0])
    assert first.status_code == 200 and first.mimetype == "image/png" and first.data[:8] == b"\x89PNG\r\n\x1a\n"
    past = client.get("/figure/options/40?dataset=view-demo")
    assert past.status_code == 200 and past.mimetype == "image/svg+xml" and b"figure(s)" in past.data
    assert client.get("/figure/no-such-study/0").status_code == 404
    assert client.get("/figure/options/0", query_string={"dataset": "\x00"}).status_code == 404


def test_the_contextuality_page_shows_the_headline_figure_of_every_setting_only(tmp_path, data_dir):
    """Contextuality's report figures after its first are one setting's each, named only by the report's section
    headings: the page shows the first, the headline with a series per setting, the very image the report writes."""
    from click.testing import CliRunner

    from biaslab.cli.main import biaslab
    from open_warehouse_evidence import build

    db = build(tmp_path / "w.duckdb", data_dir)
    client = create_app(str(db)).test_client()
    page = client.get("/study/contextuality").get_data(as_text=True)
    assert re.findall(r'<img class="figure" src="([^"]+)"', page) == ["/figure/contextuality/0"]
    result = CliRunner().invoke(biaslab, ["report", "contextuality", "--db", str(db), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert re.findall(r'<img src="([^"]+)"', (tmp_path / "r" / "index.html").read_text())[0] == "headline_pf.png"
    assert client.get("/figure/contextuality/0").data == (tmp_path / "r" / "headline_pf.png").read_bytes()


def test_a_compact_table_keeps_what_tells_rows_apart_and_their_coverage():
    """Issue 58: the columns behind the "all columns" toggle: the key, the settings every row shares and the numbers
    past the width; a setting that differs between rows and the coverage stay in view."""
    import pandas as pd

    from biaslab.cli.view.app import COMPACT_WIDTH, more_columns

    frame = pd.DataFrame({"model_name": ["m", "m"], "dtype": ["fp32", "fp32"], "model_key": ["k", "k"],
                          "temperature": [0.5, 1.0], "top_k": [40, 40], "context": ["a", "a"],
                          **{f"x{i}": [1.0, 2.0] for i in range(14)}, "n_loaded": [3, 3], "coverage": [1.0, 1.0],
                          "valid_share": [0.9, 0.8]})
    more = more_columns(frame)
    assert {"dtype", "model_key", "top_k", "n_loaded"} <= set(more)
    assert not {"model_name", "temperature", "context", "coverage", "valid_share"} & set(more)
    shown = [c for c in frame.columns if c not in more]
    assert len(shown) == COMPACT_WIDTH and shown[-2:] == ["coverage", "valid_share"]
    # one row: nothing tells rows apart, so the settings stay (they name the row)
    assert more_columns(frame.iloc[:1]) == ["model_key", "n_loaded"] + [f"x{i}" for i in range(5, 14)]


def test_the_study_page_offers_every_column_behind_a_toggle(db):
    page = create_app(db).test_client().get("/study/options?dataset=view-demo").get_data(as_text=True)
    assert re.search(r'<input type="checkbox" class="all-columns" id="all-means"><label for="all-means" '
                     r'class="note">all \d+ columns \(\d+ more: [^)]*model_key', page)
    assert '<th class="more">model_key</th>' in page


@pytest.mark.parametrize("text, found", [("%", 0), ("_", 0), ("%_" * 200, 0), ("PILOT", 4), ("pil%t", 0)])
def test_search_text_is_literal_never_a_pattern(db, text, found):
    """`%` and `_` are characters, not LIKE wildcards (`%_` 300 times kept two threads busy for minutes; 200 here, under
    the 500-character bound): the
    search is a case-insensitive substring, and returns at once."""
    from urllib.parse import quote

    from biaslab.cli.view.queries import Filters, search

    with Warehouse.open(db, read_only=True) as wh:
        rows, total = search(wh, Filters.parse({"text": text}))
        expected = wh.rows("SELECT count(*) FROM stimuli WHERE position(lower(?) IN lower(text)) > 0", [text])[0][0]
    assert total == expected == found and len(rows) == found
    response = create_app(db).test_client().get(f"/stimuli?text={quote(text)}")
    assert response.status_code == 200


def test_an_overlong_search_field_is_refused_not_searched(db):
    body = create_app(db).test_client().get("/stimuli?text=" + "a" * 501).get_data(as_text=True)
    assert "text: longer than 500 characters" in body


def test_a_page_whose_queries_run_too_long_is_stopped_with_one_line(db, monkeypatch):
    """Issue 67, item 4: every page's queries are bounded in time. A query that would run for minutes (a cross join
    of 10^11 rows) is interrupted after the bound: QueryTooLong from the helper, 503 with one line from the page."""
    import time

    from biaslab.cli.view import queries

    started = time.monotonic()
    with pytest.raises(queries.QueryTooLong, match="took longer than 0.5 s and were stopped"):
        with queries.warehouse(db, time_s=0.5) as wh:
            wh.rows("SELECT count(*) FROM range(100000) a, range(1000000) b WHERE (a.range + b.range) % 7 = 3")
    assert time.monotonic() - started < 10
    slow = queries.search

    def search(wh, filters):
        wh.rows("SELECT count(*) FROM range(100000) a, range(1000000) b WHERE (a.range + b.range) % 7 = 3")
        return slow(wh, filters)
    monkeypatch.setattr(queries, "search", search)
    monkeypatch.setattr(queries, "QUERY_TIME_S", 0.5)
    response = create_app(db).test_client().get("/stimuli?text=pilot")
    assert response.status_code == 503 and "took longer than 0.5 s and were stopped" in response.get_data(as_text=True)
    with queries.warehouse(db, time_s=0.5) as wh:  # a quick page is not touched by the bound
        assert wh.rows("SELECT count(*) FROM stimuli")[0][0] > 0
    time.sleep(0.6)


def test_two_dtypes_of_one_model_are_headed_apart_with_unique_anchors(tmp_path_factory, tiny_gpt2_dir):
    """Issue 67, item 12: bf16 and fp32 collections of one model were both headed "tiny · choice · exact", with a
    duplicated HTML id; each heading now names what differs (the dtype) and every anchor is unique."""
    from biaslab.engines.hf.loading import load_model

    folder = tmp_path_factory.mktemp("view-dtypes")
    db = spec_warehouse(folder, SPEC, "view-demo", load_model(str(tiny_gpt2_dir), dtype="fp32", device="cpu"),
                        [{"protocol": "choice", "limit": 1}])
    bf16 = load_model(str(tiny_gpt2_dir), dtype="bf16", device="cpu")
    from biaslab.runners.collect import CollectConfig, collect

    collect(CollectConfig(dataset="view-demo", db=str(db), protocol="choice", limit=1), loaded=bf16)
    with Warehouse.open(db, read_only=True) as wh:
        stimulus_id = wh.rows("SELECT stimulus_id FROM choice_requests GROUP BY 1 HAVING count(DISTINCT model_key) = 2 "
                              "LIMIT 1")[0][0]
    page = create_app(db).test_client().get(f"/stimulus/{stimulus_id}").get_data(as_text=True)
    ids = re.findall(r'<h2 id="(request-[^"]+)">([^<]+)</h2>', page)
    assert len(ids) == 2 and len({i for i, _ in ids}) == 2
    assert sorted(h.split(" · ")[3] for _, h in ids) == ["dtype=bf16", "dtype=fp32"], ids


def test_the_first_stimulus_page_never_waits_on_a_tokenizer(db, monkeypatch):
    """Issue 72, item 3: the app starts loading the warehouse's tokenizers in the background; a stimulus page asked
    while one is still loading answers at once (its prompt as text, saying the boundaries come on reload), and the
    next page, once it has loaded, shows them."""
    from biaslab.cli.view import queries

    release, entered = threading.Event(), threading.Event()
    real = queries._load_tokenizer

    calls = []

    def slow(place):  # a tokenizer that takes as long as the test wants (importing transformers under load)
        calls.append(place)
        entered.set()
        assert release.wait(60)
        return real(place)

    monkeypatch.setattr(queries, "_load_tokenizer", slow)
    monkeypatch.setattr(queries, "_TOKENIZERS", {})
    monkeypatch.setattr(queries, "_LOADING", {})
    client = create_app(db).test_client()
    assert entered.wait(30)  # the background load has started and is held
    with Warehouse.open(db, read_only=True) as wh:
        stimulus_id = wh.rows("SELECT stimulus_id FROM choice_requests WHERE mode = 'exact' LIMIT 1")[0][0]
    first = client.get(f"/stimulus/{stimulus_id}").get_data(as_text=True)  # answers while the load is held
    assert "still loading; reload the page" in first and 'class="tok"' not in first
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(queries._tokenizer(calls[0])))  # waits, never loads again
    waiter.start()
    release.set()
    waiter.join(60)
    assert len(calls) == 1 and got and got[0] is not None
    for _ in range(600):
        if not queries.tokenizers_pending():
            break
        threading.Event().wait(0.05)
    later = client.get(f"/stimulus/{stimulus_id}").get_data(as_text=True)
    assert 'class="tok"' in later and "still loading" not in later


def test_a_study_row_links_to_the_stimuli_of_its_attributes(tmp_path, data_dir, tiny_gpt2):
    """A CrowS-Pairs row of one bias type links to that bias type's stimuli the model scored (attr.bias_type, a
    dataset without options: its stimuli with the model's evidence); attribute names are checked and bound."""
    from biaslab.runners.collect import CollectConfig, collect

    db = tmp_path / "w.duckdb"
    collect(CollectConfig(dataset="crows-pairs", db=str(db), data_dir=str(data_dir), limit=6, threads=1),
            loaded=tiny_gpt2)
    client = create_app(str(db)).test_client()
    page = client.get("/study/crows-pairs").data.decode()
    links = sorted({link.replace("&amp;", "&") for link in re.findall(r'href="(/stimuli\?[^"]*attr[^"]*)"', page)})
    assert links, page[:2000]
    with Warehouse.open(db, read_only=True) as wh:
        expected = {bias: {sid for (sid,) in wh.rows(
            "SELECT stimulus_id FROM stimuli SEMI JOIN sequence_scores USING (stimulus_id) "
            "WHERE dataset = 'crows-pairs' AND (attrs->>'bias_type') = ?", [bias])}
            for (bias,) in wh.rows("SELECT DISTINCT attrs->>'bias_type' FROM stimuli s SEMI JOIN sequence_scores "
                                  "USING (stimulus_id)")}
    for link in links:
        bias = re.search(r"attr\.bias_type=([^&]+)", link).group(1).replace("+", " ").replace("%2F", "/")
        shown = set(re.findall(r'href="/stimulus/([0-9a-f]+)"', client.get(link).data.decode()))
        assert shown == expected[bias], link
    refused = client.get("/stimuli?dataset=crows-pairs&attr.bias_type')--=x").data.decode()
    assert "not an attribute name" in refused
    quoted = client.get("/stimuli?dataset=crows-pairs&attr.bias_type=x' OR '1'='1")
    assert quoted.status_code == 200 and 'href="/stimulus/' not in quoted.data.decode()
