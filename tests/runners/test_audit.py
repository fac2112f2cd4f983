"""Audit plans (`biaslab.runners.audit`, `biaslab audit`): validation whole and in one line, the expansion into units,
the dry run that writes nothing, the local executor (a rerun computes nothing), and the evidence it stores equal to
hand-run `runners collect` commands of the same units."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.errors import UsageError
from biaslab.runners.audit import PlanError, expand, load_plan
from biaslab.schema import evidence

from tiny_models import make_tiny_gpt2


@pytest.fixture(scope="module")
def second_tiny(tmp_path_factory) -> Path:
    return make_tiny_gpt2(tmp_path_factory.mktemp("tiny-gpt2-b"), seed=1)


def write_plan(folder: Path, models: list[tuple[str, Path]], data_dir: Path, *, shards: int = 1, extra: str = "",
               db: str = "w.duckdb") -> Path:
    lines = ["name: tiny", f"db: {db}", f"data_dir: {data_dir}", f"shards: {shards}", "collect: {threads: 1}",
             "models:"]
    lines += [f"  - {{name: {name}, model: {path}, dtype: fp32}}" for name, path in models]
    # limits count items: 4 pairs (8 sentences) and 4 templates, one prompt each
    lines += ["datasets:", "  - {dataset: crows-pairs, limit: 4}",
              "  - {dataset: winopron, limit: 4, where: {context: unprimed, option_order: MF}, "
              "settings: {prompt: forced_choice_plain_v1}}"]
    path = folder / "plan.yaml"
    path.write_text("\n".join(lines) + "\n" + extra, encoding="utf-8")
    return path


def run(*args: str):
    return CliRunner().invoke(biaslab, list(args), catch_exceptions=False)


# ------------------------------------------------------------------------------------------------ validation
BAD_PLANS = [
    ("name: p\nmodels: [{name: a, model: m}]\ndatasets: [{dataset: crows-pairs}]\ncolour: red\n",
     "colour: unknown key"),
    ("name: p\nmodels: [{name: a, model: m, dtyp: fp32}]\ndatasets: [{dataset: crows-pairs}]\n",
     "models[0].dtyp: unknown key"),
    ("name: p\nmodels: [{name: a, model: m}, {name: a, model: n}]\ndatasets: [{dataset: crows-pairs}]\n",
     "model names must be unique: a repeated"),
    ("name: p\nmodels: [{name: a, model: m, api_key_env: sk-abc123/xyz}]\ndatasets: [{dataset: crows-pairs}]\n",
     "models[0].api_key_env: is the NAME of the environment variable holding the key"),
    ("name: p\nmodels: [{name: a, model: m, engine_args: {api_key: sk-1}}]\ndatasets: [{dataset: crows-pairs}]\n",
     "models[0].engine_args: 'api_key': a plan never holds a key"),
    ("name: p\nmodels: [{name: a, model: m}]\ndatasets: [{dataset: crows-pairs, limit: 0}]\n",
     "datasets[0].limit: must be at least 1"),
    ("name: p\nmodels: [{name: a, model: m}]\ndatasets: [{dataset: w, matrix: {temperature: []}}]\n",
     "matrix 'temperature' lists no values"),
    ("name: p\nmodels: [{name: a, model: m}]\ndatasets: [{dataset: crows-pairs}]\nreport: {reference: b}\n",
     "report.reference 'b' is not a model of the plan"),
    ("name: p\nmodels: []\ndatasets: [{dataset: crows-pairs}]\n", "models:"),
    ("name: p\npath: /x\nmodels: [{name: a, model: m}]\ndatasets: [{dataset: crows-pairs}]\n", "path: unknown key"),
    ("- just a list\n", "a plan is a mapping"),
    ("name: p\nmodels: [{name: a\n", "not valid YAML (line"),
]


@pytest.mark.parametrize("text, expected", BAD_PLANS)
def test_a_bad_plan_is_one_line_naming_the_file_and_the_place(tmp_path, text, expected):
    path = tmp_path / "plan.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PlanError) as caught:
        load_plan(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and expected in message and "\n" not in message, message


def test_each_collection_is_validated_as_runners_collect_validates_it_naming_the_plan_place(tmp_path, data_dir):
    path = tmp_path / "plan.yaml"
    path.write_text(f"name: p\ndata_dir: {data_dir}\nmodels: [{{name: a, model: smollm2-135m}}]\n"
                    "datasets: [{dataset: crows-pairs}, {dataset: winopron, settings: {min_new_tokens: 3}}]\n")
    with pytest.raises(PlanError) as caught:
        expand(load_plan(path))
    assert str(caught.value) == (f"{path.resolve()}: models[0] (a) x datasets[1] (winopron): --min-new-tokens does "
                                 "not apply to --protocol choice (it takes --samples, --seed, --temperature, --top-k, "
                                 "--top-p, --max-new-tokens, --mode, --k-store, --prompt, --prompt-batch)")
    path.write_text("name: p\nmodels: [{name: a, model: m}]\ndatasets: [{dataset: no-such-dataset}]\n")
    with pytest.raises(UsageError, match=r"models\[0\] \(a\) x datasets\[0\] \(no-such-dataset\): .*no-such-dataset"):
        expand(load_plan(path))


def test_the_expansion_is_models_x_datasets_x_matrix_x_shards_with_stable_names(tmp_path, data_dir):
    path = tmp_path / "plan.yaml"
    path.write_text(f"name: p\ndata_dir: {data_dir}\nshards: 3\nmodels: [{{name: a, model: m1}}, "
                    "{name: b, model: m2, api_key_env: MY_KEY, backend: openai-chat}]\n"
                    "datasets: [{dataset: crows-pairs, shards: 1}, {dataset: winopron, settings: {mode: sample},"
                    " matrix: {temperature: [0.5, 1.0], seed: [1, 2]}}]\n")
    units = expand(load_plan(path), validate=False)
    # per model: crows-pairs (1 shard) + winopron 2 x 2 settings x 3 shards
    assert len(units) == 2 * (1 + 4 * 3)
    assert [u.shard for u in units[:4]] == [(0, 1), (0, 3), (1, 3), (2, 3)]
    assert units[1].settings == {"mode": "sample", "temperature": 0.5, "seed": 1}
    assert units[1].config.temperature == 0.5 and units[1].config.shard == "0/3" and units[0].config.shard is None
    assert units[13].config.engine_args == {"api_key_env": "MY_KEY"} and units[13].config.backend == "openai-chat"
    assert len({u.name for u in units}) == len(units)
    again = expand(load_plan(path), validate=False)
    assert [u.name for u in again] == [u.name for u in units]
    assert units[1].collection == units[2].collection != units[4].collection  # shards of one collection share it
    assert Path(units[0].config.db) == (tmp_path / "warehouse" / "biaslab.duckdb").resolve()


# ------------------------------------------------------------------------------------------------ running
def _evidence(db: Path) -> dict[str, list[tuple]]:
    """Every evidence table's rows without run ids and times, sorted: what two ways of collecting must share."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        out = {}
        for table in evidence.MERGE_ORDER:
            if table == "runs":
                continue
            columns = [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()]
            keep = [c for c in columns if c != "run_id" and not c.endswith("_at")]
            out[table] = con.execute(f"SELECT {', '.join(keep)} FROM {table} ORDER BY ALL").fetchall()
        return out
    finally:
        con.close()


