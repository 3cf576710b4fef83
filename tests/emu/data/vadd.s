; Hand-written gfx950 kernel: out[i] = a[i] + b[i] * 2 for a 1-D grid of 64-lane workgroups.
; Arguments (metadata below): a, b, out (global buffers), n (i32).
	.amdgcn_target "amdgcn-amd-amdhsa--gfx950"
	.text
	.globl	vadd
	.p2align	8
	.type	vadd,@function
vadd:
	s_load_dwordx4 s[4:7], s[0:1], 0x0          ; a, b
	s_load_dwordx2 s[8:9], s[0:1], 0x10         ; out
	s_load_dword s10, s[0:1], 0x18              ; n
	v_lshl_add_u32 v1, s2, 6, v0                ; global id = wg*64 + tid
	s_waitcnt lgkmcnt(0)
	v_cmp_gt_i32_e32 vcc, s10, v1
	s_and_saveexec_b64 s[12:13], vcc
	s_cbranch_execz .LBB0_2
	v_lshlrev_b32_e32 v2, 2, v1                 ; byte offset
	global_load_dword v3, v2, s[4:5]
	global_load_dword v4, v2, s[6:7]
	s_waitcnt vmcnt(0)
	v_lshlrev_b32_e32 v4, 1, v4
	v_add_u32_e32 v3, v3, v4
	global_store_dword v2, v3, s[8:9]
.LBB0_2:
	s_endpgm
.Lfunc_end0:
	.size	vadd, .Lfunc_end0-vadd

	.rodata
	.p2align	6, 0x0
	.amdhsa_kernel vadd
		.amdhsa_group_segment_fixed_size 0
		.amdhsa_kernarg_size 28
		.amdhsa_user_sgpr_count 2
		.amdhsa_user_sgpr_kernarg_segment_ptr 1
		.amdhsa_system_sgpr_workgroup_id_x 1
		.amdhsa_system_vgpr_workitem_id 0
		.amdhsa_next_free_vgpr 8
		.amdhsa_next_free_sgpr 16
		.amdhsa_accum_offset 8
	.end_amdhsa_kernel
	.text

	.amdgpu_metadata
---
amdhsa.kernels:
  - .args:
      - .address_space:  global
        .name:           a
        .offset:         0
        .size:           8
        .value_kind:     global_buffer
      - .address_space:  global
        .name:           b
        .offset:         8
        .size:           8
        .value_kind:     global_buffer
      - .address_space:  global
        .name:           out
        .offset:         16
        .size:           8
        .value_kind:     global_buffer
      - .name:           n
        .offset:         24
        .size:           4
        .value_kind:     by_value
    .group_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .kernarg_segment_size: 28
    .max_flat_workgroup_size: 64
    .name:           vadd
    .symbol:         vadd.kd
    .wavefront_size: 64
amdhsa.target:   amdgcn-amd-amdhsa--gfx950
amdhsa.version:
  - 1
  - 2
...
	.end_amdgpu_metadata
