"""Built-in normalization layers, one module per family."""
