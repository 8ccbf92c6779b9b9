# Shared by every stage: the validated config and the names of the files that flow between rules.
import os
import sys

# The package comes from this checkout, for the Snakefile and (code.run_from_checkout) for
# every rule script it starts, whatever another checkout put on the venv's path.
sys.path.insert(0, str(Path(workflow.basedir) / "scripts"))

from slotbench import code as sbcode
from slotbench import config as sbconfig
from slotbench import plan as sbplan
from slotbench import rawfiles as sbraw
from slotbench import resources as sbres
from slotbench import runserver as sbserver
from slotbench import smkstate as sbstate

sbcode.run_from_checkout()

# What an interrupted or killed Snakemake left (a stale lock, outputs marked incomplete) is
# settled before Snakemake looks, so the next plain run resumes: see slotbench/smkstate.py.
if workflow.is_main_process:
    for line in sbstate.settle():
        print(line, file=sys.stderr)


# One managed server per target and run, kept across the run's jobs (slotbench/runserver.py):
# the jobs this Snakemake starts find their run's server by this PID, and no server outlives it.
os.environ[sbserver.OWNER_ENV] = str(os.getpid())


def refuse(message):
    """Stop before anything runs with the message alone: no Snakemake traceback around it."""
    print(f"Error: {message}", file=sys.stderr)
    raise SystemExit(1)


# `snakemake compare --config compare_with=PATH`: what to compare this result with. It is not
# part of the experiment, so it never reaches the resolved config (nor reruns anything).
COMPARE_WITH = config.pop("compare_with", None)
# and the fingerprint fields meant to differ (compare --declare), comma-separated
COMPARE_DECLARE = [
    f for f in str(config.pop("compare_declare", "") or "").split(",") if f.strip()
]

try:
    CFG = sbconfig.resolve(config)
except sbconfig.ConfigError as err:
    refuse(err)

TARGETS = [t["name"] for t in CFG["targets"]]
# whether any arm is an arrival rate (open loop)
RATE_ARMS = any(isinstance(arm, dict) for arm in CFG["arms"])
RUNS = sbconfig.run_ids(CFG)
REPS = sbconfig.rep_ids(CFG)

# What a measuring job (fingerprint, plan, rep) of each target asks for: its cores, memory and
# GPUs, a runtime estimate, and one unit of each endpoint resource it holds (slotbench/
# resources.py). Every endpoint resource exists once, so two jobs that would share what they
# measure (an external server's host and port, a CPU of a managed one) never run at once,
# under --jobs N locally or on a cluster; different endpoints run side by side.
MACHINE_CPUS = (
    sorted(os.sched_getaffinity(0))
    if hasattr(os, "sched_getaffinity")
    else list(range(os.cpu_count() or 1))
)
try:  # the config's check refuses a bad URL first; this keeps a slip from being a traceback
    _JOB_RESOURCES = {
        t["name"]: sbres.job_resources(CFG, t, MACHINE_CPUS, sbres.rep_runtime_min(CFG))
        for t in CFG["targets"]
    }
except sbconfig.ConfigError as err:
    refuse(err)
for _target in CFG["targets"]:
    for _name in sbres.endpoint_resources(_target, MACHINE_CPUS):
        if _name not in workflow.global_resources:  # unless given with --resources
            workflow.register_resource(_name, 1)


# The paired design (design: paired): rep k of every target is pair k of its run, its sides
# measured back to back in the order plan.pair_order derives from (seed, run, pair), reversed
# every other pair (ABBA). The sides are rep jobs taken in that sequence (their priority) and
# one at a time (the paired_turn resource), after every target's fingerprint and plan.
PAIRED = CFG["design"] == "paired"
PAIR_ORDER = (
    {
        run: {rep: sbplan.pair_order(TARGETS, CFG["seed"], run, rep) for rep in REPS}
        for run in RUNS
    }
    if PAIRED
    else {}
)
_SIDES = [
    (run, rep, t) for run in PAIR_ORDER for rep in REPS for t in PAIR_ORDER[run][rep]
]
_SIDE_PRIORITY = {side: len(_SIDES) - i for i, side in enumerate(_SIDES)}
if PAIRED:
    for _spec in _JOB_RESOURCES.values():
        _spec["paired_turn"] = 1
    if "paired_turn" not in workflow.global_resources:
        workflow.register_resource("paired_turn", 1)


def run_priority(wildcards):
    """A measuring job's priority: the jobs of one target and run go together, runs in order,
    so the run's server serves them all rather than restarting as runs interleave. In the
    paired design, every fingerprint and plan comes before the first side."""
    order = [(r, t) for r in RUNS for t in TARGETS]
    return len(_SIDES) + len(order) - order.index((wildcards.run, wildcards.target))


def rep_priority(wildcards):
    """A rep's priority: its run's (run_priority), or in the paired design its place in the
    sequence of sides."""
    if PAIRED:  # a rep the config does not list (asked for by its file) comes last
        return _SIDE_PRIORITY.get(
            (wildcards.run, int(wildcards.rep), wildcards.target), 0
        )
    return run_priority(wildcards)


