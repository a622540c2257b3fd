"""CPUs described by their facts alone (ISA flags, vendor), for the native-dtype rule's tests."""

import pytest

from accounting.hardware.devices import DeviceInfo

GIB = 2**30


def fake_cpu(name, flags, vendor):
    return DeviceInfo("cpu", name, None, 16 * GIB, cpu_flags=frozenset(flags), cores=2, clock_ghz=3.0,
                      clock_source="test", vendor=vendor)


BASE = {"sse4_2", "avx", "avx2", "fma", "f16c"}
ZEN3 = fake_cpu("AMD EPYC 7B13", BASE, "amd")
CASCADE_LAKE = fake_cpu("Intel(R) Xeon(R) Platinum 8280", BASE | {"avx512f", "avx512bw", "avx512_vnni"}, "intel")
ZEN4 = fake_cpu("AMD EPYC 9654", BASE | {"avx512f", "avx512bw", "avx512_bf16", "avx512_vnni"}, "amd")
SAPPHIRE_RAPIDS = fake_cpu("Intel(R) Xeon(R) Platinum 8480+",
                           BASE | {"avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"},
                           "intel")

# Which ISA extension gives each low-precision dtype a path of its own (vendor documentation:
# AMX and AVX512-BF16/FP16 are the instructions oneDNN uses; AVX2 and plain AVX-512 have none).
NATIVE_FLAGS = {"bfloat16": ({"amx_bf16", "amx_tile"}, {"avx512_bf16"}),
                "float16": ({"amx_fp16", "amx_tile"}, {"avx512_fp16"})}
FAKE_CPUS = [
    pytest.param(ZEN3, ["float32"], id="zen3-avx2"),
    pytest.param(CASCADE_LAKE, ["float32"], id="cascade-lake-avx512-no-bf16"),
    pytest.param(ZEN4, ["float32", "bfloat16"], id="zen4-avx512-bf16"),
    pytest.param(SAPPHIRE_RAPIDS, ["float32", "bfloat16", "float16"], id="sapphire-rapids-amx"),
]
