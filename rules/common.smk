# Shared by every stage: the validated config and the names of the files that flow between rules.
import sys

sys.path.insert(0, str(Path(workflow.basedir) / "scripts"))

from slotbench import code as sbcode
from slotbench import config as sbconfig

try:
    CFG = sbconfig.resolve(config)
except sbconfig.ConfigError as err:
    raise WorkflowError(str(err))

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


def plan_files(wildcards=None):
    return expand("results/plan/{target}/{run}.json", target=TARGETS, run=RUNS)


def target_cfg(wildcards):
    return sbconfig.target_by_name(CFG, wildcards.target)


def experiment(wildcards):
    """What defines a rep's measurement; every raw file records it."""
    return sbconfig.experiment(CFG, wildcards.target)
