"""Study metrics from stored evidence only (no model is loaded): one sub-package per study (statistics, the tables
read from a warehouse handle, the report), and one function per study in `studies`, which the `biaslab metrics` /
`biaslab report` commands and the Python API (`biaslab.contextuality(wh)`, ...) both call."""
