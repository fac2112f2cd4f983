"""`python -m biaslab.cli.biaslab_entry` runs the `biaslab` command (same as the console script)."""

from .main import biaslab

if __name__ == "__main__":
    biaslab()
