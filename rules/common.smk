# Shared by every stage: the validated config and the input functions naming the files that
# flow between rules (the jobs' order, resources, blocks, tokens: slotbench/workflow/jobs.py).
import os
import sys

# The package comes from this checkout, for the Snakefile and (code.run_from_checkout) for
# every rule script it starts, whatever another checkout put on the venv's path.
sys.path.insert(0, str(Path(workflow.basedir) / "scripts"))

from slotbench.core import code as sbcode
from slotbench.workflow import config as sbconfig, workloads as sbworkloads
from slotbench.workflow import jobs as sbjobs
from slotbench.measure import rawfiles as sbraw
from slotbench.measure.servers import supervisor as sbserver
from slotbench.workflow import smkstate as sbstate

sbcode.run_from_checkout()

# What an interrupted or killed Snakemake left (a stale lock, outputs marked incomplete) is
# settled before Snakemake looks, so the next plain run resumes (workflow/smkstate.py).
OLD_LAYOUT = bool(config.pop("old_layout", False))  # archive-render: an old archive
if workflow.is_main_process:
    for line in sbstate.settle(old_results=not OLD_LAYOUT):
        print(line, file=sys.stderr)

# One managed server per target and run (measure/servers/supervisor.py): the jobs this
# Snakemake starts find their run's server by this PID, and no server outlives it.
os.environ[sbserver.OWNER_ENV] = str(os.getpid())


def refuse(message):
    """Stop before anything runs with the message alone: no Snakemake traceback around it."""
    print(f"Error: {message}", file=sys.stderr)
    raise SystemExit(1)


# `snakemake compare --config compare_with=PATH`: what to compare with; not part of the
# experiment, so it never reaches the resolved config (nor reruns anything).
COMPARE_WITH = config.pop("compare_with", None)
# and the fingerprint fields meant to differ (compare --declare), comma-separated
COMPARE_DECLARE = sbconfig.listed(config.pop("compare_declare", ""))

try:  # a bad config, or a target's URL the check missed, is one line and not a traceback
    CFG = sbconfig.resolve(config)
    TARGETS = [t["name"] for t in CFG["targets"]]
    RUNS, REPS = sbconfig.run_ids(CFG), sbconfig.rep_ids(CFG)
    JOBS = sbjobs.Jobs(CFG, TARGETS, RUNS, REPS, sbjobs.machine_cpus(), OLD_LAYOUT)
except sbconfig.ConfigError as err:
    refuse(err)
RATE_ARMS = any(isinstance(a, dict) for a in CFG["arms"])  # an arrival rate (open loop)
PAIRED, PAIR_ORDER = JOBS.paired, JOBS.pair_order
WORKLOAD = bool(sbworkloads.by_target(CFG))  # a workload other than the article's
for _name in JOBS.shared_resources:  # one unit each, unless given with --resources
    if _name not in workflow.global_resources:
        workflow.register_resource(_name, 1)

run_priority = lambda w: JOBS.run_priority(w.run, w.target)
rep_priority = lambda w: JOBS.rep_priority(w.run, w.target, w.rep)
# the resources of a measuring job, each a function of its target
measuring_resources = lambda runtime_min=None: {
    name: lambda w, name=name: JOBS.resource(w.target, name, runtime_min)
    for name in JOBS.resource_names()
}


wildcard_constraints:
    target="[A-Za-z0-9_-]+",
    # run ids: run1, run2, ... from a count, or the ids listed in `runs`; never across a '/'
    run="[A-Za-z0-9_-]+",
    rep=r"\d+",
    block=r"\d+",


def code(script):
    """The package modules a cheap rule's script runs, as inputs: a change to that code reruns
    the rule and what follows it (measuring rules never declare code). Read where Snakemake
    runs (local), never from the default storage a cluster profile may set."""
    modules = sbcode.module_files(Path(workflow.basedir) / "scripts" / script)
    return [local(p) for p in modules]


result = lambda path: f"{JOBS.results}/{path}"  # path in results/<experiment>/
per_run = lambda pattern, **more: expand(pattern, target=TARGETS, run=RUNS, **more)
raw_files = lambda w=None: per_run(JOBS.raw, rep=measured_reps())  # rules/stopping.smk
raw_sha256_files = lambda w=None: [f"{path}.sha256" for path in raw_files()]
fingerprint_files = lambda w=None: per_run(result("fingerprint/{target}/{run}.json"))
plan_files = lambda w=None: per_run(result("plan/{target}/{run}.json"))
target_cfg = lambda w: sbconfig.target_by_name(CFG, w.target)
experiment = lambda w: sbconfig.experiment(CFG, w.target)  # what every raw file records
html_templates = lambda: [local(p) for p in sbcode.html_templates(workflow.basedir)]
if _refusal := sbraw.unrecorded_refusal(per_run(JOBS.raw, rep=REPS)):
    refuse(_refusal)

block_raw_files = lambda w: JOBS.block_raw(w.target, w.run, w.block, measured_reps())
block_sha256_files = lambda w: [f"{p}.sha256" for p in block_raw_files(w)]
block_files = lambda kind: per_run(f"{JOBS.block_prefix}.{kind}", block=JOBS.blocks)
BLOCK_TOKENS = JOBS.block_tokens()  # read from the raw files as they are now
RAW_TOKEN = sbjobs.raw_token(BLOCK_TOKENS)
block_token = lambda w: BLOCK_TOKENS[(w.target, w.run, int(w.block))]
