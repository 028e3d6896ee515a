"""Front ends: ``terascale linear train|predict|evaluate`` (flags, option mapping, runs,
the ``-n N`` worker), one-against-all multiclass, and the scikit-learn estimators."""
