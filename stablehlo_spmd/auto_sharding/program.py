"""The 0-1 program over variable classes, and how HiGHS solves it.

`_Milp` holds the program a `Search` builds from its units (`_Unit`: one
binary variable per strategy, shared by a variable class), the linear
terms, and the cost blocks between classes, linearized with one continuous
variable per pair of strategy groups; the memory rows come with each solve.

The solver is HiGHS.  The LP relaxation goes first (highspy): unbounded, in
one instance kept warm across solves, it is integral on most models
measured; bounded, solved cold on a fresh instance (`_lp_with_rows` says
why), it blends a few choices, and the 0-1 program restricted to the LP's
support decides them in a fraction of a second, with a plan the LP's value
proves where the LP is tight (`_Milp.relaxed`).  (Where two mesh axes are
mirrors, `symmetry.py`, and the memory rows are the same under the swap,
the LP is solved folded, one variable per column and its mirror,
`_Milp._folded`: the same bound in a quarter of the time.)  Where the LP is
not tight, the blend is divided on the class whose blended choices differ
most in the bytes a bounded point holds, a few levels deep, each child's
LP solved on that instance from its parent's basis and rounded the same
way: a small branch and bound that needs none of the cuts the whole
program spends its root on (`_Milp._divide`), and that divides on a plan
and its mirror (two mesh axes of one size swapped, `symmetry.py`) once.
Where that proof falls short too, the whole 0-1 program
is solved (highspy too: scipy's `milp` bundles an older HiGHS, whose branch
and bound took 57 s on Mixtral's bounded forward where highspy 1.16 took
9.6 s, to a dearer plan), stopped within 0.2% of the optimum, or 2% with
memory bounded: there the LP bound is weak, closing the last percent is
most of the solve, and the estimate itself is only within a few percent of
what XLA compiles.  The proof asks the same 2%.  Unbounded, the 0-1 program
starts from the relaxation's plan; bounded, from the last solve's plan
where that fits the budget.  The least peak memory of any plan is asked
the same way: its LP relaxation rounded on its support
(`_Milp.least_on_support`), unproved, the whole program only where that
rounding finds none.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

import numpy as np

from stablehlo_spmd.auto_sharding.graph import SearchTimeLimit

# How close to the optimum of its estimate the solver must prove a plan.
# With memory bounded, closing the last percent or two is most of the
# solve (the LP bound is weak there), and the estimate itself is only
# within a few percent of what XLA compiles: proving more is false precision.
MIP_GAP = 2e-3
BOUNDED_GAP = 2e-2
# How many levels a bounded LP is divided on blended classes before the
# whole 0-1 program is asked (`_Milp._divide`).
DIVIDE_DEPTH = 4
# How close to a node's bound a plan must be for the division to stop
# rounding below it: the proof asks BOUNDED_GAP, better plans are sought to this.
DIVIDE_GAP = MIP_GAP
_INFEASIBLE = 2   # `_Milp._highs_milp`'s status for a problem with no solution


@dataclasses.dataclass
class _Unit:
    kind: str                    # "op" (an op's strategies) or "value" (a class's layouts)
    owner: int                   # node index, or class root value
    strategies: list             # Strategy for ops, Sharding for values
    variable_class: int = -1     # shared with the units of its repeated copies


class _Milp:
    """The 0-1 program over variable classes, and its LP relaxation."""

    BIG = 1e30

    def __init__(self, units: list[_Unit], classes: list[int], linear, blocks):
        self.class_size: dict[int, int] = {}
        for unit, cls in zip(units, classes):
            self.class_size.setdefault(cls, len(unit.strategies))
        offsets = {}
        count = 0
        for cls in sorted(self.class_size):
            offsets[cls] = count
            count += self.class_size[cls]
        self.offsets = offsets
        self.n_choice = count
        objective = np.zeros(count)
        upper = np.ones(count)
        for unit, cls in zip(range(len(units)), classes):
            terms = linear[unit]
            start = offsets[cls]
            objective[start:start + len(terms)] += np.where(np.isfinite(terms), terms, 0)
            upper[start:start + len(terms)][~np.isfinite(terms)] = 0
        self.rows: list[tuple[list[int], list[float], float, float]] = []
        for cls in sorted(self.class_size):
            start = offsets[cls]
            size = self.class_size[cls]
            self.rows.append((list(range(start, start + size)), [1.0] * size, 1.0, 1.0))
        pair_costs = []
        pair_upper = []
        # (source class, reader class) -> (first pair variable, row group of
        # each source strategy, column group of each reader strategy, columns)
        self.pairs: dict[tuple[int, int], tuple[int, np.ndarray, np.ndarray, int]] = {}
        for (a, b), matrix in blocks.items():
            if not matrix.any() and np.isfinite(matrix).all():
                continue
            row_groups = _distinct([tuple(r) for r in matrix], key=lambda r: r)
            col_groups = _distinct([tuple(c) for c in matrix.T], key=lambda c: c)
            small = matrix[np.ix_([row_groups[1].index(i) for i in range(len(row_groups[0]))],
                                  [col_groups[1].index(j) for j in range(len(col_groups[0]))])]
            base = count + len(pair_costs)
            n_rows, n_cols = small.shape
            self.pairs[(a, b)] = (base, np.array(row_groups[1]), np.array(col_groups[1]), n_cols)
            for i in range(n_rows):
                for j in range(n_cols):
                    finite = math.isfinite(small[i, j])
                    pair_costs.append(small[i, j] if finite else 0.0)
                    pair_upper.append(1.0 if finite else 0.0)
            for i in range(n_rows):
                members = [offsets[a] + s for s, g in enumerate(row_groups[1]) if g == i]
                self.rows.append(([base + i * n_cols + j for j in range(n_cols)] + members,
                                  [1.0] * n_cols + [-1.0] * len(members), 0.0, 0.0))
            for j in range(n_cols):
                members = [offsets[b] + t for t, g in enumerate(col_groups[1]) if g == j]
                self.rows.append(([base + i * n_cols + j for i in range(n_rows)] + members,
                                  [1.0] * n_rows + [-1.0] * len(members), 0.0, 0.0))
        self.objective = np.concatenate([objective, np.array(pair_costs)])
        self.upper = np.concatenate([upper, np.array(pair_upper)])
        self.variables = len(self.objective)
        self.constraints = len(self.rows)
        self.classes = classes
        self.parts = (linear, blocks)   # to price a plan found otherwise
        self._warm = None       # the HiGHS instance on the LP relaxation (`_relaxation`)
        self._base = None       # the choice and pair rows, as `_base_rows` gives them
        self.proved = False     # whether the last `solve` proved its plan within its gap
        # Seconds a whole LP relaxation took (its folded one's, scaled by
        # its columns and rows), and whether a solve left its plan unproved because
        # less time was left than that: nothing the whole LP bounds (the
        # division, the 0-1 program) ends in less.
        self.lp_seconds = 0.0
        self.out_of_time = False
        self._base_csc = None   # the same matrix by columns, for `_on_support`
        self._held_rows = 0     # how many memory rows the instance holds
        # Per mirror swap the objective bears out (`take_mirrors`): each
        # column's mirror column.
        self.mirrors: list[np.ndarray] = []

    def take_mirrors(self, swaps: list[dict[int, np.ndarray]]) -> None:
        """Keep each swap of `symmetry.axis_swaps` under which the program's
        columns, their costs and their bounds are the same: as a permutation
        of the columns (a pair variable goes to the pair of its strategy
        groups' mirrors)."""
        self.mirrors = []
        for swap in swaps:
            permutation = self._permutation(swap)
            if permutation is not None and _same_under(self.objective, permutation) \
                    and np.array_equal(self.upper[permutation], self.upper):
                self.mirrors.append(permutation)

    def _permutation(self, swap: dict[int, np.ndarray]) -> np.ndarray | None:
        permutation = np.arange(self.variables)
        for cls, start in self.offsets.items():
            mirror = swap.get(cls)
            if mirror is None or len(mirror) != self.class_size[cls]:
                return None
            permutation[start:start + len(mirror)] = start + mirror
        for (a, b), (base, row_group, col_group, n_cols) in self.pairs.items():
            rows = _group_image(row_group, swap[a])
            cols = _group_image(col_group, swap[b])
            if rows is None or cols is None:
                return None
            n_rows = len(rows)
            image = base + rows[:, None] * n_cols + cols[None, :]
            permutation[base:base + n_rows * n_cols] = image.ravel()
        return permutation

    def _columns(self, memory_row: dict) -> tuple[np.ndarray, np.ndarray]:
        """A memory row (unit -> bytes per strategy; (source unit, reader
        unit) -> bytes per pair of strategies) over the program's columns.
        Pairs of strategies that share a pair variable are charged the most
        any of them holds; the units of one class choose alike, so their
        pair is charged on the class's own variables; and a pair of units
        without pair variables (their edge moves nothing) is not charged."""
        indices: list[np.ndarray] = []
        values: list[np.ndarray] = []
        for key, per_device in memory_row.items():
            if isinstance(key, tuple):
                source, reader = self.classes[key[0]], self.classes[key[1]]
                if source == reader and per_device.shape[0] == per_device.shape[1]:
                    # One class's units choose alike: the pair is the diagonal.
                    diagonal = np.diagonal(per_device)
                    indices.append(self.offsets[source] + np.arange(len(diagonal)))
                    values.append(diagonal)
                    continue
                pair = self.pairs.get((source, reader))
                if pair is None:
                    continue
                base, row_group, col_group, n_cols = pair
                grouped = np.zeros((row_group.max() + 1, n_cols))
                np.maximum.at(grouped, (row_group[:, None], col_group[None, :]), per_device)
                rows, cols = np.nonzero(grouped)
                indices.append(base + rows * n_cols + cols)
                values.append(grouped[rows, cols])
                continue
            indices.append(self.offsets[self.classes[key]] + np.arange(len(per_device)))
            values.append(np.asarray(per_device, dtype=float))
        if not indices:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        columns, position = np.unique(np.concatenate(indices), return_inverse=True)
        return columns.astype(np.int64), np.bincount(position, weights=np.concatenate(values),
                                                     minlength=len(columns))

    def _base_rows(self):
        """(the choice and pair rows as a matrix, their lower and upper
        bounds), built once: every 0-1 solve, and each rounding of the
        division's, adds only its memory rows to them."""
        if self._base is None:
            self._base = (self._matrix(self.rows, self.variables),
                          [lo for _c, _v, lo, _hi in self.rows],
                          [hi for _c, _v, _lo, hi in self.rows])
        return self._base

    @staticmethod
    def _matrix(rows, n: int):
        from scipy import sparse

        data, row_ids, col_ids = [], [], []
        for r, (cols, values, _lo, _hi) in enumerate(rows):
            col_ids.extend(cols)
            data.extend(values)
            row_ids.extend([r] * len(cols))
        return sparse.csr_array((data, (row_ids, col_ids)), shape=(len(rows), n))

    def solve(self, memory_rows, budget, time_limit, minimize_peak: bool = False,
              start: list[int] | None = None, cost_weight: float = 0.0):
        """The 0-1 program's plan and cost (its peak, with `minimize_peak`),
        or None where no plan fits.  A plan that fits may be given as the
        solver's `start`.  With `minimize_peak`, `cost_weight` of each
        plan's cost is added to its peak: among plans of one peak the
        cheapest, and none that moves without need (a move that costs
        nothing in memory at the rows' points may cost much elsewhere)."""
        program = self._program(memory_rows, budget, minimize_peak, cost_weight)
        objective, matrix, col_lower, col_upper, lower, upper, unit, n, rows = program
        gap = BOUNDED_GAP if rows else MIP_GAP
        # The program gains little from HiGHS's presolve, and with it HiGHS
        # restarts its root each time reduced-cost fixing frees columns: off,
        # the real models' solves took a quarter less time, to the same plans.
        x, status = self._highs_milp(objective, matrix, col_lower, col_upper, lower, upper,
                                     self.n_choice, time_limit, False, gap,
                                     None if start is None else self._point(start, n))
        if x is None:
            if status == _INFEASIBLE:
                return None
            # Out of time (or of HiGHS's patience) before any plan: saying
            # "no plan fits" here would send the user after the wrong knob.
            raise SearchTimeLimit(
                "the solver found no plan within the time limit; give the search more time "
                "(time-limit)")
        self.proved = status == 0
        strategies = self._strategies(x)
        if minimize_peak:
            return strategies, float(x[-1]) * unit
        return strategies, float(objective @ x)

    def _program(self, memory_rows, budget, minimize_peak: bool, cost_weight: float,
                 columns=None):
        """The 0-1 program `solve` hands HiGHS: (objective, matrix, column
        lower and upper bounds, row lower and upper bounds, the peak's unit,
        the number of columns, the memory rows over the columns).
        `columns`, where given, are the memory rows as `_columns` gives them."""
        from scipy import sparse

        n = self.variables + (1 if minimize_peak else 0)
        if budget is None and not minimize_peak:
            columns = []
        elif columns is None:
            columns = [self._columns(row) for row in memory_rows]
        col_lower = np.zeros(n)
        if not minimize_peak:
            matrix, lower, upper = self._with_rows(columns, budget)
            return self.objective, matrix, col_lower, self.upper.copy(), lower, upper, 1.0, n, \
                columns
        # The peak is counted in units of the largest term: HiGHS called
        # rows of bytes (up to 4e12 on Llama-3-8B) against the peak's own
        # coefficient of -1 infeasible.
        unit = max((float(np.max(values)) for _, values in columns if len(values)), default=1.0)
        unit = unit if unit > 0 else 1.0
        rows = [([*cols, n - 1], [*(values / unit), -1.0], -np.inf, 0.0)
                for cols, values in columns]
        base, base_lower, base_upper = self._base_rows()
        base = sparse.hstack([base, sparse.csr_array((base.shape[0], 1))], format="csr")
        matrix = sparse.vstack([base, self._matrix(rows, n)], format="csr") if rows else base
        lower = [*base_lower, *[-np.inf] * len(rows)]
        upper = [*base_upper, *[0.0] * len(rows)]
        objective = np.zeros(n)
        objective[:self.variables] = cost_weight / unit * self.objective
        objective[-1] = 1.0
        col_upper = np.concatenate([self.upper, [np.inf]])
        return objective, matrix, col_lower, col_upper, lower, upper, unit, n, rows

    def least_on_support(self, memory_rows, time_limit: float, cost_weight: float = 0.0):
        """(a plan, its peak over the rows) of least peak memory, from the
        LP relaxation of `solve`'s least-peak program rounded on its support
        (RENS, as `_on_support` rounds the cheapest plan's); None where the
        LP or the rounding finds none in time.  No proof: the whole program
        proves its plan, in far more time (Mixtral-8x7B's full-depth step:
        60 s, out of time, for 63.7 GiB)."""
        import highspy

        deadline = time.perf_counter() + time_limit
        columns = [self._columns(row) for row in memory_rows]
        objective, matrix, col_lower, col_upper, lower, upper, unit, n, _ = self._program(
            memory_rows, None, True, cost_weight, columns)
        mirrors = self._mirrors_keeping(columns)
        if mirrors:
            highs, orbit = self._folded(objective, (matrix, lower, upper), col_upper, mirrors, 1)
        else:
            highs, orbit = self._highs(_highs_lp(objective, matrix, col_lower, col_upper, lower,
                                                 upper)), np.arange(n)
        highs.setOptionValue("time_limit", max(1e-9, deadline - time.perf_counter()))
        highs.run()
        if highs.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        x = np.asarray(highs.getSolution().col_value)[orbit]
        open_columns, ones = self._open_on(x[:self.variables])
        open_columns = np.append(open_columns, n - 1)          # the peak stays free
        fixed = np.zeros(n)
        fixed[ones] = 1.0
        restricted = _restricted(matrix.tocsc(), lower, upper, open_columns, fixed)
        if restricted is None:
            return None
        sub, row_lower, row_upper = restricted
        x_open, _status = self._highs_milp(
            objective[open_columns], sub, col_lower[open_columns], col_upper[open_columns],
            row_lower, row_upper, int(np.searchsorted(open_columns, self.n_choice)),
            max(1e-9, deadline - time.perf_counter()), True, BOUNDED_GAP, None)
        if x_open is None:
            return None
        fixed[open_columns] = x_open
        return self._strategies(fixed), float(fixed[-1]) * unit

    def _point(self, strategies: list[int], n: int) -> np.ndarray:
        """A plan as the program's columns: each class's choice, and the
        pair variable of each pair of strategy groups it picks."""
        x = np.zeros(n)
        chosen = dict(zip(self.classes, strategies))
        for cls, start in self.offsets.items():
            x[start + chosen[cls]] = 1.0
        for (a, b), (base, row_group, col_group, n_cols) in self.pairs.items():
            x[base + row_group[chosen[a]] * n_cols + col_group[chosen[b]]] = 1.0
        return x

    @staticmethod
    def _highs_milp(objective, matrix, col_lower, col_upper, row_lower, row_upper,
                    n_integer: int, time_limit: float, presolve: bool, gap: float, start):
        """The 0-1 program (its first `n_integer` columns whole) solved by
        highspy, from `start` where one is given: (the solution or None, a
        status: 0 solved, 1 out of time, 2 infeasible)."""
        import highspy

        lp = _highs_lp(objective, matrix, col_lower, col_upper, row_lower, row_upper)
        lp.integrality_ = [highspy.HighsVarType.kInteger] * n_integer + \
            [highspy.HighsVarType.kContinuous] * (len(objective) - n_integer)
        highs = _quiet_highs()
        highs.setOptionValue("presolve", "on" if presolve else "off")
        highs.setOptionValue("mip_rel_gap", gap)
        highs.setOptionValue("time_limit", float(time_limit))
        highs.passModel(lp)
        if start is not None:
            solution = highspy.HighsSolution()
            solution.col_value = list(start)
            solution.value_valid = True
            highs.setSolution(solution)
        highs.run()
        status = highs.getModelStatus()
        if status == highspy.HighsModelStatus.kInfeasible:
            return None, _INFEASIBLE
        if highs.getInfo().primal_solution_status != highspy.SolutionStatus.kSolutionStatusFeasible:
            return None, 1
        return np.asarray(highs.getSolution().col_value), \
            0 if status == highspy.HighsModelStatus.kOptimal else 1

    def _strategies(self, x: np.ndarray) -> list[int]:
        chosen = {cls: int(np.argmax(x[start:start + self.class_size[cls]]))
                  for cls, start in self.offsets.items()}
        return [chosen[cls] for cls in self.classes]

    def _relaxation(self):
        """The HiGHS instance on the LP relaxation (with the memory rows
        `_lp_with_rows` last gave it), built on first use and again for
        each bounded LP."""
        if self._warm is None:
            matrix, lower, upper = self._base_rows()
            self._warm = self._highs(_highs_lp(self.objective, matrix, np.zeros(self.variables),
                                               self.upper, lower, upper))
        return self._warm

    @staticmethod
    def _highs(lp):
        highs = _quiet_highs()
        # As for the 0-1 program: the unbounded LP took half the time
        # without presolve on every model measured (Mixtral's step 3.6 s
        # -> 1.9 s), and a warm start skips it anyway.
        highs.setOptionValue("presolve", "off")
        # The serial dual simplex.  The parallel one (PAMI) was 20% faster
        # on an idle machine, but with another process on the cores its
        # threads wait on each other: Llama's 2-layer step's LP took 1.4 s,
        # then 16 s and 25 s on the same input (serial: 1.7-2.4 s).  Every
        # ``spmd-propagate`` runs this LP now, on whatever else is running.
        highs.setOptionValue("simplex_strategy", 1)
        highs.passModel(lp)
        return highs

    def relaxed(self, memory_rows, budget, time_limit,
                overflows: Callable[[list[int]], bool] | None = None):
        """(the best plan found, or None; whether it is proved within
        BOUNDED_GAP (MIP_GAP unbounded) of the optimum, or proved
        infeasible when there is no plan), from the LP relaxation.

        Unbounded, the LP is integral on most models measured, and its
        optimum is the plan.  Bounded, it is not: a memory row makes the
        cheapest plan a blend of one over and one under the budget.  The
        blend is rounded by the 0-1 program on the LP's support (RENS,
        `_on_support`): the choices the LP makes whole are kept and
        the few it blends are decided exactly, in a fraction of a second.
        Its plan is proved by the LP's value where that is close: on
        Mixtral's training step the LP is 0.5% under the optimum, which
        the whole program took twenty seconds to find.  Where it is not,
        the LP is divided (`_divide`; folded, the whole LP is solved for
        it first), unless `overflows` says the rounded
        plan overflows a point no row bounds yet: the caller adds that row
        and asks again, and a division for plans the row cuts off is
        wasted (on Mixtral's forward at 1.09 MiB, 1.7 s of the first
        solve's 3.5 s).  (Pricing memory at
        the rows' duals rounded worse on every model measured: 41% dearer
        than this on BERT's forward.)  Each LP starts from the last one's
        basis.  Where no plan is proved, the caller solves the whole 0-1
        program.  With less time left than the whole LP took (`lp_seconds`),
        neither the division nor the whole program could end in it: the
        rounded plan is returned unproved, and `out_of_time` says why."""
        import highspy

        deadline = time.perf_counter() + time_limit
        optimal = highspy.HighsModelStatus.kOptimal

        def run(highs):
            """The instance's model status once run, or None where no time
            was left to run it (its status is then the last run's)."""
            left = deadline - time.perf_counter()
            if left <= 0:
                return None
            # HiGHS's limit is on the instance's run time, all runs together.
            highs.setOptionValue("time_limit", highs.getRunTime() + left)
            highs.run()
            return highs.getModelStatus()

        def integral(x: np.ndarray) -> bool:
            choices = x[:self.n_choice]
            return bool(np.all(np.abs(choices - np.round(choices)) < 1e-6))

        columns = [self._columns(row) for row in memory_rows]
        mirrors = self._mirrors_keeping(columns)
        started = time.perf_counter()
        if mirrors:
            # Folded: the same bound, a symmetric optimum, a quarter of the time.
            folded, orbit = self._folded(self.objective, self._with_rows(columns, budget),
                                         self.upper, mirrors)
            status = run(folded)
            x = np.asarray(folded.getSolution().col_value)[orbit] if status == optimal else None
            bounded = None
            # The simplex's iterations grow with the rows, each one's work
            # with the columns: Mixtral's, folded 0.8 s, whole 2.9 s (3.6x).
            scale = self.variables / folded.getNumCol() \
                * (len(self.rows) + len(columns)) / max(1, folded.getNumRow())
        else:
            bounded = self._lp_with_rows(columns, budget)
            status = run(bounded)
            x = np.asarray(bounded.getSolution().col_value) if status == optimal else None
            scale = 1.0
        if status == optimal:
            self.lp_seconds = (time.perf_counter() - started) * scale
        if x is None:
            return None, status == highspy.HighsModelStatus.kInfeasible
        bound = (folded if mirrors else bounded).getInfo().objective_function_value
        if integral(x):
            return (self._strategies(x), float(self.objective @ x)), True
        if not columns:
            best = self._on_support(x, [], None, deadline)
            return best, best is not None and best[1] - bound <= MIP_GAP * abs(best[1])
        best = self._on_support(x, columns, budget, deadline)
        if best is not None and best[1] - bound <= BOUNDED_GAP * abs(best[1]):
            return best, True
        if best is not None and overflows is not None and overflows(best[0]):
            return best, False
        if deadline - time.perf_counter() < self.lp_seconds:
            self.out_of_time = True
            return best, False
        if bounded is None:
            # The division fixes columns one class at a time, which no mirror
            # keeps: it needs the whole LP, and its basis.
            bounded = self._lp_with_rows(columns, budget)
            if run(bounded) != optimal:
                return best, False
            x = np.asarray(bounded.getSolution().col_value)
        held = np.zeros((len(columns), self.n_choice))
        for row, (cols, values) in zip(held, columns):
            choices = cols < self.n_choice
            row[cols[choices]] = values[choices]
        best, bound = self._divide(bounded, run, held, columns, budget, deadline,
                                   x, bound, {}, DIVIDE_DEPTH, best, mirrors)
        return best, best is not None and best[1] - bound <= BOUNDED_GAP * abs(best[1])

    def _mirrors_keeping(self, columns) -> list[np.ndarray]:
        """The mirrors (`take_mirrors`) under which every memory row (as
        `_columns` gives it) is the same too."""
        return [m for m in self.mirrors if all(
            _same_under(_dense(cols, values, self.variables), m) for cols, values in columns)]

    def _with_rows(self, columns, budget):
        """(matrix, row lower bounds, row upper bounds): the choice and pair
        rows, and each memory row bounded by `budget`."""
        from scipy import sparse

        base, lower, upper = self._base_rows()
        if not columns:
            return base, lower, upper
        memory = self._matrix([(cols, values, 0, 0) for cols, values in columns], self.variables)
        return (sparse.vstack([base, memory], format="csr"), [*lower, *[-np.inf] * len(columns)],
                [*upper, *[budget] * len(columns)])

    def _folded(self, objective, rows, col_upper, mirrors, extra_columns: int = 0):
        """(a HiGHS instance on the LP folded by `mirrors`, each column's
        variable in it).

        The program, its rows and its bounds are the same under each mirror,
        so the mirror of an optimum is one too, and so is their average:
        some optimum gives a column and its mirror the same value.  The
        folded LP has one variable per orbit of columns (those the mirrors
        and their compositions map onto each other), and each row once: the
        rows a mirror maps onto each other become one.  Its optimum is the
        LP's, and the point it unfolds to is feasible in the LP whatever
        the mirrors are, since each row is the LP's own on that point.  On
        Mixtral-8x7B's full-depth step over ``data=8,model=8``, bounded at
        80 GiB: 77k of 153k columns, 7.9k of 14.4k rows, 0.8 s against
        2.9 s.  `extra_columns` trailing columns (the peak's) are their own
        orbits."""
        from scipy import sparse
        from scipy.sparse.csgraph import connected_components

        matrix, row_lower, row_upper = rows
        n = self.variables
        links = sparse.coo_array(
            (np.ones(n * len(mirrors)), (np.tile(np.arange(n), len(mirrors)),
                                         np.concatenate(mirrors))), shape=(n, n))
        count, orbit = connected_components(links, directed=False)
        orbit = np.concatenate([orbit, count + np.arange(extra_columns)])
        count += extra_columns
        columns = matrix.shape[1]
        gather = sparse.csc_array((np.ones(columns), (np.arange(columns), orbit)),
                                  shape=(columns, count))
        folded = (sparse.csr_array(matrix) @ gather).tocsr()
        folded.sort_indices()
        seen: set = set()
        kept = []
        for r in range(folded.shape[0]):
            start, stop = folded.indptr[r], folded.indptr[r + 1]
            key = (folded.indices[start:stop].tobytes(), folded.data[start:stop].tobytes(),
                   row_lower[r], row_upper[r])
            if key not in seen:
                seen.add(key)
                kept.append(r)
        upper = np.full(count, np.inf)
        np.minimum.at(upper, orbit, col_upper)
        lp = _highs_lp(gather.T @ np.asarray(objective, dtype=float), folded[kept],
                       np.zeros(count), upper, np.asarray(row_lower)[kept],
                       np.asarray(row_upper)[kept])
        return self._highs(lp), orbit

    def _divide(self, highs, run, held: np.ndarray, memory, budget, deadline: float,
                x: np.ndarray, bound: float, fixed: dict, depth: int, best,
                mirrors: list[np.ndarray] = ()):
        """(the best plan found, a bound on every plan) below an LP node;
        `memory`, the memory rows as `_columns` gives them.

        A bounded LP blends a plan over the budget with one under it: the
        whole blend moves together, and dividing on one class's choice
        often splits it.  The class divided on is the blended one whose
        choices differ most in the bytes a bounded point holds (the
        memory row's own columns): one child per choice the LP blends, and
        one where it takes none of them.  Each child's LP (on the kept
        instance, with those columns fixed) bounds it.  A child whose bound
        is within `DIVIDE_GAP` of the best plan is done; otherwise its LP's
        support is rounded (`_on_support`), which may find a better plan,
        and where the child is still not within `BOUNDED_GAP` it is divided
        again, `depth` levels in all.  (Rounding to the tighter gap costs a
        few roundings and finds the plans the whole program finds: proved
        at 2% alone, Mixtral's forward at 1.44 MiB kept a plan 1% dearer
        by the estimate, and 51% dearer by XLA's count.)  A child whose LP
        runs out of time keeps its parent's bound.

        On Mixtral's forward at 1.09 MiB the bounded LP is 10% under the
        optimum, and the whole 0-1 program took 9.6 s to close that (most
        of it cuts at the root); divided, the same plan is proved within
        0.6%, and the next budget's within 1.2%, where the whole program
        took 9 s.  The search there went from 31 s to 14 s."""
        import highspy

        blended = self._most_held_blend(x, held)
        if depth == 0 or blended is None or time.perf_counter() >= deadline:
            return best, bound
        start, support, size = blended
        # Under a swap that keeps this node's fixings, a plan and its mirror
        # are both in it: a child whose choice's mirror comes first is
        # dropped, its plans' mirrors are in that one's child, or in the
        # last child, where the mirror is not among the support.
        mirrored = [m for m in mirrors if all(fixed.get(m[c]) == v for c, v in fixed.items())]
        children = [{start + j: float(j == s) for j in range(size)} for s in support
                    if not any(m[start + s] < start + s for m in mirrored)]
        children.append({start + s: 0.0 for s in support})
        solved_children = []
        least = math.inf
        # Each child starts from its parent's optimum, not from where its
        # sibling ended: after a sibling proved infeasible there, the toy
        # Mixtral step's next child took 13.4 s (20k iterations), and 5.6 s
        # from its parent's.  Mixtral's full-depth step at 80 GiB: its bounded
        # relaxation and division, 42.8 s -> 32.2 s, to the same plan.
        parent = highs.getBasis()
        for child in children:
            highs.setBasis(parent)
            fix = {**fixed, **child}
            columns = np.fromiter(fix, dtype=np.int32, count=len(fix))
            values = np.fromiter(fix.values(), dtype=float, count=len(fix))
            highs.changeColsBounds(len(columns), columns, values, values)
            status = run(highs)
            solved = status == highspy.HighsModelStatus.kOptimal
            child_x = np.asarray(highs.getSolution().col_value) if solved else None
            child_bound = highs.getInfo().objective_function_value if solved else bound
            highs.changeColsBounds(len(columns), columns, np.zeros(len(columns)),
                                   self.upper[columns])
            if status == highspy.HighsModelStatus.kInfeasible:
                continue
            if child_x is None:
                least = min(least, child_bound)
                continue
            solved_children.append((child_bound, len(solved_children), fix, child_x))
        # The most promising child first: its plan, found early, is what
        # the others are pruned against.
        for child_bound, _, fix, child_x in sorted(solved_children, key=lambda c: c[:2]):
            if best is not None and best[1] - child_bound <= DIVIDE_GAP * abs(best[1]):
                least = min(least, child_bound)
                continue
            found = self._on_support(child_x, memory, budget, deadline)
            if found is not None and (best is None or found[1] < best[1]):
                best = found
            if best is None or best[1] - child_bound > BOUNDED_GAP * abs(best[1]):
                best, child_bound = self._divide(highs, run, held, memory, budget,
                                                 deadline, child_x, child_bound, fix,
                                                 depth - 1, best, mirrors)
            least = min(least, child_bound)
        return best, least

    def _most_held_blend(self, x: np.ndarray, held: np.ndarray):
        """(first column, the choices it blends, size) of the class the LP
        solution `x` blends whose blended choices differ most in the bytes
        any memory row charges them; None where no class is blended."""
        found, widest = None, 0.0
        for cls in sorted(self.class_size):
            start, size = self.offsets[cls], self.class_size[cls]
            support = np.flatnonzero(x[start:start + size] > 1e-6)
            if len(support) < 2:
                continue
            charged = held[:, start + support]
            width = float((charged.max(axis=1) - charged.min(axis=1)).max())
            if found is None or width > widest:
                found, widest = (start, support.tolist(), size), width
        return found

    def _lp_with_rows(self, columns, budget):
        """The HiGHS instance on the LP relaxation, holding these memory
        rows.  Unbounded, it is the instance kept warm across solves.
        Bounded, it is a fresh one, solved cold: from the last optimum's
        basis, where the new rows cut it off, the dual simplex pivoted
        slowly and long.  On Mixtral-8x7B's full-depth step the first
        bounded LP took 7.2 s from the unbounded basis (8.5k iterations,
        0.85 ms each) and 4.1 s cold (16k, 0.26 ms); on its toy-width step
        42 s against 6, and a re-solve under a lower budget, infeasible,
        26 s against 1.9 to prove so.  The division's children
        (`_divide`) start from their parent's basis on the same instance:
        fixing columns keeps it dual feasible."""
        import highspy

        if columns:
            self._warm, self._held_rows = None, 0
        highs = self._relaxation()
        if self._held_rows:
            first = len(self.rows)
            highs.deleteRows(self._held_rows,
                             np.arange(first, first + self._held_rows, dtype=np.int32))
        for cols, values in columns:
            highs.addRow(-highspy.kHighsInf, budget, len(cols), cols.astype(np.int32), values)
        self._held_rows = len(columns)
        return highs

    def _on_support(self, x: np.ndarray, columns, budget, deadline: float):
        """The 0-1 program's plan on the LP solution `x`'s support (RENS):
        each choice `x` makes whole is fixed, and the program decides only
        the few it blends; None where it finds no plan in time.  `columns`
        are the memory rows, as `_columns` gives them.

        The program is built on the columns left open only: the blended
        choices, and the pair variables between choices still possible.
        (Built whole, with the rest fixed by their bounds for HiGHS's
        presolve to remove, each rounding took 0.09 s on Mixtral's forward,
        where pair variables are 48k of its 50k columns.)"""
        from scipy import sparse

        left = deadline - time.perf_counter()
        if left <= 0:
            return None
        open_columns, ones = self._open_on(x)
        matrix, lower, upper = self._base_rows()
        if self._base_csc is None:
            self._base_csc = matrix.tocsc()
        fixed = np.zeros(self.variables)
        fixed[ones] = 1.0
        restricted = _restricted(self._base_csc, lower, upper, open_columns, fixed)
        if restricted is None:
            return None
        sub, row_lower, row_upper = restricted
        position = np.full(self.variables, -1, dtype=np.int64)
        position[open_columns] = np.arange(len(open_columns))
        rows = [sub]
        for cols, values in columns if budget is not None else ():
            kept = position[cols] >= 0
            rows.append(self._matrix([(position[cols[kept]], values[kept], 0, 0)],
                                     len(open_columns)))
            row_lower.append(-np.inf)
            row_upper.append(budget - float(values[~kept] @ fixed[cols[~kept]]))
        n_integer = int(np.searchsorted(open_columns, self.n_choice))
        x_open, status = self._highs_milp(
            self.objective[open_columns], sparse.vstack(rows, format="csr"),
            np.zeros(len(open_columns)), self.upper[open_columns], row_lower, row_upper,
            n_integer, left, True, MIP_GAP, None)
        if x_open is None:
            return None
        point = fixed
        point[open_columns] = x_open
        return self._strategies(point), float(self.objective @ point)

    def _open_on(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the columns RENS leaves open on `x`, sorted; the choice columns
        it fixes at one).  A pair variable stays open where both its
        strategy groups hold a choice still possible."""
        choice = x[:self.n_choice]
        rounded = np.round(choice)
        whole = np.abs(choice - rounded) < 1e-6
        possible = ~whole | (rounded == 1)
        columns = [np.flatnonzero(~whole)]
        for (a, b), (base, row_group, col_group, n_cols) in self.pairs.items():
            start_a, start_b = self.offsets[a], self.offsets[b]
            rows = np.unique(row_group[possible[start_a:start_a + len(row_group)]])
            cols = np.unique(col_group[possible[start_b:start_b + len(col_group)]])
            columns.append((base + rows[:, None] * n_cols + cols[None, :]).ravel())
        return np.concatenate(columns), np.flatnonzero(whole & (rounded == 1))


def _restricted(csc, lower, upper, open_columns: np.ndarray, fixed: np.ndarray):
    """The rows of `csc` over `open_columns` alone, every other column at its
    value in `fixed`: (the rows that still read an open column, as a matrix,
    their lower bounds, their upper bounds); None where a row no open column
    reads is already violated."""
    held = csc @ fixed
    sub = csc[:, open_columns].tocsr()
    row_lower = np.asarray(lower) - held
    row_upper = np.asarray(upper) - held
    used = np.diff(sub.indptr) > 0
    if np.any(row_lower[~used] > 1e-9) or np.any(row_upper[~used] < -1e-9):
        return None
    return sub[used], list(row_lower[used]), list(row_upper[used])


def _quiet_highs():
    """A HiGHS instance that writes nothing.  highspy's `Highs` hooks a
    logging callback in as it is made, and HiGHS prints its banner to the
    process's stdout then, before any option can be set: into the module the
    CLI writes there.  The class it extends, the bindings' own, has every
    method this search calls and prints nothing."""
    import highspy

    highs = getattr(highspy._core, "_Highs", highspy.Highs)()
    highs.setOptionValue("output_flag", False)
    return highs


def _highs_lp(objective, matrix, col_lower, col_upper, row_lower, row_upper):
    """A HiGHS model of min objective . x, row_lower <= matrix x <= row_upper,
    col_lower <= x <= col_upper."""
    import highspy

    csc = matrix.tocsc()
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = csc.shape[1], csc.shape[0]
    lp.col_cost_ = np.asarray(objective, dtype=float)
    lp.col_lower_ = np.asarray(col_lower, dtype=float)
    lp.col_upper_ = np.asarray(col_upper, dtype=float)
    lp.row_lower_ = np.asarray(row_lower, dtype=float)
    lp.row_upper_ = np.asarray(row_upper, dtype=float)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = csc.indptr
    lp.a_matrix_.index_ = csc.indices
    lp.a_matrix_.value_ = csc.data
    return lp


def _distinct(items: list, key=id) -> tuple[list, list[int]]:
    """The distinct items (by `key`; layouts are interned, so by identity)
    and each item's position among them."""
    index: dict = {}
    found = []
    positions = []
    for item in items:
        k = key(item)
        position = index.get(k)
        if position is None:
            position = index[k] = len(found)
            found.append(item)
        positions.append(position)
    return found, positions


def _group_image(group: np.ndarray, mirror: np.ndarray) -> np.ndarray | None:
    """Per group of strategies (`group`: each strategy's), the group its
    strategies' mirrors are in; None where they are in several."""
    image = np.full(group.max() + 1, -1, dtype=np.int64)
    mirrored = group[mirror]
    for g, m in zip(group, mirrored):
        if image[g] < 0:
            image[g] = m
        elif image[g] != m:
            return None
    return image


def _dense(cols: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    row = np.zeros(n)
    row[cols] = values
    return row


def _same_under(vector: np.ndarray, permutation: np.ndarray) -> bool:
    """Whether `vector` is unchanged by `permutation`, to a billionth of its largest entry."""
    scale = float(np.max(np.abs(vector), initial=0.0))
    return bool(np.all(np.abs(vector[permutation] - vector) <= 1e-9 * scale))
