"""Collective rewards, topologies, role exchange and MoE selection."""

import pytest
import torch

from cory.multi.collective import collective_rewards
from cory.multi.roles import RoleSchedule
from cory.multi.system_answer import gather_selected, select_by_value
from cory.multi.topology import build_topology


@pytest.mark.parametrize("lam, expected", [
    (1.0, [[4.0, 7.0], [4.0, 7.0]]),
    (0.0, [[1.0, 2.0], [3.0, 5.0]]),
    (-1.0, [[-2.0, -3.0], [2.0, 3.0]]),
])
def test_collective_reward_two_agents(lam, expected):
    rewards = torch.tensor([[1.0, 2.0], [3.0, 5.0]])
    assert collective_rewards(rewards, lam).tolist() == expected


def test_collective_reward_normalised_before_mixing():
    rewards = torch.tensor([[1.0, 2.0], [3.0, 5.0]])  # each row z-scores to [-1, 1]
    mixed = collective_rewards(rewards, 1.0, normalize=True)
    assert mixed.tolist() == [pytest.approx([-2.0, 2.0]), pytest.approx([-2.0, 2.0])]
    zero_sum = collective_rewards(rewards, -1.0, normalize=True)
    assert zero_sum.abs().max().item() == pytest.approx(0.0, abs=1e-6)


def test_collective_reward_sums_over_all_other_agents():
    mixed = collective_rewards(torch.tensor([[1.0], [2.0], [4.0]]), 0.5)
    assert mixed.flatten().tolist() == pytest.approx([4.0, 4.5, 5.5])


def test_topology_visibility():
    assert build_topology("single", 1).parents == ((),)
    assert build_topology("pioneer_observer", 2).parents == ((), (0,))
    assert build_topology("chain", 4).parents == ((), (0,), (1,), (2,))
    assert build_topology("mesh", 3).parents == ((), (0,), (0, 1))
    assert build_topology("star", 4).parents == ((), (0,), (0,), (0,))
    assert build_topology("independent", 3).parents == ((), (), ())


def test_levels_order_roles_after_their_parents():
    assert build_topology("chain", 3).levels() == [[0], [1], [2]]
    assert build_topology("star", 4).levels() == [[0], [1, 2, 3]]
    assert build_topology("independent", 2).levels() == [[0, 1]]


def test_random_topology_is_acyclic_and_reproducible():
    graphs = [build_topology("random", 6, edge_prob=0.5, seed=s) for s in range(20)]
    for graph in graphs:
        for role, parents in enumerate(graph.parents):
            assert all(p < role for p in parents)
        assert sum(len(level) for level in graph.levels()) == 6
    assert build_topology("random", 6, seed=3) == build_topology("random", 6, seed=3)
    assert len({g.parents for g in graphs}) > 1


def test_role_names():
    assert build_topology("pioneer_observer", 2).role_names() == ["pioneer", "observer"]
    assert build_topology("single", 1).role_names() == ["policy"]
    assert build_topology("chain", 3).role_names() == ["role0", "role1", "role2"]


def test_roles_swap_exactly_every_k_iterations():
    schedule = RoleSchedule(2, swap_every=5)
    mappings = [schedule.agent_for_role(step) for step in range(12)]
    assert mappings[:5] == [[0, 1]] * 5
    assert mappings[5:10] == [[1, 0]] * 5
    assert mappings[10:] == [[0, 1]] * 2


def test_roles_rotate_for_n_agents_and_can_stay_fixed():
    schedule = RoleSchedule(3, swap_every=2)
    assert [schedule.agent_for_role(s) for s in (0, 2, 4, 6)] == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]
    assert RoleSchedule(2, None).agent_for_role(100) == [0, 1]


def test_moe_keeps_the_higher_value_answer():
    values = torch.tensor([[0.1, 0.9, -1.0], [0.5, 0.2, -0.5]])
    winners = select_by_value(values)
    assert winners.tolist() == [1, 0, 1]
    rewards = torch.tensor([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]])
    assert gather_selected(rewards, winners).tolist() == [10.0, 2.0, 30.0]


def test_every_topology_keeps_the_facts_the_config_checks_read():
    import typing

    from cory.config.schema import TopologyConfig
    from cory.config.topologies import DEFAULT_AGENTS, TOPOLOGIES

    names = typing.get_args(typing.get_type_hints(TopologyConfig)["name"])
    assert set(names) == set(TOPOLOGIES)
    for name, facts in TOPOLOGIES.items():
        topology = build_topology(name, facts.fixed_agents or DEFAULT_AGENTS, edge_prob=0.5, seed=0)
        if facts.fixed_agents is not None:
            assert topology.n_roles == facts.fixed_agents, name
        if facts.edges_within_round is not None:
            assert bool(topology.edges()) == facts.edges_within_round, name
