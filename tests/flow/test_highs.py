"""The deterministic MILP (swarm/flow/highs.py): exact on small problems, bounded by nodes not
seconds, silent on standard output, and the same stage plan every time."""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest
from scipy.sparse import csr_matrix

from swarm.flow.highs import solve_milp
from swarm.flow.stage_assignment import plan_stage

# max 5x + 4y + 3z with 2x + 3y + z <= 5, 4x + y + 2z <= 11, 3x + 4y + 2z <= 8, integers: x=2, z=1
MATRIX = csr_matrix(np.array([[2.0, 3.0, 1.0], [4.0, 1.0, 2.0], [3.0, 4.0, 2.0]]))
OBJECTIVE = np.array([-5.0, -4.0, -3.0])
HI = np.full(3, 10.0)
INTEGRAL = np.ones(3, dtype=bool)


def test_an_integer_program_is_solved_exactly() -> None:
    x = solve_milp(OBJECTIVE, MATRIX, [-np.inf] * 3, [5.0, 11.0, 8.0], HI, INTEGRAL, 300, 0.0)
    assert x is not None
    assert x == pytest.approx([2.0, 0.0, 1.0])


def test_an_infeasible_program_gives_none() -> None:
    x = solve_milp(OBJECTIVE, MATRIX, [6.0, -np.inf, -np.inf], [5.0, 11.0, 8.0], HI, INTEGRAL, 300, 0.0)
    assert x is None


def test_a_start_is_never_beaten_by_a_worse_answer() -> None:
    start = np.array([2.0, 0.0, 1.0])  # (the optimum: a search of no nodes still returns it)
    x = solve_milp(OBJECTIVE, MATRIX, [-np.inf] * 3, [5.0, 11.0, 8.0], HI, INTEGRAL, 0, 0.0, start)
    assert x is not None
    assert float(OBJECTIVE @ x) <= float(OBJECTIVE @ start) + 1e-9


def test_the_solver_prints_nothing_on_standard_output() -> None:
    code = (
        "import numpy as np; from scipy.sparse import csr_matrix; from swarm.flow.highs import solve_milp;"
        "x = solve_milp(np.array([1.0]), csr_matrix(np.ones((1, 1))), [1.0], [2.0], np.array([5.0]),"
        " np.ones(1, dtype=bool), 10, 0.0); print('x', x[0])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "x 1.0\n"  # (no banner: `--json` output stays JSON)


def _wide_stage(seed: int):
    """8 senders, 12 stage peers, 8 receivers, every pair linked, flows on four of the peers."""
    rng = random.Random(seed)
    senders = [f"a{i}" for i in range(8)]
    mids = [f"b{i}" for i in range(12)]
    takers = [f"c{i}" for i in range(8)]
    cost_in = {(a, b): rng.uniform(0.1, 3.0) for a in senders for b in mids}
    cost_out = {(b, c): rng.uniform(0.1, 3.0) for b in mids for c in takers}
    arrival = {a: rng.uniform(0.0, 2.0) for a in senders}
    onward = {c: rng.uniform(0.0, 2.0) for c in takers}
    flows_in = {(a, mids[i % 4]): 1.0 for i, a in enumerate(senders)}
    flows_out = {(mids[i % 4], c): 1.0 for i, c in enumerate(takers)}
    room = {b: rng.choice([1.0, 2.0, 3.0]) for b in mids}
    for b in mids[:4]:
        room[b] = 3.0
    return flows_in, flows_out, arrival, cost_in, cost_out, onward, room


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_stage_plan_is_the_same_every_time(seed: int) -> None:
    stage = _wide_stage(seed)
    first = plan_stage(*stage, 0.01)
    assert first is not None  # (four loaded peers, eight idle: there is a better plan)
    for _ in range(2):
        assert plan_stage(*stage, 0.01) == first


def test_a_solve_cut_short_by_its_checks_gives_the_same_answer_every_time() -> None:
    rng = np.random.default_rng(7)  # (a 40-item, 6-constraint knapsack: more than a few checks)
    weights = rng.uniform(1.0, 10.0, size=(6, 40))
    values = -rng.uniform(1.0, 10.0, size=40)
    args = (values, csr_matrix(weights), [-np.inf] * 6, [40.0] * 6, np.ones(40), np.ones(40, dtype=bool))
    answers = [solve_milp(*args, 10**6, 0.0, None, 5) for _ in range(3)]
    assert answers[0] is not None
    assert all(np.array_equal(answers[0], a) for a in answers[1:])
