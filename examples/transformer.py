"""The GPT-style decoder-only transformer, under its examples/ name.

The model itself lives in the package, as `stablehlo_spmd.demo_model`, so that
an installed ``stablehlo-spmd demo`` carries it; this module keeps the
``examples/transformer.py:train_step_example`` and ``examples.transformer``
references of the README and the tests working.  Its rules are the package's
``stablehlo_spmd/demo_rules.toml``.
"""

from stablehlo_spmd.demo_model import (  # noqa: F401  (this module's whole purpose)
    Config, causal_self_attention, decoder_layer, example_args, example_batch, forward,
    forward_example, init_params, layer_norm, loss_fn, mlp, print_training_steps, train_step,
    train_step_example)

if __name__ == "__main__":
    print_training_steps()
