"""robustep.datasets."""
