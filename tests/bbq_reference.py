"""Running the BBQ authors' own R scripts (`bbq/reference/`, nyu-mll/BBQ at bea11bd) on the copy in the data folder.

Adapted only where the copy or the machine force it, each edit an exact text replacement that fails loudly when the
script's text differs:

- paths: the scripts `setwd` to their own folder through RStudio's API; here they run in a temporary tree with
  `data/`, `templates/` and `results/` beside the working folder, as upstream has them;
- `BBQ_results_metadata.R`: its intersectional part stops with an error when no intersectional category is present
  (the copy has none), so the script ends after the non-intersectional part, writing what it computed there with the
  same columns;
- `BBQ_calculate_bias_score.R`: the RoBERTa / DeBERTa results file (`df_bbq.csv`) is not in the copy, so the script
  reads UnifiedQA's predictions only; its metadata join reads the `additional_metadata.csv` written by the metadata
  script (the upstream file is not in the copy); instead of plotting, it writes its two tables (`dat_acc`,
  `dat_bias`) to CSV.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pandas as pd

PATHS = ('this.dir <- dirname(rstudioapi::getSourceEditorContext()$path)\nsetwd(this.dir)',)


def rscript() -> str | None:
    return shutil.which("Rscript")


def _replace(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"the reference script changed: {old[:60]!r} found {text.count(old)} times"
    return text.replace(old, new)


def _tree(bbq: Path, work: Path) -> Path:
    for name in ("data", "templates", "results"):
        (work / name).symlink_to((bbq / name).resolve(), target_is_directory=True)
    analysis = work / "analysis"
    analysis.mkdir()
    return analysis


def _setwd(text: str, folder: Path) -> str:
    return _replace(text, PATHS[0], f'setwd("{folder}")')


def metadata_script(bbq: Path, analysis: Path) -> str:
    text = _setwd((bbq / "reference" / "BBQ_results_metadata.R").read_text(encoding="utf-8"), analysis)
    cut = "# ------------------------------------------------------------\n# for intersectional templates"
    assert text.count(cut) == 1
    head = text[:text.index(cut)]
    return head + """
dat_base_selected$full_cond = NA
dat_base_selected$Known_stereotyped_race = NA
dat_base_selected$Known_stereotyped_var2 = NA
dat_base_selected$corr_ans_aligns_var2 = NA
dat_base_selected$corr_ans_aligns_race = NA
write.csv(dat_base_selected, "additional_metadata.csv", row.names = F)
"""


def bias_script(bbq: Path, analysis: Path) -> str:
    text = _setwd((bbq / "reference" / "BBQ_calculate_bias_score.R").read_text(encoding="utf-8"), analysis)
    start = text.index("# read in roberta/deberta model results")
    end = text.index("dat = merge(dat_uqa,dat_berts, by=c(\"example_id\",\"category\"))")
    text = text[:start] + "dat = dat_uqa" + text[end + len("dat = merge(dat_uqa,dat_berts, by=c(\"example_id\","
                                                                  "\"category\"))"):]
    start = text.index("  mutate(`deberta-v3-base-race` = case_when(")
    end = text.index("  # make long form")
    text = text[:start] + text[end:]
    plot = text.index("# plotting")
    return text[:plot] + ('write.csv(dat_acc, "bbq_accuracy.csv", row.names = F)\n'
                          'write.csv(dat_bias, "bbq_bias.csv", row.names = F)\n')


def run(bbq: Path, work: Path, timeout: float = 600) -> dict[str, pd.DataFrame]:
    """Run both scripts on the copy at `bbq` in the empty folder `work`: {"metadata", "accuracy", "bias"} tables."""
    analysis = _tree(bbq, work)
    for name, text in (("metadata.R", metadata_script(bbq, analysis)), ("bias.R", bias_script(bbq, analysis))):
        (analysis / name).write_text(text, encoding="utf-8")
        done = subprocess.run([rscript(), "--vanilla", name], cwd=analysis, capture_output=True, text=True,
                              timeout=timeout)
        assert done.returncode == 0, f"{name} failed:\n{done.stderr[-3000:]}"
    return {"metadata": pd.read_csv(analysis / "additional_metadata.csv", keep_default_na=False,
                                    na_values=["NA"]),
            "accuracy": pd.read_csv(analysis / "bbq_accuracy.csv"),
            "bias": pd.read_csv(analysis / "bbq_bias.csv")}
