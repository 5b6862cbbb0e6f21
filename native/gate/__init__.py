"""The gate engine's folder: its C source and header, and its cffi builder (README.md)."""
