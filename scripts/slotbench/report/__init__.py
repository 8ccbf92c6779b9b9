"""The report: operator gain vs per-user loss, batching vs pipelining, and the checks behind them.

build_report assembles one neutral list of blocks (headings, paragraphs, tables, figures,
sources) and renders it twice, as Markdown and as a self-contained HTML page, so the two never
disagree. Every table and figure is followed by the cells and raw-file SHA-256s behind it and by
its provenance id; each table row has one too. The same references make results/provenance.json
(see slotbench.provenance) and the report's closing Provenance section, so a link in the report
and an entry in the record cannot drift apart.
"""

# Layout (one module per concern; lower modules never import document.py):
#   format.py    number and arm formatting helpers
#   frames.py    small data helpers shared by the sections (flags, a target's rows)
#   blocks.py    neutral block types and the Markdown / HTML renderers
#   headline.py  headline table and sentences, batching vs pipelining readings
#   checks.py    rotation, deviance, serialisation, timing, Ollama, fingerprint, figure,
#                versions, config and provenance sections
#   integrity.py the Measurement integrity traps
#   document.py  build_blocks / build_document / build_report / render_report / write_report

from __future__ import annotations

from slotbench.report.format import (  # noqa: F401
    DASH,
    MINUS,
    SERIAL_ARM,
    WAYS,
    arm_name,
    fmt_bytes,
    fmt_change,
    fmt_num,
    fmt_pct,
    fmt_times,
    way,
    with_ci,
)
from slotbench.report.blocks import (  # noqa: F401
    STYLE,
    Bullets,
    Code,
    Figure,
    Heading,
    Paragraph,
    ProvenanceIndex,
    Sources,
    Table,
    render_html,
    render_markdown,
)
from slotbench.report.headline import (  # noqa: F401
    METRIC_COLUMNS,
    SUMMARY_COLUMNS,
    decomposition_sentence,
    headline_blocks,
    headline_refs,
    headline_sentence,
    summary_row,
)
from slotbench.report.checks import (  # noqa: F401
    CLIENT_TIMING,
    CLIENT_WHAT,
    PS_COLUMNS,
    SERIALISATION_TABLE_COLUMNS,
    config_blocks,
    config_yaml,
    deviance_blocks,
    figure_blocks,
    fingerprint_blocks,
    flatten,
    ollama_blocks,
    ollama_facts,
    pinned_line,
    provenance_blocks,
    ps_snapshots,
    ps_warnings,
    rotation_blocks,
    serialisation_blocks,
    serialisation_rows,
    serialisation_warning,
    timing_source_line,
    version_blocks,
)
from slotbench.report.integrity import (  # noqa: F401
    ARTICLE_DRIFT,
    CLIENT_LEAD,
    CONTROL_OFF,
    DRIFT_THRESHOLD,
    INTEGRITY_INPUTS,
    MAX_ROWS,
    SUFFICIENCY_COLUMNS,
    TargetContext,
    Trap,
    burst_sentence,
    burst_trap,
    cache_trap,
    checks_traps,
    client_trap,
    client_warning,
    control_line,
    control_trap,
    cooldown_line,
    integrity_blocks,
    prompts_trap,
    sufficiency_trap,
    thermal_trap,
    tokenizer_sentence,
)
from slotbench.report.document import (  # noqa: F401
    OPTIONAL_REQUEST_COLUMNS,
    REQUEST_COLUMNS,
    build_blocks,
    build_document,
    build_report,
    match_figure_paths,
    read_checks_csv,
    read_requests,
    render_report,
    write_report,
)
