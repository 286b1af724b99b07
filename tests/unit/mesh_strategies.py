"""Hypothesis strategies shared by the reshard tests: meshes of 2 to 8
devices in shuffled device order, with up to three axes a, b, c."""

import math

from hypothesis import strategies as st

from stablehlo_spmd.mesh import Mesh

MESH_SHAPES = [(2,), (4,), (8,), (2, 2), (4, 2), (2, 4), (2, 2, 2), (8, 1), (2, 1, 4)]


@st.composite
def meshes(draw):
    shape = draw(st.sampled_from(MESH_SHAPES))
    order = draw(st.permutations(range(math.prod(shape))))
    return Mesh(tuple(order), shape, ("a", "b", "c")[:len(shape)])
