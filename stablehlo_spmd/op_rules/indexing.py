"""Data-dependent indexing and ordering: gather, scatter, sort.

(Being written: see the op-rule table's docstring for the model.)
"""
