"""The torch 2.13 patch torchax needs: small, named, and only for named-tensor overloads."""

import pytest

from stablehlo_spmd.frontends.torch import torchax_compat


def test_the_patch_only_stands_in_for_named_tensor_overloads():
    torchax_compat.environment()
    made = torchax_compat.placeholders_made
    # Empty once a torchax release no longer lists them: then drop the patch.
    assert made, "torchax loads without the patch now; remove torchax_compat"
    for name in made:
        assert "name" in name.rsplit(".", 1)[1].lower(), name


def test_a_placeholder_cannot_be_called():
    overload = torchax_compat.MissingOverload("aten::prod.dim_Dimname")
    with pytest.raises(NotImplementedError, match="prod.dim_Dimname"):
        overload()


def test_other_missing_overloads_still_raise():
    import torch

    torchax_compat.environment()
    with pytest.raises(AttributeError):
        torch.ops.aten.add.no_such_overload