def test_dry_run_lists_the_units_and_writes_nothing(tmp_path, data_dir, tiny_gpt2_dir, second_tiny):
    plan = write_plan(tmp_path, [("a", tiny_gpt2_dir), ("b", second_tiny)], data_dir, shards=2)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = run("audit", str(plan), "--dry-run")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no warehouse, no work folder
    # a dry run reads no local model (issue 72, item 1): nothing has run yet, so each unit's key and requests are
    # not known without it, and it says so
    assert "8 units: 0 with work to do, 0 stored, 8 not known without their model; 0 of 0 requests" in result.output
    assert "8 units of models computed here (hf, vllm) have no finished run" in result.output


def test_the_local_executor_stores_what_runners_collect_stores_and_a_rerun_computes_nothing(
        tmp_path, data_dir, tiny_gpt2_dir, second_tiny):
    plan = write_plan(tmp_path, [("a", tiny_gpt2_dir), ("b", second_tiny)], data_dir, shards=2)
    result = run("audit", str(plan))
    assert result.exit_code == 0, result.output
    assert "audit tiny: 8 units, 8 computed, 0 already stored" in result.output
    again = run("audit", str(plan))
    assert "audit tiny: 8 units, 0 computed, 8 already stored" in again.output, again.output
    dry = run("audit", str(plan), "--dry-run")
    assert "8 units: 0 with work to do, 8 stored; 0 of 24 requests to compute" in dry.output
    # the same units by hand, one `runners collect` each, into another warehouse
    from biaslab.runners.collect import collect

    hand = tmp_path / "hand.duckdb"
    for unit in expand(load_plan(plan)):
        collect(unit.config.model_copy(update={"db": str(hand)}))
    assert _evidence(tmp_path / "w.duckdb") == _evidence(hand)
    status = run("audit", "status", str(plan), "--format", "json")
    import json

    rows = json.loads(status.output)
    assert [r["state"] for r in rows] == ["stored"] * 8 and sum(r["requests"] for r in rows) == 24
    check_the_report(plan, tmp_path / "report")


