"""Ops that move data along a dimension: slicing, padding, concatenation,
reversal, windows (reduce_window, select_and_scatter, convolution).

(Being written: see the op-rule table's docstring for the model.)
"""
