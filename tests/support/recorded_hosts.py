"""Figures recorded on host kinds a session may not get, to replay the CPU peak's rule on each of them.

Each host: what ``/proc/cpuinfo`` says (vendor, family, model, flags), and, per call of
:func:`accounting.hardware.cpu_clock.measure_vector_clock` that day, each core's clock under its FMA chains (light
load) and its FMA streams' FLOP/s (its ceiling); beside them the all-core FLOP/s of a separately compiled C loop of
twelve independent FMA chains per core, one pinned thread per core (``tests/support/fma_ceiling.c``), the truth the
peak is held to. Shared hosts: the same measurement varies by a few percent from run to run, so the C loop is a
range over the day's runs.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class RecordedHost:
    """One host kind's recorded CPU facts and measurements (see the module docstring)."""

    name: str
    vendor: str
    family: int
    model: int
    flags: frozenset
    light_load_ghz: tuple  # per call: each core's clock under the FMA chains
    ceiling_flops: tuple  # per call: each core's FMA streams, FLOP/s
    compiled_ceiling_flops: tuple  # (lowest, highest) all-core FLOP/s of the C loop that day

    @property
    def cores(self) -> int:
        return len(self.light_load_ghz[0])


INTEL_XEON_MODEL_207 = RecordedHost(
    # source: ../shared/hosts/intel-xeon-model-207-kvm.md (2-vCPU KVM guest, "Intel(R) Xeon(R) Processor", Emerald
    # Rapids class). Its measure_fma_ceiling() was recorded as an all-core total only: split evenly between the cores.
    name="intel-xeon-model-207-kvm",
    vendor="intel",
    family=6,
    model=207,
    flags=frozenset((
        "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss "
        "ht syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid tsc_known_freq "
        "pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx "
        "f16c rdrand hypervisor lahf_lm abm 3dnowprefetch cpuid_fault ssbd ibrs ibpb stibp ibrs_enhanced "
        "fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid avx512f avx512dq rdseed adx smap avx512ifma "
        "clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves avx_vnni avx512_bf16 "
        "wbnoinvd arat avx512vbmi umip pku ospke avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg "
        "avx512_vpopcntdq rdpid bus_lock_detect cldemote movdiri movdir64b fsrm md_clear serialize tsxldtrk "
        "ibt amx_bf16 avx512_fp16 amx_tile amx_int8 flush_l1d arch_capabilities"
    ).split()),
    light_load_ghz=((2.793, 2.979), (2.825, 2.979), (2.576, 2.583)),
    ceiling_flops=((164.05e9, 164.05e9), (165.25e9, 165.25e9), (156.5e9, 156.5e9)),
    compiled_ceiling_flops=(316.1e9, 340.2e9),
)

AMD_EPYC_ZEN5 = RecordedHost(
    # Recorded 2026-11-26 on a 2-vCPU KVM guest "AMD EPYC", family 0x1A model 2 (Zen 5: AVX-512 on full-width
    # units, AVX512-BF16, VP2INTERSECT): three calls of measure_vector_clock(), and the C loop run 3 times
    # (gcc -O2 -mavx512f -mfma), between helpers' work on the other core.
    name="amd-epyc-zen5-kvm",
    vendor="amd",
    family=0x1A,
    model=2,
    flags=frozenset((
        "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht "
        "syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid "
        "extd_apicid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt "
        "tsc_deadline_timer aes xsave avx f16c rdrand hypervisor lahf_lm cmp_legacy cr8_legacy abm sse4a "
        "misalignsse 3dnowprefetch osvw topoext vmmcall fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid "
        "avx512f avx512dq adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt "
        "xsavec xgetbv1 xsaves avx_vnni avx512_bf16 clzero xsaveerptr arat avx512vbmi umip avx512_vbmi2 gfni "
        "vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid fsrm avx512_vp2intersect"
    ).split()),
    light_load_ghz=((4.2255, 4.2293), (4.2335, 4.2364), (4.2451, 4.2382)),
    ceiling_flops=((270.48e9, 270.33e9), (270.90e9, 269.99e9), (272.03e9, 271.13e9)),
    compiled_ceiling_flops=(543.2e9, 557.3e9),
)

RECORDED_HOSTS = (INTEL_XEON_MODEL_207, AMD_EPYC_ZEN5)