def check_the_report(plan: Path, out: Path) -> None:
    """The leaderboard of the tiny plan: a row per model, the study reports linked, the page open in Chromium."""
    import json

    from report_layout import chromium, dump_dom

    result = run("audit", "report", str(plan), "--out", str(out))
    assert result.exit_code == 0, result.output
    board = json.loads((out / "leaderboard.json").read_text())
    assert board["reference"] == "a" and set(board["models"]) == {"a", "b"}
    cells = board["cells"]
    assert {c["row"] for c in cells} == {"a", "b"}
    crows = {c["row"]: c for c in cells if c["study"] == "crows-pairs" and c["group"] == "crows-pairs · (all)"}
    assert crows["a"]["n_items"] == crows["b"]["n_items"] == 4  # 8 sentences, 4 pairs
    # coverage as `metrics` gives it: 4 of the 1,508 pairs loaded, marked; an interval over 4 pairs: few clusters
    assert crows["a"]["n_loaded"] == 1508 and crows["a"]["low_coverage"] and crows["a"]["few_clusters"]
    compared = [c for c in board["comparisons"] if c["study"] == "crows-pairs"]
    assert [c["row"] for c in compared] == ["b"] and compared[0]["test"] == "mcnemar"
    assert compared[0]["estimate"] == pytest.approx(crows["b"]["value"] - crows["a"]["value"])
    page = (out / "index.html").read_text()
    for study in ("crows-pairs", "contextuality"):
        assert f'href="studies/{study}/index.html"' in page and (out / "studies" / study / "index.html").is_file()
    assert "leaderboard.csv" in page and (out / "leaderboard.csv").read_text().count("\n") == len(cells) + 1
    assert 'href="http://127.0.0.1:8765/study/crows-pairs' in page  # `biaslab view`'s default
    elsewhere = run("audit", "report", str(plan), "--out", str(out.parent / "elsewhere"), "--no-study-reports",
                    "--view-url", "http://lab-box:9000")
    assert elsewhere.exit_code == 0, elsewhere.output
    assert 'href="http://lab-box:9000/study/crows-pairs' in (out.parent / "elsewhere" / "index.html").read_text()
    refused = CliRunner().invoke(biaslab, ["audit", "report", str(plan), "--out", str(out.parent / "x"),
                                           "--view-url", "http://user:secret@host/path?q=1"])
    assert refused.exit_code == 2 and "--view-url" in refused.output and "secret" not in refused.output
    if chromium() is not None:
        dom = dump_dom(out / "index.html", out.parent / "profile")
        assert dom.count("<tr><td class=\"name\">") == 2 and "(reference)" in dom


def test_an_interrupted_plan_resumes_where_it_stopped(tmp_path, data_dir, tiny_gpt2_dir, second_tiny, monkeypatch):
    plan = write_plan(tmp_path, [("a", tiny_gpt2_dir), ("b", second_tiny)], data_dir)
    import biaslab.runners.collect as collect_module

    real, calls = collect_module.collect, []

    def stop_at_the_third(config, **kwargs):
        calls.append(config.dataset)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(config, **kwargs)

    monkeypatch.setattr(collect_module, "collect", stop_at_the_third)
    result = CliRunner().invoke(biaslab, ["audit", str(plan)])
    assert result.exit_code == 130 and "interrupted (Ctrl-C)" in result.output, result.output
    assert "biaslab audit " + str(plan.resolve()) in result.output
    monkeypatch.setattr(collect_module, "collect", real)
    again = run("audit", str(plan))
    assert "audit tiny: 4 units, 2 computed, 2 already stored" in again.output, again.output


