"""robustep.tep."""
