"""Hyperparameter sweeps of ``verlog train`` on Ray Tune, and their statistical diagnosis (docs/sweeps.md).

- :mod:`verlog.sweep.space_file`: the search space's YAML file read and its shape checked.
- :mod:`verlog.sweep.space`: the search space and its trials, Ray Tune's variants of it (random or grid).
- :mod:`verlog.sweep.checks`: every key checked against verlog train's config, every trial as ``verlog train
  --dry-run`` checks it, before anything starts.
- :mod:`verlog.sweep.folder`: the sweep folder (``--out``): its search space, its trials' folders and results.
- :mod:`verlog.sweep.trial`: one trial, ``verlog train`` (and ``verlog eval``) in a subprocess, watched and reported.
- :mod:`verlog.sweep.runner`: the trials on Ray Tune (scheduler, resources, result store, resume).
- :mod:`verlog.sweep.analysis`: the bootstrap diagnosis, pure numpy.
- :mod:`verlog.sweep.report`: the summary table and ``verlog sweep report``'s markdown and plots.
"""
