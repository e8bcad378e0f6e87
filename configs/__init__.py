"""Data shipped with tagjit: tool-call formats (formats/*.json) and example configurations."""
