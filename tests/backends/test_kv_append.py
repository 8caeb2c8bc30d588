"""The in-place KV layer gives exactly what DynamicCache's concatenation gives, without the copies."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import DynamicCache  # noqa: E402

from prmsearch.engines.kv_cache import (  # noqa: E402
    AppendLayer,
    check_plain_cache,
    gather_cache,
    pack_rows,
)


def kv(batch: int, length: int, seed: int) -> tuple:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 2, length, 4, generator=g), torch.randn(batch, 2, length, 4, generator=g))


def test_append_layer_matches_concatenation_through_growth_and_row_selection():
    keys, values = kv(3, 5, seed=0)
    layer = AppendLayer.gather(keys, values, torch.arange(3), room=2)
    ref = DynamicCache(ddp_cache_data=[(keys, values)])
    buffer = layer._kbuf
    for step in range(6):  # room for 2, then it must grow
        k, v = kv(3 if step < 3 else 2, 1, seed=step + 1)
        if step == 3:
            rows = torch.tensor([0, 2])
            layer.batch_select_indices(rows)
            ref.batch_select_indices(rows)
        got_k, got_v = layer.update(k, v)
        want_k, want_v = ref.update(k, v, 0)
        assert torch.equal(got_k, want_k) and torch.equal(got_v, want_v)
        assert layer.get_seq_length() == want_k.shape[2]
        if step == 1:
            assert layer._kbuf is buffer  # still in place while there is room
    assert layer._kbuf.shape[2] > layer.get_seq_length()  # grew with spare room
    with pytest.raises(NotImplementedError):
        layer.crop(1)


def test_gather_cache_and_pack_rows_with_room_hold_the_same_values():
    keys, values = kv(2, 3, seed=7)
    rows = torch.tensor([1, 1, 0])  # repeats allowed: n samples of one request
    cache = gather_cache(DynamicCache(ddp_cache_data=[(keys, values)]), rows, room=4)
    check_plain_cache(cache)  # an AppendLayer is a plain full-attention layer
    assert torch.equal(cache.layers[0].keys, keys[rows]) and cache.get_seq_length() == 3
    assert torch.equal(cache.layers[0].values, values[rows])
    per_row = [((keys[0, :, 1:], values[0, :, 1:]),), None]
    plain = pack_rows(per_row, 3)
    roomy = pack_rows(per_row, 3, room=5)
    for a, b in zip(plain.layers, roomy.layers, strict=True):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
    new_k, new_v = kv(2, 5, seed=8)
    got_k, _ = roomy.update(new_k, new_v, 0)
    assert torch.equal(got_k, torch.cat([plain.layers[0].keys, new_k], dim=2))
    assert isinstance(pack_rows(per_row, 0, room=5), DynamicCache)
