# slotbench: what concurrency does to an LLM inference server.
# This file says what runs and when; rules/*.smk hold the stages; scripts/slotbench says how.


configfile: "config/config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/fingerprint.smk"
include: "rules/plan.smk"
include: "rules/rep.smk"
include: "rules/stopping.smk"
include: "rules/consolidate.smk"
include: "rules/checks.smk"
include: "rules/analyse.smk"
include: "rules/paired.smk"
include: "rules/figures.smk"
include: "rules/report.smk"
include: "rules/archive.smk"
include: "rules/compare.smk"


# Reading, computing and writing files: run where Snakemake runs, never queued on a cluster.
# Only fingerprint, plan and rep (the jobs that talk to a server) go to the executor.
localrules:
    all,
    resolved_config,
    look,
    stopped,
    consolidate_block,
    consolidate,
    checks,
    analyse,
    paired,
    figures,
    report,
    archive,
    compare,


# The run's servers stop with the workflow (and, failing that, when this Snakemake is gone);
# the scheduler's last re-evaluation timer would hold the exit for a second.
onsuccess:
    sbserver.stop_owned(os.getpid())
    sbstate.drop_pending_timers()


onerror:
    sbserver.stop_owned(os.getpid())
    sbstate.drop_pending_timers()


rule all:
    default_target: True
    input:
        result("report.md"),
        result("report.html"),
        result("config.resolved.yaml"),
