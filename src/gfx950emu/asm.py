"""A few lines of hand-written gfx950 assembly as a complete ``.s`` kernel (descriptor + metadata), the
form :func:`gfx950emu.load` reads: for micro-kernels, benchmarks and tests.

Conventions: the kernarg pointer is s[0:1], the workgroup id x is s2, v0 is the work-item id.
"""
from __future__ import annotations

_HEADER = """\t.amdgcn_target "amdgcn-amd-amdhsa--gfx950"
\t.text
\t.globl\t{name}
\t.p2align\t8
\t.type\t{name},@function
{name}:
"""

_DESC = """.Lfunc_end0:
\t.size\t{name}, .Lfunc_end0-{name}
\t.rodata
\t.p2align\t6, 0x0
\t.amdhsa_kernel {name}
\t\t.amdhsa_group_segment_fixed_size {lds}
\t\t.amdhsa_kernarg_size {ksize}
\t\t.amdhsa_user_sgpr_count 2
\t\t.amdhsa_user_sgpr_kernarg_segment_ptr 1
\t\t.amdhsa_system_sgpr_workgroup_id_x 1
\t\t.amdhsa_system_vgpr_workitem_id {wid}
\t\t.amdhsa_next_free_vgpr {vgprs}
\t\t.amdhsa_next_free_sgpr 64
\t\t.amdhsa_accum_offset {acc}
{denorm}\t.end_amdhsa_kernel
\t.text
\t.amdgpu_metadata
---
amdhsa.kernels:
  - .args:
{args}    .group_segment_fixed_size: {lds}
    .kernarg_segment_size: {ksize}
    .name:           {name}
{reqd}    .wavefront_size: 64
amdhsa.target:   amdgcn-amd-amdhsa--gfx950
...
\t.end_amdgpu_metadata
"""


def kernel(body: str, args=("in", "out"), name: str = "k", lds: int = 0, acc: int = 128,
           workitem_id: int = 0, scalars=(), vgprs: int = 256, reqd_workgroup_size=None,
           denorm_mode_32: int | None = None) -> str:
    """A complete .s text: ``args`` are global buffers (8 bytes each, in order), ``scalars`` 4-byte
    by_value arguments after them; ``vgprs`` is ``.amdhsa_next_free_vgpr`` (``acc`` the AGPR offset);
    ``denorm_mode_32`` None leaves the assembler's default (0: f32 denormals flushed)."""
    lines, off = [], 0
    for a in args:
        lines.append(f"      - .address_space:  global\n        .name:           {a}\n"
                     f"        .offset:         {off}\n        .size:           8\n"
                     f"        .value_kind:     global_buffer\n")
        off += 8
    for a in scalars:
        lines.append(f"      - .name:           {a}\n        .offset:         {off}\n"
                     f"        .size:           4\n        .value_kind:     by_value\n")
        off += 4
    reqd = ("    .reqd_workgroup_size:\n" + "".join(f"      - {int(v)}\n" for v in reqd_workgroup_size)
            if reqd_workgroup_size else "")
    denorm = f"\t\t.amdhsa_float_denorm_mode_32 {denorm_mode_32}\n" if denorm_mode_32 is not None else ""
    text = _HEADER.format(name=name)
    text += "\n".join("\t" + ln.strip() if ln.strip() and not ln.strip().endswith(":") else ln.strip()
                      for ln in body.strip().splitlines()) + "\n"
    text += _DESC.format(name=name, lds=lds, ksize=max(off, 8), acc=acc, wid=workitem_id, vgprs=vgprs,
                         denorm=denorm, reqd=reqd, args="".join(lines))
    return text
