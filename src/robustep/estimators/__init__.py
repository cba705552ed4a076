"""robustep.estimators."""
