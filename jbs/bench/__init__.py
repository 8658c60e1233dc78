"""The benchmark command: ``jbs-bench`` or ``python -m jbs.bench``."""
