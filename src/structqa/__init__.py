"""structqa: reading-comprehension QA with structural attention biases."""

__version__ = "0.1.0"
