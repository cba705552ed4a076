"""robustep.gp."""
