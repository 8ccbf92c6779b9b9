"""slotbench: measure what concurrency does to an LLM inference server.

The Snakemake rules call thin entry points in ``scripts/``; the logic lives here so that tests
can import it. Vocabulary (target, run, rep, arm, cell, request, position) follows
docs/method.md#vocabulary.
"""

__version__ = "0.1.0"

# The package's layers, lowest first: each is a folder, and imports only from itself and the
# layers before it (docs/architecture.md#layers). `python -m slotbench` sits over them all.
LAYERS = (
    "core",  # the vocabulary, statistics, which code runs
    "measure",  # plans, reps, wire protocols, managed servers, samplers, raw files
    "workflow",  # the config, target matrices, job resources, Snakemake's state, archives
    "tables",  # raw files consolidated into requests and cells
    "analysis",  # ratios, intervals, capacity, the open loop, comparisons
    "checks",  # one module per trap, and each target's headline decision
    "figures",  # seaborn figures and their captions
    "provenance",  # the cells behind every number, and `explain`
    "report",  # presents, decides nothing
)
