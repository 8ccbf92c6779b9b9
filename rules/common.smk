# Shared by every stage: the validated config and the names of the files that flow between rules.
import sys

# The package comes from this checkout, for the Snakefile and (code.run_from_checkout) for
# every rule script it starts, whatever another checkout put on the venv's path.
sys.path.insert(0, str(Path(workflow.basedir) / "scripts"))

from slotbench import code as sbcode
from slotbench import config as sbconfig
from slotbench import rawfiles as sbraw
from slotbench import smkstate as sbstate

sbcode.run_from_checkout()

# What an interrupted or killed Snakemake left (a stale lock, outputs marked incomplete) is
# settled before Snakemake looks, so the next plain run resumes: see slotbench/smkstate.py.
if workflow.is_main_process:
    for line in sbstate.settle():
        print(line, file=sys.stderr)


def refuse(message):
    """Stop before anything runs with the message alone: no Snakemake traceback around it."""
    print(f"Error: {message}", file=sys.stderr)
    raise SystemExit(1)


try:
    CFG = sbconfig.resolve(config)
except sbconfig.ConfigError as err:
    refuse(err)

TARGETS = [t["name"] for t in CFG["targets"]]
RUNS = sbconfig.run_ids(CFG)
REPS = sbconfig.rep_ids(CFG)


wildcard_constraints:
    target="[A-Za-z0-9_-]+",
    # run ids: run1, run2, ... from a count, or the ids listed in `runs`; never across a '/'
    run="[A-Za-z0-9_-]+",
    rep=r"\d+",


def code(script):
    """The package modules a cheap rule's script runs: declared as inputs, so that a change to
    that code reruns the rule and what follows it. Measuring rules never declare code.
    """
    return sbcode.module_files(Path(workflow.basedir) / "scripts" / script)


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
# Changes when a raw file that consolidation read was deleted, replaced or edited since (see
# rawfiles.inventory_token): consolidate and the report take it as a param, so the next plain
# run measures what is missing again and refuses what changed.
RAW_TOKEN = sbraw.inventory_token(raw_files(), "results/inventory.json")


def plan_files(wildcards=None):
    return expand("results/plan/{target}/{run}.json", target=TARGETS, run=RUNS)


def target_cfg(wildcards):
    return sbconfig.target_by_name(CFG, wildcards.target)


def experiment(wildcards):
    """What defines a rep's measurement; every raw file records it."""
    return sbconfig.experiment(CFG, wildcards.target)
