"""``stablehlo-spmd run``: a module file and an .npz of inputs in, an .npz of outputs out."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Sequence

import numpy as np

from stablehlo_spmd.errors import SpmdError
from stablehlo_spmd.runtime import distributed
from stablehlo_spmd.runtime.executable import _executable
from stablehlo_spmd.runtime.module import RuntimeInputError, TensorInfo, _read_module


def run_files(module_path: str, inputs_npz: str | None, outputs_npz: str) -> list[tuple[str, Any]]:
    """``stablehlo-spmd run MODULE --inputs IN.npz --outputs OUT.npz``.

    Input keys: argument ``i`` is read from the key that is its name (the
    pytree path in its location, e.g. ``params['w1']``) or, failing that,
    ``arg<i>`` (``arg0``, ``arg1``, ...); an argument found under neither, a
    key naming no argument, or one argument under both keys is an error.
    `inputs_npz` may be None for a module without arguments.  Outputs are
    written as ``result0``, ``result1``, ... (positional, whatever the
    results' names), to a temporary file renamed onto `outputs_npz` only when
    everything succeeded.  Returns (key, NumPy array) for each output written.

    With several processes (`distributed`: launch's
    variables, or a cluster jax detects) every process runs this with the
    same files: each feeds its own devices' shards, and process 0 writes the
    outputs.
    """
    try:
        with open(module_path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise SpmdError(f"cannot open input file '{module_path}': {error.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SpmdError(f"the input is not UTF-8 text (byte {error.start})", module_path) from None
    info = _read_module(text, module_path)
    arrays = _read_inputs(inputs_npz, info.arguments, module_path)
    executable = _executable(info, text, None, module_path, ask_for_devices=True)
    outputs = executable(*arrays)
    # Every process takes part in gathering a result spread over processes;
    # process 0 writes them.
    written = [(f"result{i}", distributed.to_host(output)) for i, output in enumerate(outputs)]
    if distributed.process_index() == 0:
        _write_npz(outputs_npz, written)
    return written


def _read_inputs(path: str | None, arguments: Sequence[TensorInfo], module_path: str) -> list:
    if path is None:
        if arguments:
            raise RuntimeInputError(f"the module has {len(arguments)} arguments; give them with "
                                    "--inputs FILE.npz", module_path)
        return []
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        message = getattr(error, "strerror", None) or str(error)
        raise RuntimeInputError(f"cannot read inputs '{path}': {message}") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise RuntimeInputError(f"inputs '{path}' is a single .npy array, not an .npz archive")
    with archive:
        keys = set(archive.files)
        arrays, used = [], set()
        for argument in arguments:
            # Three spellings: the argument's name, ``argN``, and NumPy's own
            # ``arr_N`` (what ``np.savez(path, *arrays)`` writes).
            spellings = [key for key in (argument.name, f"arg{argument.index}",
                                         f"arr_{argument.index}") if key and key in keys]
            if len(spellings) > 1:
                raise RuntimeInputError(
                    f"{argument.describe()} is given twice in '{path}', as {spellings[0]!r} and "
                    f"as {spellings[1]!r}", module_path)
            if not spellings:
                raise RuntimeInputError(
                    f"{argument.describe()} is missing from '{path}': expected the key "
                    + (f"{argument.name!r}, " if argument.name else "")
                    + f"'arg{argument.index}' or 'arr_{argument.index}'", module_path)
            key = spellings[0]
            used.add(key)
            arrays.append(archive[key])
        unknown = sorted(keys - used)
        if unknown:
            names = ", ".join(repr(a.name or f"arg{a.index}") for a in arguments) or "none"
            raise RuntimeInputError(
                f"'{path}' has key{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(map(repr, unknown))} naming no argument (the arguments are "
                f"{names}, or arg0..arg{max(len(arguments) - 1, 0)}, or "
                f"arr_0..arr_{max(len(arguments) - 1, 0)})", module_path)
    return arrays


def _write_npz(path: str, arrays: Sequence[tuple[str, Any]]) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise SpmdError(f"cannot write output file '{path}': directory '{directory}' does not exist")
    handle = tempfile.NamedTemporaryFile("wb", dir=directory, delete=False,
                                         prefix=".stablehlo-spmd-", suffix=".npz")
    try:
        with handle:
            np.savez(handle, **dict(arrays))
        os.replace(handle.name, path)
    except OSError as error:
        os.unlink(handle.name)
        raise SpmdError(f"cannot write output file '{path}': {error.strerror}") from None
