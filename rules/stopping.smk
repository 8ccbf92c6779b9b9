# reps: auto: the experiment grows block by block, each look deciding whether another block of
# reps is measured (workflow/stopping.py; checks/stopping.py says how a look decides). With a
# fixed number of reps, the reps are the config's and nothing here runs.
from slotbench.workflow import stopping as sbstopping

STOPPING = sbstopping.settings(CFG)  # None: a fixed number of reps
if STOPPING:
    if workflow.is_main_process:  # what it will do, said before it starts (and by -n)
        print(sbstopping.plan_line(CFG), file=sys.stderr)
    # the looks whose reps are all measured already (those reps are used, whatever a look
    # says), and the key of the looks made under these settings and this code
    MEASURED_LOOKS = sbstopping.measured_looks(
        STOPPING["block"],
        lambda rep: all(Path(p).exists() for p in per_run(JOBS.raw, rep=[rep])),
        STOPPING["max_reps"],
    )
    LOOKS_KEY = sbstopping.looks_key(
        STOPPING,
        sbconfig.check_settings(CFG),
        sbcode.module_files(Path(workflow.basedir) / "scripts" / "look.py"),
    )
# where the looks under these settings and this code go (their logs: the same under logs/)
LOOKS = "stopping/{key}/look{{look}}".format(key=LOOKS_KEY if STOPPING else "-")


# a look's decision (asking for a look not yet made adds it to the DAG: Snakemake's checkpoint)
look_decision = lambda k: sbstopping.decision_in(checkpoints.look.get(look=k).output[0])
# the reps the experiment measures: the config's, or those up to the look that stopped it
measured_reps = lambda w=None: (
    sbstopping.decided_reps(
        STOPPING["block"], look_decision, STOPPING["max_reps"], MEASURED_LOOKS
    )
    if STOPPING
    else REPS
)
last_look = lambda w=None: len(measured_reps()) // STOPPING["block"]
look_raw_files = lambda w: per_run(
    JOBS.raw, rep=sbstopping.look_reps(int(w.look), STOPPING["block"])
)


# After rotation block {look}: the sequential intervals of every headline ratio from the reps
# so far, and whether to measure another block (stopping/<key>/look<N>.json). The key is a
# digest of the settings and the code that decide, so changing them decides again from the reps
# already measured: tightening the target adds blocks only if they are needed.
checkpoint look:
    input:
        raw=look_raw_files,
        sha256=lambda w: [f"{p}.sha256" for p in look_raw_files(w)],
    output:
        result(f"{LOOKS}.json"),
    log:
        result(f"logs/{LOOKS}.log"),
    wildcard_constraints:
        look=r"\d+",
    conda:
        "../envs/analyse.yaml"
    params:
        stopping=STOPPING,
        checks=sbconfig.check_settings(CFG),
        runs_targets=len(RUNS) * len(TARGETS),
    script:
        "../scripts/look.py"


rule stopped:
    """The look that stopped a sequential experiment, under these settings and this code
    (stopping/<key>/stopped.json): consolidation reads it, so a change of settings decides
    again even where every block is consolidated already."""
    input:
        lambda w: result(f"{LOOKS}.json").format(look=last_look()),
    output:
        result(f"stopping/{LOOKS_KEY if STOPPING else '-'}/stopped.json"),
    log:
        result(f"logs/stopping/{LOOKS_KEY if STOPPING else '-'}/stopped.log"),
    conda:
        "../envs/analyse.yaml"
    script:
        "../scripts/stopped.py"
