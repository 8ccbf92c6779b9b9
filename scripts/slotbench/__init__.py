"""slotbench: measure what concurrency does to an LLM inference server.

The Snakemake rules call thin entry points in ``scripts/``; the logic lives here so that tests
can import it. Vocabulary (target, run, rep, arm, cell, request, position) follows
docs/method.md#vocabulary.
"""

__version__ = "0.1.0"
