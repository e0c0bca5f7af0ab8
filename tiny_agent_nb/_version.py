"""The package's version, in a leaf module: every layer may read it without importing the
package root (which sits above them all), as httpx's `__version__.py`."""

__version__ = "0.1.0.dev0"
