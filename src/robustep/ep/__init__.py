"""robustep.ep."""