def measuring_resources(runtime_min=None):
    """The rule's resources: each a function of the job's target (0 where it holds none)."""

    def value(key):
        if key == "runtime" and runtime_min is not None:
            return lambda wildcards: runtime_min
        return lambda wildcards: _JOB_RESOURCES[wildcards.target].get(key, 0)

    return {
        key: value(key)
        for key in sorted({k for r in _JOB_RESOURCES.values() for k in r})
    }


wildcard_constraints:
    target="[A-Za-z0-9_-]+",
    # run ids: run1, run2, ... from a count, or the ids listed in `runs`; never across a '/'
    run="[A-Za-z0-9_-]+",
    rep=r"\d+",
    block=r"\d+",


def code(script):
    """The package modules a cheap rule's script runs: declared as inputs, so that a change to
    that code reruns the rule and what follows it. Measuring rules never declare code.
    """
    # local(): read where Snakemake runs (only localrules declare code), never from the
    # default storage a cluster profile may set (profiles/kubernetes)
    return [
        local(p)
        for p in sbcode.module_files(Path(workflow.basedir) / "scripts" / script)
    ]


def html_templates():
    """The HTML page's templates (report/html/), inputs of the rules that render a page: like
    code(), so that a change to one re-renders the page."""
    return [
        local(str(p))
        for p in sorted((Path(workflow.basedir) / "report" / "html").glob("*.html"))
    ]


def raw_files(wildcards=None):
    return expand(
        "results/raw/{target}/{run}/rep{rep}.json", target=TARGETS, run=RUNS, rep=REPS
    )


def raw_sha256_files(wildcards=None):
    """The SHA-256 of each raw file, recorded (sha256sum format) when it was written."""
    return [f"{path}.sha256" for path in raw_files()]


def fingerprint_files(wildcards=None):
    return expand("results/fingerprint/{target}/{run}.json", target=TARGETS, run=RUNS)


# A raw file without the SHA-256 recorded when it was written cannot be verified: refuse before
# anything runs, rather than re-measure it (and lose it) or read it unverified.
_unrecorded = sbraw.unrecorded(raw_files())
if _unrecorded:
    refuse(
        f"raw file {_unrecorded[0]} has no {Path(_unrecorded[0]).name}.sha256 (the hash recorded "
        "when it was written), so it cannot be verified"
        + (f" ({len(_unrecorded) - 1} more like it)" if len(_unrecorded) > 1 else "")
        + ". Restore the .sha256 from an archive, or delete the raw file to measure that rep "
        "again; nothing was run."
    )
# Consolidation reads the raw files in blocks of at most this many reps of one target and run,
# then merges the blocks: a job with every raw file as an input stalls Snakemake's job
# preparation (it checks each input against each dependency, so 10^10 checks at a million
# requests), and a block that is already consolidated is not read again when reps are added.
REPS_PER_BLOCK = 1000
BLOCK_PREFIX = "results/consolidated/{target}/{run}/block{block}"


def block_of(rep):
    return (int(rep) - 1) // REPS_PER_BLOCK + 1


BLOCKS = sorted({block_of(rep) for rep in REPS})


def raw_files_of_block(target, run, block):
    return [
        f"results/raw/{target}/{run}/rep{rep}.json"
        for rep in REPS
        if block_of(rep) == int(block)
    ]


def block_raw_files(wildcards):
    return raw_files_of_block(wildcards.target, wildcards.run, wildcards.block)


def block_sha256_files(wildcards):
    return [f"{path}.sha256" for path in block_raw_files(wildcards)]


def block_files(kind):
    """One kind of block output (e.g. "requests.parquet") of every block of every target/run."""
    return expand(f"{BLOCK_PREFIX}.{kind}", target=TARGETS, run=RUNS, block=BLOCKS)


# Changes when a raw file that a block's consolidation read was deleted, replaced or edited
# since (see rawfiles.inventory_token): that block, the merge and the report take it as a
# param, so the next plain run measures what is missing again and refuses what changed.
BLOCK_TOKENS = {
    (t, r, b): sbraw.inventory_token(
        raw_files_of_block(t, r, b),
        BLOCK_PREFIX.format(target=t, run=r, block=b) + ".inventory.json",
    )
    for t in TARGETS
    for r in RUNS
    for b in BLOCKS
}
RAW_TOKEN = sbraw.combined_token(BLOCK_TOKENS.values())


def block_token(wildcards):
    return BLOCK_TOKENS[(wildcards.target, wildcards.run, int(wildcards.block))]


def plan_files(wildcards=None):
    return expand("results/plan/{target}/{run}.json", target=TARGETS, run=RUNS)


def target_cfg(wildcards):
    return sbconfig.target_by_name(CFG, wildcards.target)


def experiment(wildcards):
    """What defines a rep's measurement; every raw file records it."""
    return sbconfig.experiment(CFG, wildcards.target)
