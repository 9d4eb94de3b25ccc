"""rtlreward's version, in a module of its own so that low layers (the sandbox's image tags and labels) can read
it without importing the package root and everything the root imports."""

__version__ = "0.1.0"
