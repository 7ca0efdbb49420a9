"""A deterministic MILP: HiGHS through its own binding (highspy), its work bounded by counts
(branch-and-bound nodes, interrupt checks) rather than by seconds, so that the same instance gets
the same answer on any machine and under any load.

Why not scipy.optimize.milp, which the LP references use: it bounds work by a wall-clock
`time_limit` or a node limit, and the root node, where most of the time went, obeys only the
clock. Under the 0.25 s cap that stage plans had, 27 of 101 feasible MILPs recorded on five sweep
runs were given up as infeasible, and which ones depended on the machine's load. Its bundled HiGHS
(1.12 in scipy 1.17) also took twice as long on those MILPs as highspy's with the same options.
highspy takes HiGHS' own options (one thread, a node limit, no RINS / RENS sub-MIPs) and its
callbacks (the interrupt checks; docs/routing.md, "Stage plans without a clock").
"""

from __future__ import annotations

import os
import sys

import highspy
import numpy as np
from scipy.sparse import csr_matrix

_quiet = False


def _new_highs() -> highspy.Highs:
    """A silent solver. HiGHS prints a banner on standard output when a process makes its first
    solver, before any option can be set; that would corrupt `--json` output, so the first is
    made with file descriptor 1 pointed at /dev/null."""
    global _quiet
    if _quiet:
        h = highspy.Highs()
    else:
        sys.stdout.flush()
        saved, null = os.dup(1), os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, 1)
            h = highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            os.close(null)
        _quiet = True
    h.setOptionValue("output_flag", False)
    return h


def solve_milp(
    objective: np.ndarray,
    matrix: csr_matrix,
    row_lo: list[float],
    row_hi: list[float],
    col_hi: np.ndarray,
    integral: np.ndarray,
    max_nodes: int,
    rel_gap: float,
    start: np.ndarray | None = None,
    max_checks: int | None = None,
) -> np.ndarray | None:
    """Minimise `objective @ x` with `row_lo <= matrix @ x <= row_hi`, `0 <= x <= col_hi` and the
    `integral` columns integers: the best x found within `max_nodes` nodes (the optimum to within
    `rel_gap` when HiGHS proves one), or None when none was found (infeasible, or none within the limits).
    A feasible `start` is the first incumbent, so the answer is never worse than it. `max_checks`
    bounds the work: HiGHS asks its interrupt callback at points of the search that do not depend
    on the clock (the root's cut and heuristic loops included), and the solve stops at that many.
    """
    h = _new_highs()
    for name, value in (
        ("threads", 1),
        ("mip_max_nodes", int(max_nodes)),
        ("mip_rel_gap", float(rel_gap)),
        ("mip_heuristic_run_rins", False),
        ("mip_heuristic_run_rens", False),
    ):
        h.setOptionValue(name, value)
    n = len(objective)
    csc = matrix.tocsc()
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n, csc.shape[0]
    lp.col_cost_ = np.asarray(objective, dtype=float)
    lp.col_lower_ = np.zeros(n)
    lp.col_upper_ = np.asarray(col_hi, dtype=float)
    lp.row_lower_ = np.asarray(row_lo, dtype=float)
    lp.row_upper_ = np.asarray(row_hi, dtype=float)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = csc.indptr
    lp.a_matrix_.index_ = csc.indices
    lp.a_matrix_.value_ = csc.data
    kinds = (highspy.HighsVarType.kContinuous, highspy.HighsVarType.kInteger)
    lp.integrality_ = [kinds[bool(v)] for v in integral]
    h.passModel(lp)
    if start is not None:
        first = highspy.HighsSolution()
        first.col_value = np.asarray(start, dtype=float)
        first.value_valid = True
        h.setSolution(first)
    if max_checks is not None:
        checks = [0]

        def count(event) -> None:
            checks[0] += 1
            if checks[0] > max_checks:
                event.interrupt()

        h.cbMipInterrupt.subscribe(count)
    h.run()
    if h.getModelStatus() == highspy.HighsModelStatus.kInfeasible:
        return None
    if h.getInfo().primal_solution_status != 2:  # (kSolutionStatusFeasible: a solution was found)
        return None
    return np.asarray(h.getSolution().col_value, dtype=float)


__all__ = ["solve_milp"]
