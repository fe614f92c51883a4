"""Sharding's two hashes and its Leases, through the official client against the in-process fake API server
(tests/fakekube: real HTTP, 409 on stale resourceVersions, label selectors on list)."""

from __future__ import annotations

from collections import Counter

import pytest

from collector.clock import VirtualClock
from collector.samples import ReplicaSample, TargetInfo
from collector.scrape import CollectResult, ScrapeResult
from kvpilot.runtime.lease import Leases, _epoch
from kvpilot.runtime.shards import OwnedCollect, ShardCoordinator, assign, owned_targets, shard_of
from tests.fakekube import FakeKube

DEPLOYMENTS = [f"ns{i % 7}/model-{i}" for i in range(2000)]


def _coordinator(kube: FakeKube, clock: VirtualClock, who: str, shards: int = 3) -> ShardCoordinator:
    api = Leases(kube.api_client())
    return ShardCoordinator(
        api,
        lease_name="kvpilot",
        namespace="kv",
        identity=who,
        address=f"{who}.kvpilot:9090",
        shards=shards,
        clock=clock,
        lease_duration_s=15,
    )


def _rounds(coordinators: list[ShardCoordinator], n: int = 1) -> None:
    for _ in range(n):
        for c in coordinators:
            c.round()


def _partition(coordinators: list[ShardCoordinator], shards: int = 3) -> dict[int, list[str]]:
    held: dict[int, list[str]] = {i: [] for i in range(shards)}
    for c in coordinators:
        for i in c.owned:
            held[i].append(c.identity)
    return held


def test_shard_of_is_stable_and_spreads() -> None:
    # pinned values: the hash must not change between processes or versions, or a rolling upgrade reshuffles
    assert (shard_of("llm/chat", 8), shard_of("llm/embed", 8), shard_of("team-a/llama-70b", 8)) == (3, 5, 3)
    counts = Counter(shard_of(d, 8) for d in DEPLOYMENTS)
    assert min(counts.values()) > 0.8 * len(DEPLOYMENTS) / 8  # within 20 % of an even split
    with pytest.raises(ValueError, match=r"sharding\.shards must be >= 1"):
        shard_of("llm/chat", 0)


@pytest.mark.parametrize("before", [3, 4, 8, 16])
def test_adding_a_shard_moves_only_what_the_new_shard_takes(before: int) -> None:
    # rendezvous hashing: S -> S+1 moves a deployment only onto the new shard, about 1/(S+1) of them
    moved = [d for d in DEPLOYMENTS if shard_of(d, before) != shard_of(d, before + 1)]
    assert all(shard_of(d, before + 1) == before for d in moved)
    assert len(moved) < 1.3 * len(DEPLOYMENTS) / (before + 1)


