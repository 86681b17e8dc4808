"""Results of the CPU learning recipe (not a test): a run folder -> docs/results.md, its learning curve and numbers.

    .venv/bin/python bench/learning.py outputs/learn-babyai --out docs/results.md
    .venv/bin/python bench/learning.py outputs/learn-babyai-smoke --out /tmp/results.md

Writes the markdown, ``<name>_curve.png`` (success and return against PPO iteration) and ``<name>.json`` next to
it. Reads evaluations' ``episodes.jsonl``, the PPO runs' ``metrics.jsonl``, ``timings.jsonl`` and ``settings.env``
(recipes/cpu/learn_babyai.sh writes them all) and, if present, the run folder's notes.md (what was tried by hand
before the run, included as written); stages not run yet are reported as such. Code: verlog/learning.py.
"""

from __future__ import annotations

import argparse
import sys

from verlog.errors import VerlogError
from verlog.learning import write_results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="the recipe's run folder (its OUTPUT_DIR)")
    parser.add_argument("--out", default="docs/results.md", help="the markdown to write (default: docs/results.md)")
    parser.add_argument("--bootstrap-resamples", type=int, default=10_000, help="resamples of every interval")
    parser.add_argument("--bootstrap-seed", type=int, default=0, help="seed of the bootstrap resampling")
    args = parser.parse_args(argv)
    try:
        md, png = write_results(args.run_dir, args.out, n_resamples=args.bootstrap_resamples, seed=args.bootstrap_seed)
    except (VerlogError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(md.read_text(encoding="utf-8"))
    curve = f" and {png}" if png else " (no PPO rollout episode has ended yet: no learning curve)"
    print(f"[learning] wrote {md}{curve}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
