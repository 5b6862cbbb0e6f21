"""The UCX tag-matching shim's folder: its C source and header, and its cffi builder
(README.md)."""
