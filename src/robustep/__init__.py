"""robustep: robust Expectation Propagation and belief propagation.

See the README for a quick start and docs/architecture.md for the design.
"""

from robustep._config import config, get_config

__version__ = "0.1.0"

__all__ = ["config", "get_config", "__version__"]
