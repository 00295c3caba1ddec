"""The server-side assignors: every partition to exactly one subscriber, balanced, and (uniform) sticky."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.coordinator.assignor import GroupSpec, MemberSpec, RangeAssignor, UniformAssignor
from broker.coordinator.assignor.spec import GroupAssignment

TOPICS = [uuid.UUID(int=i + 1) for i in range(4)]


def spec(partitions: dict[uuid.UUID, int], members: dict[str, tuple[set[uuid.UUID], dict[uuid.UUID, set[int]]]],
         ) -> GroupSpec:
    return GroupSpec(
        {m: MemberSpec(None, frozenset(subs), {t: frozenset(ps) for t, ps in current.items()})
         for m, (subs, current) in members.items()},
        partitions,
    )


def check_complete(group: GroupSpec, result: GroupAssignment) -> None:
    """Every partition of every subscribed topic goes to exactly one member subscribed to it."""
    owners: dict[tuple[uuid.UUID, int], str] = {}
    for member, assignment in result.items():
        for topic, partitions in assignment.items():
            assert topic in group.members[member].subscribed_topic_ids
            for p in partitions:
                assert 0 <= p < group.partitions[topic]
                assert (topic, p) not in owners, f"{topic}-{p} given twice"
                owners[(topic, p)] = member
    subscribed = {t for m in group.members.values() for t in m.subscribed_topic_ids if t in group.partitions}
    assert set(owners) == {(t, p) for t in subscribed for p in range(group.partitions[t])}


def check_balanced(group: GroupSpec, result: GroupAssignment) -> None:
    """No partition could move to another subscriber of its topic holding two fewer."""
    count = {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}
    for member, assignment in result.items():
        for topic in assignment:
            for other, other_spec in group.members.items():
                if topic in other_spec.subscribed_topic_ids:
                    assert count[member] - count[other] <= 1, (member, other, count)


groups = st.builds(
    lambda parts, subs, seed: (parts, subs, seed),
    st.lists(st.integers(1, 12), min_size=1, max_size=4),
    st.lists(st.sets(st.integers(0, 3), min_size=1), min_size=1, max_size=8),
    st.randoms(),
)


def build(parts: list[int], subs: list[set[int]], rnd: object) -> GroupSpec:
    partitions = {TOPICS[i]: n for i, n in enumerate(parts)}
    members: dict[str, tuple[set[uuid.UUID], dict[uuid.UUID, set[int]]]] = {}
    for i, s in enumerate(subs):
        topics = {TOPICS[t] for t in s if t < len(parts)} or {TOPICS[0]}
        members[f"m{i}"] = (topics, {})
    return spec(partitions, members)


@settings(max_examples=200, deadline=None)
@given(groups)
def test_uniform_is_complete_and_balanced_from_scratch(case: tuple[list[int], list[set[int]], object]) -> None:
    group = build(*case)
    result = UniformAssignor().assign(group)
    check_complete(group, result)
    check_balanced(group, result)


@settings(max_examples=200, deadline=None)
@given(groups, st.integers(0, 7))
def test_uniform_stays_complete_and_balanced_from_any_previous_target(
        case: tuple[list[int], list[set[int]], object], leaving: int) -> None:
    group = build(*case)
    first = UniformAssignor().assign(group)
    # A member leaves and the previous targets become the starting point.
    members = {m: (set(s.subscribed_topic_ids), {t: set(ps) for t, ps in first[m].items()})
               for m, s in group.members.items() if m != f"m{leaving}" or len(group.members) == 1}
    again = spec(dict(group.partitions), members)
    result = UniformAssignor().assign(again)
    check_complete(again, result)
    check_balanced(again, result)


def test_uniform_homogeneous_is_sticky() -> None:
    t = TOPICS[0]
    group = spec({t: 6}, {"a": ({t}, {t: {0, 1, 2}}), "b": ({t}, {t: {3, 4, 5}}), "c": ({t}, {})})
    result = UniformAssignor().assign(group)
    assert sorted(len(a[t]) for a in result.values()) == [2, 2, 2]
    assert result["a"][t] <= {0, 1, 2} and result["b"][t] <= {3, 4, 5}


def test_uniform_gives_the_extra_partition_to_whoever_already_holds_it() -> None:
    t = TOPICS[0]
    group = spec({t: 5}, {"a": ({t}, {t: {0, 1}}), "b": ({t}, {t: {2, 3, 4}})})
    result = UniformAssignor().assign(group)
    assert result["a"][t] == {0, 1} and result["b"][t] == {2, 3, 4}, "nothing moves"


def test_uniform_heterogeneous_keeps_what_it_may() -> None:
    t, u = TOPICS[0], TOPICS[1]
    group = spec({t: 4, u: 2}, {"a": ({t, u}, {t: {0, 1}, u: {0, 1}}), "b": ({t}, {t: {2, 3}})})
    result = UniformAssignor().assign(group)
    check_complete(group, result)
    check_balanced(group, result)
    # a held 4 and b 2: one partition of t moves to b (3 and 3); everything else stays.
    assert result["a"][u] == {0, 1} and len(result["a"][t]) == 1 and result["a"][t] < {0, 1}
    assert result["b"][t] > {2, 3}


@settings(max_examples=200, deadline=None)
@given(groups)
def test_range_is_complete_and_balanced_per_topic(case: tuple[list[int], list[set[int]], object]) -> None:
    group = build(*case)
    result = RangeAssignor().assign(group)
    check_complete(group, result)
    for topic, _count in group.partitions.items():
        got = [len(a.get(topic, ())) for m, a in result.items() if topic in group.members[m].subscribed_topic_ids]
        if got:
            assert max(got) - min(got) <= 1


def test_range_gives_contiguous_ranges_in_member_order() -> None:
    t = TOPICS[0]
    group = spec({t: 7}, {"b": ({t}, {}), "a": ({t}, {}), "c": ({t}, {})})
    result = RangeAssignor().assign(group)
    assert result["a"][t] == {0, 1, 2} and result["b"][t] == {3, 4} and result["c"][t] == {5, 6}
