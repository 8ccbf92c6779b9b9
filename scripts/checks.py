"""Rule checks: every trap's verdict records, detail tables and the headline decision into
results/<experiment>/checks/ (logic in slotbench.checks)."""

from slotbench.checks import run_checks, write_checks
from slotbench.checks.base import load_tables
from slotbench.core.entry import progress_log


def main(sm) -> None:
    with progress_log(sm.log[0]) as log:
        verdicts, details = run_checks(load_tables(dict(sm.input)), dict(sm.params.settings))
        decision = write_checks(sm.output[0], verdicts, details)
        for v in verdicts:
            print(f"checks: {v.target}: {v.title}: {v.verdict}: {v.summary}", file=log)
        for target, d in sorted(decision.items()):
            print(f"checks: {target}: headline {d['status'].upper()}", file=log)


main(snakemake)  # noqa: F821 - provided by Snakemake
