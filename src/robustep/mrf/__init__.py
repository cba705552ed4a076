"""robustep.mrf."""
