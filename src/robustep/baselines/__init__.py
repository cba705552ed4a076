"""robustep.baselines."""
