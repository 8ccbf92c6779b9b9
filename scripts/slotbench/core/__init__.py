"""The vocabulary every layer shares: cells and arms (core.cells), number formatting (core.fmt),
every statistic (core.stats), when to stop measuring reps (core.sequential), a server's URL read
strictly (core.urls), which code runs (core.code) and the rule entry points' helpers
(core.entry). Imports nothing else of slotbench."""
