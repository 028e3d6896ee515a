"""Side-by-side benchmarks against the peers (``terascale bench ...``)."""
