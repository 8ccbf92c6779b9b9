"""Statistics over the tables: within-rep ratios and the decomposition (analyse), capacity at a
service level, targets side by side (across), the open loop's rate arms (openloop)."""
