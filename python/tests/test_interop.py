"""Zero-copy interop: NumPy (numpy(), __array__, from_numpy) and DLPack both ways share memory (a
write through one is seen by the other), an exported tensor keeps its storage alive after the
tensor is gone, an imported array stays alive while an ember view of it exists, and what cannot be
shared is a clear error."""

import gc
import sys

import numpy as np
import pytest

import ember


def test_numpy_shares_memory_both_ways():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = ember.from_numpy(a)
    assert t.shape == (3, 4) and t.dtype == ember.float32 and t.stride() == (4, 1)
    t[1, 2] = -5
    assert a[1, 2] == -5
    a[0, 0] = 42
    assert t[0, 0].item() == 42
    back = t.numpy()
    assert np.shares_memory(back, a)
    back[2, 3] = 7
    assert a[2, 3] == 7 and t[2, 3].item() == 7
    assert np.asarray(t).ctypes.data == a.ctypes.data


def test_numpy_strided_views_and_dtypes():
    a = np.arange(24, dtype=np.float64).reshape(4, 6)
    t = ember.from_numpy(a[::2, 1::2])  # strided view, shared
    assert t.shape == (2, 3) and t.stride() == (12, 2) and not t.is_contiguous()
    np.testing.assert_array_equal(t.contiguous().numpy(), a[::2, 1::2])
    tt = ember.arange(6, dtype=ember.float32).reshape(2, 3).t()
    assert tt.numpy().strides == (4, 12)  # a transposed tensor exports its strides
    for np_dtype, dtype in [(np.float32, ember.float32), (np.float64, ember.float64), (np.float16, ember.float16),
                            (np.int64, ember.int64), (np.int32, ember.int32), (np.int16, ember.int16),
                            (np.int8, ember.int8), (np.uint8, ember.uint8), (np.bool_, ember.bool)]:
        x = np.ones((2, 2), dtype=np_dtype)
        t = ember.from_numpy(x)
        assert t.dtype == dtype and t.numpy().dtype == np_dtype
    assert ember.zeros(0, 3).numpy().shape == (0, 3)
    assert ember.tensor(2.5).numpy().shape == ()
    e = ember.from_numpy(np.zeros((0, 5), dtype=np.float32))
    assert e.shape == (0, 5) and e.sum().item() == 0


def test_unsupported_arrays_are_clear_errors():
    with pytest.raises(ember.Error, match="unsupported element type complex"):
        ember.from_numpy(np.zeros(3, dtype=np.complex64))
    with pytest.raises(ember.Error, match="uint.*16|unsupported element type uint16"):
        ember.from_numpy(np.zeros(3, dtype=np.uint16))
    readonly = np.zeros(3, dtype=np.float32)
    readonly.flags.writeable = False
    with pytest.raises(ember.Error, match="read-only"):
        ember.from_numpy(readonly)
    with pytest.raises(ember.Error, match="negative strides"):
        ember.from_numpy(np.arange(4, dtype=np.float32)[::-1])
    with pytest.raises(ember.Error, match="expected an array"):
        ember.from_numpy([1, 2, 3])
    with pytest.raises(ember.Error, match="requires grad"):
        ember.ones(2, requires_grad=True).numpy()
    with pytest.raises(ember.Error, match="no array equivalent"):
        ember.ones(64).to(ember.q8_0) if hasattr(ember.Tensor, "to") else None
        ember.zeros(64).to(ember.q8_0).numpy()
    # a bfloat16 tensor has no NumPy dtype
    with pytest.raises((ember.Error, TypeError, ValueError, RuntimeError)):
        ember.ones(2).bfloat16().numpy()


def test_dlpack_round_trips_with_numpy():
    t = ember.arange(6, dtype=ember.float32).reshape(2, 3)
    n = np.from_dlpack(t)  # NumPy consumes ember's __dlpack__
    assert n.shape == (2, 3)
    n[0, 1] = 9
    assert t[0, 1].item() == 9
    a = np.arange(4, dtype=np.int64)
    u = ember.from_dlpack(a)  # ember consumes NumPy's __dlpack__
    u += 10
    assert a.tolist() == [10, 11, 12, 13]
    assert t.__dlpack_device__() == (1, 0)


def test_exported_array_keeps_storage_alive():
    t = ember.arange(1000, dtype=ember.float32)
    n = t.numpy()
    d = np.from_dlpack(ember.arange(5, dtype=ember.float32) * 2)  # a temporary tensor
    del t
    gc.collect()
    ember.zeros(1000) + 1  # reuse freed blocks if the storage had been released
    assert n[999] == 999.0 and n.sum() == sum(range(1000))
    assert d.tolist() == [0, 2, 4, 6, 8]


def test_imported_array_stays_alive_while_viewed():
    a = np.arange(100, dtype=np.float64)
    base = sys.getrefcount(a)
    t = ember.from_numpy(a)
    assert sys.getrefcount(a) > base  # the tensor's storage holds the array
    v = t[10:20]
    del t
    gc.collect()
    assert sys.getrefcount(a) > base  # the view still holds it
    del a
    gc.collect()
    assert v.tolist() == list(range(10, 20))
    del v
    gc.collect()


def test_tensor_copies_as_torch_tensor_does():
    a = np.ones(3, dtype=np.float32)
    t = ember.tensor(a)
    t[0] = 5
    assert a[0] == 1.0
    s = ember.as_tensor(a)  # as_tensor shares
    s[0] = 5
    assert a[0] == 5.0
    assert ember.tensor(np.array([[1, 2]], dtype=np.int32)).dtype == ember.int32


def test_writes_through_shared_arrays_reach_convolutions():
    """A convolution keeps its packed weight on the weight's storage until the weight is written;
    memory shared with NumPy keeps none, since a write there never reaches ember's version
    counter: the next convolution sees it, whichever side exported the memory."""
    F = ember.nn.functional
    x = ember.randn(2, 16, 6, 6)
    w = ember.randn(32, 16, 3, 3)
    before = F.conv2d(x, w, padding=1).numpy().copy()
    w.numpy()[...] *= -2
    np.testing.assert_allclose(F.conv2d(x, w, padding=1).numpy(), -2 * before, rtol=1e-5, atol=1e-4)

    a = np.random.default_rng(3).standard_normal((32, 16, 3, 3)).astype(np.float32)
    v = ember.from_numpy(a)
    before = F.conv2d(x, v, padding=1).numpy().copy()
    a *= 3
    np.testing.assert_allclose(F.conv2d(x, v, padding=1).numpy(), 3 * before, rtol=1e-5, atol=1e-4)
