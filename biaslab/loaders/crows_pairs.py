"""CrowS-Pairs (Nangia et al., EMNLP 2020) and its revised English set (Névéol et al., ACL 2022), the set
lm-evaluation-harness's `crows_pairs_english` tasks use.

Each pair of sentences (one more stereotyping, `sent_more`, one less, `sent_less`) gives two stimuli of one item (the
pair's upstream id), each a whole sentence scored by the prob protocol: attrs hold the pair, which sentence it is
(`sentence`: more / less), the direction (stereo: sent_more states a stereotype about a historically disadvantaged
group; antistereo: sent_less does, against an advantaged group) and the bias type. The metrics
(`biaslab metrics crows-pairs`) pair them again by item.

Files: `crows-pairs` reads `crows_pairs_anonymized.csv` (1,508 pairs, nyu-mll/crows-pairs at 8aaac11; one sentence
holds a line break inside its quotes upstream, kept as it is); `crows-pairs-revised` reads
`revised_en/crows_pairs_EN_revised+210.csv` (1,677 pairs, tab-separated despite its name, from the GitHub copy in
kinit-sk/bias-methodology at 2acdfb5, the GitLab original being unreachable; its bias types add `autre`).

A pair whose two sentences are equal, or share no word, cannot be scored by the paper's metric (the tokens both
sentences share): it is refused in one line naming file, line and field, except in the pinned upstream file itself,
whose one such pair (revised id 1310, an English sentence paired with a French one) is loaded as upstream has it,
flagged `shares_no_word`, scored by the whole-sentence metric only and counted as unscorable by the paper's.

Reliability (Blodgett et al., ACL 2021, "Stereotyping Norwegian Salmon"): many pairs are noisy, do not contrast the
intended groups, or are not minimal; the upstream README itself warns that CrowS-Pairs "may not be a good indicator
of the presence of social biases in LMs". Every report of these scores says so.
"""

from __future__ import annotations

import difflib
import hashlib
from pathlib import Path

from ..schema import Stimulus
from .dataset import DatasetInfo, Upstream, file_loader, github_raw
from .readers import files_digest, read_table
from .verify import pinned_upstream

ORIGINAL = "crows_pairs_anonymized.csv"
REVISED = "revised_en/crows_pairs_EN_revised+210.csv"
PINS = {ORIGINAL: "dfb36986ce0502abbaf7055b9176da3d08d48e07df1251991b5dfbcbceab9d0c",
        REVISED: "c2c449a051ae93a61dae7a882c7a3efdfce04215c492ed2365d01c0861cecafe"}
DIRECTIONS = ("stereo", "antistereo")
COLUMNS = ("", "sent_more", "sent_less", "stereo_antistereo", "bias_type")
#: the reliability caveat, for the reports and the terminal
CAVEAT = ("CrowS-Pairs is noisy (Blodgett et al., ACL 2021): many pairs do not contrast the intended groups or are "
          "not minimal, and its authors warn it may not be a good indicator of social bias in LMs.")


def shares_word(a: str, b: str) -> bool:
    """Whether the two sentences share a word (an 'equal' block of difflib over whitespace-separated words)."""
    return any(op == "equal" for op, *_ in difflib.SequenceMatcher(None, a.split(), b.split(), autojunk=False)
               .get_opcodes())


def load_pairs(folder: Path, *, dataset: str, file: str) -> list[Stimulus]:
    """Two stimuli per pair of `file` (see the module docstring)."""
    path = Path(folder) / file
    delimiter = "\t" if file == REVISED else ","
    records = read_table(path, COLUMNS, delimiter=delimiter, multiline=True)
    upstream = pinned_upstream(hashlib.sha256(path.read_bytes()).hexdigest())
    version = files_digest([path])
    stimuli, seen = [], {}
    for rec in records:
        pair = rec.get("", required=False).strip()
        if not pair:
            raise rec.error("empty pair id", "(the first, unnamed column: the pair id)")
        first = seen.setdefault(pair, rec.line)
        if first != rec.line:
            raise rec.error(f"pair id {pair!r} repeats line {first}", "")
        more, less = rec.get("sent_more"), rec.get("sent_less")
        direction = rec.get("stereo_antistereo").strip()
        if direction not in DIRECTIONS:
            raise rec.error(f"must be stereo or antistereo, got {direction!r}", "stereo_antistereo")
        bias_type = rec.get("bias_type").strip()
        if more == less:
            raise rec.error("the two sentences are the same: nothing to compare", "sent_less")
        flagged = not shares_word(more, less)
        if flagged and not upstream:
            raise rec.error("shares no word with sent_more: the paper's metric scores the words both sentences "
                            "share", "sent_less")
        attrs = {"pair": pair, "direction": direction, "bias_type": bias_type, "line": rec.line}
        if flagged:
            attrs["shares_no_word"] = True
        for which, text in (("more", more), ("less", less)):
            stimuli.append(Stimulus(dataset=dataset, upstream_version=version, item_id=pair, text=text,
                                    attrs={**attrs, "sentence": which}))
    return stimuli


_COMMON = dict(licence="CC BY-SA 4.0", protocols=("prob",), studies=("crows-pairs",), folder="crows_pairs",
               strata=("attrs.bias_type",))
DATASETS = (
    DatasetInfo(
        name="crows-pairs",
        loader=file_loader(load_pairs, "crows-pairs", ORIGINAL),
        description="CrowS-Pairs (Nangia et al. 2020): 1,508 sentence pairs, more vs less stereotyping, 9 bias types",
        files={ORIGINAL: PINS[ORIGINAL]},
        url="https://github.com/nyu-mll/crows-pairs/tree/8aaac11c485473159ec9328a65253a5be9a479dc",
        sources={ORIGINAL: Upstream(github_raw("nyu-mll/crows-pairs", "8aaac11c485473159ec9328a65253a5be9a479dc",
                                               f"data/{ORIGINAL}"))},
        **_COMMON),
    DatasetInfo(
        name="crows-pairs-revised",
        loader=file_loader(load_pairs, "crows-pairs-revised", REVISED),
        description="CrowS-Pairs revised English (Névéol et al. 2022; lm-eval's crows_pairs_english): 1,677 pairs",
        files={REVISED: PINS[REVISED]},
        url="https://github.com/kinit-sk/bias-methodology/tree/2acdfb53f70d754b0917323ec0164af197dadd5c",
        sources={REVISED: Upstream(github_raw("kinit-sk/bias-methodology", "2acdfb53f70d754b0917323ec0164af197dadd5c",
                                              "data/french_crows/crows_pairs_EN_revised+210.csv"))},
        **_COMMON),
)