def test_report_without_a_warehouse_says_run_the_plan_first(tmp_path, data_dir, tiny_gpt2_dir):
    plan = write_plan(tmp_path, [("a", tiny_gpt2_dir)], data_dir)
    result = CliRunner().invoke(biaslab, ["audit", "report", str(plan), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and "run the plan first" in result.output
    assert not (tmp_path / "r").exists()


def test_plan_paths_are_relative_to_the_plan_file(tmp_path, data_dir, tiny_gpt2_dir):
    folder = tmp_path / "plans"
    folder.mkdir()
    plan = load_plan(write_plan(folder, [("a", tiny_gpt2_dir)], data_dir, db="../out/w.duckdb"))
    assert plan.database.resolve() == (tmp_path / "out" / "w.duckdb").resolve()
    assert ".." not in plan.database.parts  # shown to people as it is (the report's heading, status lines)
    assert plan.work_folder == plan.database.with_name("w.duckdb.audit")


def test_a_hosted_model_in_a_plan_names_its_key_variable_and_the_dry_run_prices_it_sending_nothing(
        tmp_path, data_dir, monkeypatch):
    from chat_stub import ChatStub

    stub = ChatStub(extensions=True)
    try:
        monkeypatch.setenv("STUB_KEY", "sk-test")
        plan = tmp_path / "plan.yaml"
        plan.write_text(
            f"name: hosted\ndb: w.duckdb\ndata_dir: {data_dir}\nmodels:\n"
            f"  - {{name: stub, model: stub-model, backend: openai-chat, api_key_env: STUB_KEY,\n"
            f"     engine_args: {{base_url: '{stub.url}', extensions: true, price_in: 2.0, price_out: 8.0}}}}\n"
            "datasets:\n  - {dataset: winopron, limit: 2, where: {context: unprimed, option_order: MF}, "
            "settings: {mode: sample, samples: 3, seed: 1, top_k: 0}}\n")
        result = run("audit", str(plan), "--dry-run")
        assert result.exit_code == 0, result.output
        assert "6 requests" in result.output and "$" in result.output  # the estimate (3 samples each), its cost
        assert "1 unit: 1 with work to do, 0 stored; 2 of 2 requests to compute" in result.output
        assert stub.completions == 0 and not (tmp_path / "w.duckdb").exists()
        assert "sk-test" not in plan.read_text()
        ran = run("audit", str(plan), "--yes")
        assert "audit hosted: 1 unit, 1 computed" in ran.output, ran.output
        with duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True) as con:
            assert "sk-test" not in str(con.execute("SELECT params, command FROM runs").fetchall())
    finally:
        stub.close()


def test_a_killed_plan_resumes_and_stores_what_an_uninterrupted_run_stores(tmp_path, data_dir, tiny_gpt2_dir,
                                                                            second_tiny):
    """SIGKILL at two random moments (the whole process group, as a node failure would), then one more run: the
    evidence equals an uninterrupted run of the same plan, row for row."""
    import shutil
    import sys

    from kill_runs import kill_at_random_moments

    plan = write_plan(tmp_path, [("a", tiny_gpt2_dir), ("b", second_tiny)], data_dir, shards=2)
    biaslab_script = shutil.which("biaslab") or str(Path(sys.executable).with_name("biaslab"))
    db = tmp_path / "w.duckdb"

    def stored() -> int:
        if not db.exists():
            return 0
        with duckdb.connect(str(db), read_only=True) as con:
            try:
                return con.execute("SELECT (SELECT count(*) FROM sequence_scores) + "
                                   "(SELECT count(*) FROM choice_requests)").fetchone()[0]
            except duckdb.CatalogException:  # killed while the new warehouse's tables were being created
                return 0

    counts = kill_at_random_moments([biaslab_script, "audit", str(plan)], wall=12.0, times=2, seed=5,
                                    between=(0.4, 0.9), stored=stored)
    assert counts == sorted(counts)  # what was stored stays stored
    final = run("audit", str(plan))
    assert final.exit_code == 0 and "audit tiny: 8 units" in final.output, final.output
    clean = tmp_path / "clean.duckdb"
    assert run("audit", str(plan), "--db", str(clean)).exit_code == 0
    assert _evidence(db) == _evidence(clean)
