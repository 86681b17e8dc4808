"""The results pages the CPU recipes write (docs/results/): a recipe's run folder -> markdown, JSON and a plot.

One module per report kind: :mod:`verlog.reports.learning` (recipes/cpu/learn_*.sh), :mod:`verlog.reports.self_improve`
(recipes/cpu/self_improve_babyai.sh), :mod:`verlog.reports.curriculum` (recipes/cpu/curriculum_toy.sh); they share
one evaluation loader (:mod:`verlog.reports.evaluation`) and the run-folder readers of :mod:`verlog.reports.run_files`.
The recipes run them through ``verlog report KIND RUN_DIR --out PAGE.md`` (verlog/commands/report.py).
"""
