"""verbspec: executable, machine-checked specifications of RDMA receive-side protocols.

Subpackages: ``verbspec.spec`` (the state-machine spec), ``verbspec.proofs`` (checkers),
``verbspec.refimpl`` (reference library and CLI), ``verbspec.native`` (C engines).
"""

__version__ = "0.1.0"
