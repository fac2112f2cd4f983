"""Where biaslab will read its datasets, said before anything is installed (the README's two commands run it first).

Usage: python scripts/check_data.py [DATASET_FOLDER ...] [--warn]

The folder is biaslab's own rule (`biaslab.loaders.registry.default_data_dir`), in the Python standard library only,
since nothing is installed yet: $BIASLAB_DATA when set (an exported value is respected), else `shared/datasets`
beside this checkout (this project's layout), else the per-user cache folder where `biaslab data fetch` puts
datasets. Each DATASET_FOLDER named must be in it; if one is not, one line says where it was looked for and how to
get it, and the exit status is 1 (with --warn: 0, for the tests, which skip what is absent).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]


def data_dir() -> tuple[Path, str]:
    """(the folder, why it is that one)."""
    env = os.environ.get("BIASLAB_DATA")
    if env:
        return Path(env).expanduser(), "$BIASLAB_DATA"
    beside = (CHECKOUT / ".." / "shared" / "datasets").resolve()
    if beside.is_dir():
        return beside, "the project's shared/datasets beside this checkout"
    if sys.platform == "darwin":  # platformdirs' user_cache_dir("biaslab"), which biaslab uses once installed
        cache = Path.home() / "Library" / "Caches" / "biaslab"
    elif os.name == "nt":
        cache = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local") / "biaslab" / "Cache"
    else:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "biaslab"
    return cache / "datasets", "the per-user cache (no $BIASLAB_DATA, no shared/datasets beside this checkout)"


def main(argv: list[str]) -> int:
    warn = "--warn" in argv
    wanted = [a for a in argv if a != "--warn"]
    folder, why = data_dir()
    missing = [name for name in wanted if not (folder / name).is_dir()]
    if not folder.is_dir() or missing:
        what = f"no {', '.join(missing)} dataset" if missing else "no datasets"
        print(f"check_data: {what} in {folder} ({why}). Set BIASLAB_DATA to the folder that holds them, or run "
              f"`biaslab data fetch {missing[0] if missing else 'DATASET'}` once biaslab is installed (it downloads "
              f"the pinned upstream files there){'; the tests that need them skip' if warn else ''}.",
              file=sys.stderr)
        return 0 if warn else 1
    print(f"check_data: datasets in {folder} ({why})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