@pytest.mark.parametrize(
    ("members", "held", "expected_load"),
    [
        # a fresh start: every member gets its fair share
        (["a", "b", "c"], {}, {"a": 1, "b": 1, "c": 1}),
        # an instance died (c held shard 2, not live any more): only that shard moves
        (["a", "b"], {0: "a", 1: "b", 2: "c"}, {"a": 2, "b": 1}),
        # one joined: the member over its share gives one up; the others keep theirs
        (["a", "b", "c"], {0: "a", 1: "a", 2: "b"}, {"a": 1, "b": 1, "c": 1}),
        # more shards than members: at most ceil(S/N) each
        (["a", "b", "c"], {}, {"a": 3, "b": 3, "c": 2}),
    ],
)
def test_assign_bounded_and_sticky(members: list[str], held: dict[int, str], expected_load: dict[str, int]) -> None:
    shards = max(3, sum(expected_load.values()))
    result = assign(shards, members, held)
    assert sorted(result) == list(range(shards))
    assert sorted(Counter(result.values()).values()) == sorted(expected_load.values())
    for shard, holder in held.items():  # a live holder within its share keeps its shard
        if holder in members and Counter(held.values())[holder] <= -(-shards // len(members)):
            assert result[shard] == holder
    assert assign(shards, list(reversed(members)), held) == result  # same answer on every instance


def test_three_instances_each_hold_one_shard_and_a_dead_ones_is_taken_over_within_a_lease(
    kube: FakeKube, clock: VirtualClock
) -> None:
    a, b, c = (_coordinator(kube, clock, who) for who in "abc")
    _rounds([a, b, c], 3)  # members register, then shards are taken, the first to arrive hands over the surplus
    clock.advance(5)
    _rounds([a, b, c], 2)
    held = _partition([a, b, c])
    assert all(len(holders) == 1 for holders in held.values()), held  # every shard held, by exactly one
    assert sorted(len(x.owned) for x in (a, b, c)) == [1, 1, 1]
    for d in DEPLOYMENTS[:200]:  # every deployment owned by exactly one instance; routes agree
        assert sum(x.owns(d) for x in (a, b, c)) == 1
        owner = next(x for x in (a, b, c) if x.owns(d))
        for x in (a, b, c):
            route = x.route(d)
            assert route.local == (x is owner)
            assert (route.owner, route.address) == (owner.identity, owner.address)
    lease = kube.get("leases", f"kvpilot-shard-{next(iter(c.owned))}", namespace="kv")
    assert lease["metadata"]["annotations"]["kvpilot.io/grpc-address"] == "c.kvpilot:9090"
    lost = next(iter(c.owned))
    transitions = kube.get("leases", f"kvpilot-shard-{lost}", namespace="kv")["spec"]["leaseTransitions"]
    died_at = clock.now()  # c crashes after this round: it renews nothing more and releases nothing
    while not (a.owned | b.owned) >= {0, 1, 2}:
        step = min(a.next_wake_s(5), b.next_wake_s(5))
        clock.advance(step)
        _rounds([a, b])
        assert clock.now() - died_at <= 15 + 0.1, "not taken over within one lease period"
    assert clock.now() - died_at > 15  # not before c's Lease expired
    assert sorted(len(x.owned) for x in (a, b)) == [1, 2]
    assert kube.get("leases", f"kvpilot-shard-{lost}", namespace="kv")["spec"]["leaseTransitions"] == transitions + 1


def test_a_joining_instance_gets_its_share_without_a_gap_elsewhere(kube: FakeKube, clock: VirtualClock) -> None:
    a, b = _coordinator(kube, clock, "a"), _coordinator(kube, clock, "b")
    _rounds([a, b], 3)
    assert sorted(len(x.owned) for x in (a, b)) == [1, 2]
    before = {i: h for i, h in _partition([a, b]).items()}
    c = _coordinator(kube, clock, "c")
    for _ in range(4):
        clock.advance(5)
        _rounds([a, b, c])
        assert all(len(h) <= 1 for h in _partition([a, b, c]).values())  # never two holders
    after = _partition([a, b, c])
    assert sorted(len(x.owned) for x in (a, b, c)) == [1, 1, 1]
    assert sum(before[i] != after[i] for i in range(3)) == 1  # only the surplus shard moved


def test_clean_shutdown_hands_shards_over_at_once(kube: FakeKube, clock: VirtualClock) -> None:
    a, b = _coordinator(kube, clock, "a"), _coordinator(kube, clock, "b")
    _rounds([a, b], 3)
    released_at = clock.now()
    a.release()
    assert a.owned == frozenset()
    while b.owned != frozenset({0, 1, 2}):  # a's member Lease is released too: b is the only member, takes everything
        clock.advance(b.next_wake_s(5))
        b.round()
        # not a lease period: b lists the group at least every half lease, and takes what no one holds at once
        assert clock.now() - released_at <= 15 / 2 + 5, "released shards not taken within half a lease and a round"


def _settled(kube: FakeKube, clock: VirtualClock, who: str = "abc") -> list[ShardCoordinator]:
    coordinators = [_coordinator(kube, clock, w) for w in who]
    _rounds(coordinators, 3)  # members register, then shards are taken, the first to arrive hands over the surplus
    clock.advance(5)
    _rounds(coordinators, 2)
    return coordinators


def test_steady_rounds_write_each_held_shard_and_list_the_group_every_half_lease(
    kube: FakeKube, clock: VirtualClock
) -> None:
    # between lists a round is one write per shard held, from the Lease its previous write returned (no read); the
    # member Lease waits while a shard Lease says we are alive; the group is listed at least every half lease (7.5 s)
    a, b, c = _settled(kube, clock)
    assert sorted(len(x.owned) for x in (a, b, c)) == [1, 1, 1]
    shard = next(iter(a.owned))
    before = _partition([a, b, c])
    lists = 0
    listed = a._api.list_namespaced_lease

    def counted(*args: object, **kwargs: object) -> object:
        nonlocal lists
        lists += 1
        return listed(*args, **kwargs)

    a._api.list_namespaced_lease = counted
    start = len(kube.requests)
    for _ in range(6):  # 30 s of 5 s rounds: two lease periods
        clock.advance(5)
        _rounds([a, b, c])
    assert 2 <= lists <= 3  # was one a round
    leases = "/apis/coordination.k8s.io/v1/namespaces/kv/leases"
    writes = [path for method, path in kube.requests[start:] if method == "PUT"]
    assert writes.count(f"{leases}/kvpilot-shard-{shard}") == 6  # renewed every round
    assert f"{leases}/kvpilot-member-a" not in writes
    assert not [path for method, path in kube.requests[start:] if method == "GET" and path != leases]  # no reads
    renewed = kube.get("leases", f"kvpilot-shard-{shard}", namespace="kv")["spec"]
    assert (renewed["holderIdentity"], _epoch(renewed["renewTime"])) == ("a", clock.now())
    assert _partition([a, b, c]) == before  # a lapsed member Lease is no death while its holder renews a shard


def test_holders_whose_member_leases_lapsed_still_count_when_an_instance_joins(
    kube: FakeKube, clock: VirtualClock
) -> None:
    # the fair share counts the holders of live shard Leases as members: with a and b seen as alive, c's arrival
    # makes the share 1 and the holder of two hands one over; counting member Leases alone it would stay 2
    a, b = _settled(kube, clock, "ab")
    for _ in range(4):  # 20 s: both member Leases (15 s) lapse while their shard Leases are renewed
        clock.advance(5)
        _rounds([a, b])
    member = kube.get("leases", "kvpilot-member-a", namespace="kv")["spec"]
    assert clock.now() - _epoch(member["renewTime"]) > 15
    c = _coordinator(kube, clock, "c")
    for _ in range(4):
        clock.advance(5)
        _rounds([a, b, c])
        assert all(len(h) <= 1 for h in _partition([a, b, c]).values())  # never two holders
    assert sorted(len(x.owned) for x in (a, b, c)) == [1, 1, 1]


def test_an_instance_that_loses_its_last_shard_renews_its_membership_at_once(
    kube: FakeKube, clock: VirtualClock
) -> None:
    # a renewal written from our last write's answer carries its resourceVersion: a Lease taken meanwhile answers 409,
    # the shard is given up (not stolen back), the member Lease renewed in the same round, and the next round lists
    a, b, c = _settled(kube, clock)
    for _ in range(4):
        clock.advance(5)
        _rounds([a, b, c])
    listed = a._api.list_namespaced_lease
    lists: list[float] = []
    a._api.list_namespaced_lease = lambda *args, **kwargs: lists.append(clock.now()) or listed(*args, **kwargs)
    clock.advance(8)
    _rounds([a, b, c])  # listed: the next list is due in half a lease
    shard = next(iter(a.owned))
    kube.patch("leases", f"kvpilot-shard-{shard}", {"spec": {"holderIdentity": "x"}}, namespace="kv")
    clock.advance(1)
    a.round()
    assert lists == [clock.now() - 1]  # this round wrote from its last write's answer, without a list
    assert a.owned == frozenset()
    assert kube.get("leases", f"kvpilot-shard-{shard}", namespace="kv")["spec"]["holderIdentity"] == "x"
    member = kube.get("leases", "kvpilot-member-a", namespace="kv")["spec"]
    assert (member["holderIdentity"], _epoch(member["renewTime"])) == ("a", clock.now())
    clock.advance(0.5)
    a.round()
    assert lists[-1] == clock.now()  # something to settle: listed at once, not half a lease later


def test_a_lease_written_after_the_list_is_not_overwritten_from_it(kube: FakeKube, clock: VirtualClock) -> None:
    # renewing from the list keeps client-go's guarantee: the write carries the listed resourceVersion, so a
    # Lease changed in between (here: taken by another writer) answers 409 and the shard is given up, not stolen back
    a, b, c = (_coordinator(kube, clock, who) for who in "abc")
    _rounds([a, b, c], 3)
    clock.advance(5)
    _rounds([a, b, c])
    shard = next(iter(a.owned))
    api = a._api
    listed = api.list_namespaced_lease

    def list_then_taken(*args: object, **kwargs: object) -> object:
        answer = listed(*args, **kwargs)
        kube.patch("leases", f"kvpilot-shard-{shard}", {"spec": {"holderIdentity": "x"}}, namespace="kv")
        return answer

    api.list_namespaced_lease = list_then_taken
    clock.advance(8)  # a list is due: half a lease (7.5 s) since the last one
    a.round()
    assert shard not in a.owned
    assert kube.get("leases", f"kvpilot-shard-{shard}", namespace="kv")["spec"]["holderIdentity"] == "x"


def _engine(deployment: str, pod: str, node: str) -> TargetInfo:
    return TargetInfo(url=f"http://{pod}:8000/metrics", namespace="llm", deployment=deployment, pod=pod, node=node)


def _mine(deployments: set[str]) -> ShardCoordinator:
    """A coordinator that owns exactly the shards of ``deployments`` (no API needed for the filters)."""
    c = ShardCoordinator(
        None, lease_name="k", namespace="kv", identity="me", address="", shards=16, clock=VirtualClock()
    )
    c.owned = frozenset(shard_of(d, 16) for d in deployments)
    return c


def test_targets_filtered_by_deployment_and_gpus_follow_their_nodes() -> None:
    targets = [
        _engine("chat", "chat-0", "n0"),
        _engine("embed", "embed-0", "n1"),
        _engine("chat", "chat-1", "n1"),  # n1 is shared by two deployments
        TargetInfo(url="http://n0:9400/metrics", kind="gpu", node="n0"),
        TargetInfo(url="http://n1:9400/metrics", kind="gpu", node="n1"),
        TargetInfo(url="http://n2:9400/metrics", kind="gpu", node="n2"),  # no replica: goes by its node's hash
    ]
    chat = shard_of("llm/chat", 16)
    embed = next(d for d in (f"llm/embed-{i}" for i in range(100)) if shard_of(d, 16) != chat)
    targets[1] = _engine(embed.split("/")[1], "embed-0", "n1")
    mine = _mine({"llm/chat"})
    kept = owned_targets(targets, mine)
    assert {t.url for t in kept if t.kind == "engine"} == {"http://chat-0:8000/metrics", "http://chat-1:8000/metrics"}
    assert {t.node for t in kept if t.kind == "gpu"} >= {"n0", "n1"}
    other = _mine({embed})
    assert {t.node for t in owned_targets(targets, other) if t.kind == "gpu"} >= {"n1"}
    n2_owners = [c for c in (mine, other, _mine(set())) if any(t.node == "n2" for t in owned_targets(targets, c))]
    assert all(shard_of("node/n2", 16) in c.owned for c in n2_owners)


async def test_owned_collect_cuts_a_whole_fleet_answer_to_our_replicas() -> None:
    # the PromQL source returns every replica whatever targets it is given: the wrapper keeps ours
    chat = "llm/chat"
    other = next(f"llm/x{i}" for i in range(100) if shard_of(f"llm/x{i}", 16) != shard_of(chat, 16))

    def sample(key: str, pod: str) -> ReplicaSample:
        ns, name = key.split("/")
        return ReplicaSample(
            namespace=ns, deployment=name, replica=pod, node="n0", engine="vllm", model=None, timestamp=1
        )

    page = TargetInfo(url="promql://vllm/ray-head", deployment="ray")  # one page, two deployments' replicas
    lonely = TargetInfo(url="promql://vllm/x", deployment=other.split("/")[1], namespace="llm")

    class Whole:
        async def collect_once(self, targets: object) -> CollectResult:
            both = (sample(chat, "c-0"), sample(other, "x-0"))
            return CollectResult(1, (ScrapeResult(page, True, 1, 0, replicas=both), ScrapeResult(lonely, True, 1, 0)))

    result = await OwnedCollect(Whole(), _mine({chat})).collect_once([])
    assert [s.deployment_key for s in result.replicas] == [chat]
    assert [r.target.url for r in result.results] == ["promql://vllm/ray-head"]


def test_shards_whose_rounds_stop_are_given_up_as_their_leases_expire(kube: FakeKube, clock: VirtualClock) -> None:
    # A round blocked on an API server that stopped answering: the shards it held stay held only while their last
    # renewal is younger than its renew deadline, so the instance stops deciding for them before others may take them.
    a = _coordinator(kube, clock, "a")
    _rounds([a], 2)
    assert a.owned == {0, 1, 2}
    assert a.leader
    assert a.owns(DEPLOYMENTS[0])
    clock.advance(12.4)
    assert a.owned == {0, 1, 2}
    clock.advance(0.2)  # no round since the renewal 12.6 s ago: past its deadline (12.5 s of the 15 s lease)
    assert a.owned == frozenset()
    assert not a.leader
    assert not a.owns(DEPLOYMENTS[0])
    assert a.held().owned == frozenset()


async def test_a_gpu_page_without_a_node_is_kept_by_exactly_one_instance() -> None:
    # dcgm-exporter without NODE_NAME: its GPUs have no node, and neither have replicas whose series carry no node
    # label. Before, a replica without a node put "" among the nodes read, so no instance kept such a GPU page.
    def sample(key: str, pod: str) -> ReplicaSample:
        ns, name = key.split("/")
        return ReplicaSample(
            namespace=ns, deployment=name, replica=pod, node="", engine="vllm", model=None, timestamp=1
        )

    engine = TargetInfo(url="promql://vllm/10.0.0.1:8000", deployment="chat", namespace="llm")
    gpu = TargetInfo(url="promql://dcgm/10.0.0.9:9400", kind="gpu")

    class Whole:
        async def collect_once(self, targets: object) -> CollectResult:
            replicas = (sample("llm/chat", "chat-0"),)
            return CollectResult(
                1, (ScrapeResult(engine, True, 1, 0, replicas=replicas), ScrapeResult(gpu, True, 1, 0))
            )

    keepers = []
    for shard in range(16):
        c = _mine(set())
        c.owned = frozenset({shard})
        result = await OwnedCollect(Whole(), c).collect_once([])
        if any(r.target.kind == "gpu" for r in result.results):
            keepers.append(shard)
    assert keepers == [shard_of(f"node/{gpu.url}", 16)]
