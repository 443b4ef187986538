"""Arrays from producers that are neither numpy nor torch, through DLPack only: a minimal
producer written here with ctypes (float32 and bfloat16, any strides, any device). The
result of such a call is an array object with __dlpack__ and the buffer protocol; with torch
or ml_dtypes installed, their own arrays are tested too (skipped otherwise)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import mxmoe
from reference import bf16_bits_to_f64, to_bf16_bits


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

FLOAT32 = (2, 32)
BFLOAT16 = (4, 16)


class Producer:
    """Exposes a numpy buffer as a DLPack tensor of any dtype code, strides and device. The
    consumer keeps this object alive while it uses the memory (no deleter is needed)."""

    def __init__(self, storage: np.ndarray, dtype, shape=None, strides=None, device=(1, 0)):
        self.storage = storage
        shape = storage.shape if shape is None else shape
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = None if strides is None else (ctypes.c_int64 * len(strides))(*strides)
        self.calls = 0
        self.managed = DLManagedTensor()
        t = self.managed.dl_tensor
        t.data = storage.ctypes.data
        t.device = DLDevice(*device)
        t.ndim = len(shape)
        t.dtype = DLDataType(dtype[0], dtype[1], 1)
        t.shape = self.shape
        t.strides = self.strides
        t.byte_offset = 0

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        self.calls += 1
        return _new_capsule(ctypes.addressof(self.managed), b"dltensor", None)

    def __dlpack_device__(self):
        return (self.managed.dl_tensor.device.device_type, self.managed.dl_tensor.device.device_id)


def read_result(result, dtype, shape):
    """The contents of a DLPack-capable result, read through its own __dlpack__."""
    capsule = result.__dlpack__()
    managed = DLManagedTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    t = managed.dl_tensor
    assert (t.dtype.code, t.dtype.bits) == dtype and t.ndim == 2
    assert (t.shape[0], t.shape[1]) == shape
    assert result.__dlpack_device__() == (1, 0)
    count = shape[0] * shape[1]
    np_dtype = np.float32 if dtype == FLOAT32 else np.uint16
    buffer = (ctypes.c_byte * (count * np.dtype(np_dtype).itemsize)).from_address(
        t.data + t.byte_offset)
    return np.frombuffer(bytes(buffer), dtype=np_dtype).reshape(shape)


@pytest.fixture(scope="module")
def layer(models):
    return models["qwen3-30b-a3b"].layer(1, activation="bf16")


@pytest.fixture(scope="module")
def x(layer):
    return np.random.default_rng(9).standard_normal((6, layer.hidden), dtype=np.float32)


def test_float32_producer(layer, x):
    p = Producer(x, FLOAT32)
    y = layer(p)
    assert p.calls == 1
    assert not isinstance(y, np.ndarray)
    np.testing.assert_array_equal(read_result(y, FLOAT32, x.shape), layer(x))
    np.testing.assert_array_equal(np.asarray(y), layer(x))  # the buffer protocol too
    np.testing.assert_array_equal(np.from_dlpack(y), layer(x))


def test_bfloat16_producer(layer, x):
    bits = to_bf16_bits(x)
    y = layer(Producer(bits, BFLOAT16))
    np.testing.assert_array_equal(read_result(y, BFLOAT16, x.shape),
                                  layer(bits, bf16_bits=True))


def test_strided_producer(layer, x):
    wide = np.repeat(x, 2, axis=1)  # every element twice: column stride 2
    p = Producer(wide, FLOAT32, shape=x.shape, strides=(2 * x.shape[1], 2))
    np.testing.assert_array_equal(read_result(layer(p), FLOAT32, x.shape), layer(x))


def test_producer_into_numpy_out(layer, x):
    out = np.zeros_like(x)
    assert layer(Producer(x, FLOAT32), out=out) is out
    np.testing.assert_array_equal(out, layer(x))


def test_producer_on_another_device_is_refused(layer, x):
    with pytest.raises(ValueError, match=r"x: the array is on cuda:1; mxmoe computes on the CPU"):
        layer(Producer(x, FLOAT32, device=(2, 1)))


def test_producer_of_another_dtype_is_refused(layer, x):
    with pytest.raises(TypeError, match="got float64"):
        layer(Producer(x.astype(np.float64), (2, 64)))
    with pytest.raises(TypeError, match="got float16"):
        layer(Producer(x.astype(np.float16), (2, 16)))


def test_torch_tensors(models):
    torch = pytest.importorskip("torch")
    layer = models["mixtral-8x7b"].layer(0, activation="f32")
    x = torch.randn(5, layer.hidden)
    y = layer(x)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    np.testing.assert_array_equal(y.numpy(), layer(x.numpy()))
    out = torch.empty_like(x)
    assert layer(x, out=out) is out and torch.equal(out, y)
    xt = x.t().contiguous().t()  # column-major
    assert torch.equal(layer(xt), y)
    xb = x.to(torch.bfloat16)
    yb = layer(xb)
    assert isinstance(yb, torch.Tensor) and yb.dtype == torch.bfloat16
    bits = xb.view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(yb.view(torch.int16).numpy().view(np.uint16),
                                  layer(bits, bf16_bits=True))
    ids = torch.stack([torch.randperm(layer.num_experts)[:layer.top_k] for _ in range(5)])
    w = torch.rand(5, layer.top_k)
    y32 = layer.forward_routed(x, ids.to(torch.int32), w)
    assert torch.equal(layer.forward_routed(x, ids, w), y32)  # int64, torch's default
    with pytest.raises(TypeError, match="got float64"):
        layer(x.double())


def test_ml_dtypes_bfloat16_arrays(layer, x):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    xb = x.astype(ml_dtypes.bfloat16)
    y = layer(xb)
    assert y.dtype == ml_dtypes.bfloat16 and isinstance(y, np.ndarray)
    expected = layer(xb.view(np.uint16), bf16_bits=True)
    np.testing.assert_array_equal(y.view(np.uint16), expected)
    out = np.zeros_like(xb)
    assert layer(xb, out=out) is out
    np.testing.assert_array_equal(out.view(np.uint16), expected)
    assert np.allclose(bf16_bits_to_f64(expected), y.astype(np.float64))
