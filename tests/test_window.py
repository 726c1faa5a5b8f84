"""The idempotency window: chunked like a plain list of ids, and windows sharing an index stay independent."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.window import IdWindow


def reference_chunks(ids: list[str], limit: int) -> tuple[tuple[str, ...], ...]:
    """The chunks a window holds after adding ``ids`` one by one, computed the plain way."""
    chunks: list[list[str]] = []
    for envelope_id in ids:
        if chunks and len(chunks[-1]) < IdWindow.CHUNK:
            chunks[-1].append(envelope_id)
        else:
            chunks.append([envelope_id])
        while len(chunks) > 1 and sum(map(len, chunks)) - len(chunks[0]) >= limit:
            chunks.pop(0)
    return tuple(tuple(chunk) for chunk in chunks)


# Each step adds a new id, or re-adds an id added earlier, to the newest window or to an older one.
steps_st = st.lists(
    st.tuples(st.integers(0, 3), st.one_of(st.none(), st.integers(0, 10_000))), min_size=1, max_size=700
)


@settings(max_examples=60, deadline=None)
@given(steps=steps_st, limit=st.sampled_from([1, 5, 130, 300]))
def test_windows_extended_from_any_version_match_a_plain_list(
    steps: list[tuple[int, int | None]], limit: int
) -> None:
    versions: list[tuple[IdWindow, list[str]]] = [(IdWindow(), [])]
    for count, (back, again) in enumerate(steps):
        window, ids = versions[max(0, len(versions) - 1 - back)]  # usually the newest, sometimes older
        seen = [i for _, added in versions for i in added]
        envelope_id = seen[again % len(seen)] if again is not None and seen else f"id-{count}"
        if envelope_id in window:
            continue  # the rules never add an id the window holds
        versions.append((window.add(envelope_id, limit), [*ids, envelope_id]))
    every = {i for _, ids in versions for i in ids}
    for window, ids in versions:
        chunks = reference_chunks(ids, limit)
        assert window.chunks == chunks
        assert len(window) == sum(map(len, chunks))
        held = {i for chunk in chunks for i in chunk}
        assert {i for i in every if i in window} == held
        flat = [i for chunk in chunks for i in chunk]
        for last in (0, 1, limit - 1, limit, limit + 1):
            assert {i for i in every if window.holds(i, last)} == set(
                flat[max(0, len(flat) - last) :] if last else []
            )


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 2), st.integers(1, 300), st.one_of(st.none(), st.integers(0, 10_000))),
        min_size=1,
        max_size=40,
    ),
    limit=st.sampled_from([1, 5, 130, 300]),
)
def test_extending_by_many_ids_is_adding_them_one_by_one(
    steps: list[tuple[int, int, int | None]], limit: int
) -> None:
    versions: list[tuple[IdWindow, list[str]]] = [(IdWindow(), [])]
    for count, (back, size, again) in enumerate(steps):
        window, ids = versions[max(0, len(versions) - 1 - back)]
        seen = [i for _, added in versions for i in added]
        batch = [f"id-{count}-{n}" for n in range(size)]
        if again is not None and seen and seen[again % len(seen)] not in window:
            batch.insert(again % len(batch), seen[again % len(seen)])  # an id that had dropped out
        # either goes first: the other then extends a window whose shared index has moved on
        extended = window.extend(batch, limit) if count % 2 else None
        one_by_one = window
        for envelope_id in batch:
            one_by_one = one_by_one.add(envelope_id, limit)
        if extended is None:
            extended = window.extend(batch, limit)
        assert extended.chunks == one_by_one.chunks == reference_chunks([*ids, *batch], limit)
        versions.append((extended, [*ids, *batch]))
    every = {i for _, ids in versions for i in ids}
    for window, ids in versions:
        held = {i for chunk in reference_chunks(ids, limit) for i in chunk}
        assert len(window) == len(held)
        assert {i for i in every if i in window} == held


def test_an_older_window_keeps_what_it_held_when_a_newer_one_moves_on() -> None:
    first = IdWindow()
    for i in range(400):
        first = first.add(f"a{i}", 300)
    later = first
    for i in range(600):
        later = later.add(f"b{i}", 300)
    assert "a399" in first and "b0" not in first
    assert "a399" not in later and "b599" in later
    again = later.add("a399", 300)  # an id that had dropped out comes back
    assert "a399" in again and "a399" in first and "a399" not in later
    branch = first.add("c", 300)  # extending an older version again
    assert "c" in branch and "b0" not in branch and "c" not in later and "c" not in first


def test_a_window_read_back_from_json_answers_the_same() -> None:
    window = IdWindow()
    for i in range(1000):
        window = window.add(f"x{i}", 500)
    rebuilt = IdWindow.model_validate_json(window.model_dump_json())
    assert rebuilt == window and len(rebuilt) == len(window)
    assert all((f"x{i}" in rebuilt) == (f"x{i}" in window) for i in range(1000))
    assert rebuilt.add("y", 500).chunks == window.add("y", 500).chunks
