"""robustep.likelihoods."""
