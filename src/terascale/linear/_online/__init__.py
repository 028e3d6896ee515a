"""The online learner: VW's adaptive, normalized, importance-invariant update (``_update``),
the pass loop every online pass shares, the first pass over text, progress and
progressive predictions."""
