; Hand-written for tests/test_isa.py (not compiler output): two kernels in the layout LLVM prints
; for AMDGPU, with the edge cases the parser must handle (nested loops, inline asm blocks,
; comments after instructions and labels, bracketed modifiers, AGPRs, a symbol expression).
	.amdgcn_target "amdgcn-amd-amdhsa--gfx950"
	.amdhsa_code_object_version 6
	.text
	.globl	alpha
	.p2align	8
	.type	alpha,@function
alpha:                                  ; @alpha
; %bb.0:
	s_load_dwordx4 s[0:3], s[0:1], 0x0      ; loads the kernel arguments
	v_mov_b32_e32 v0, 0
	buffer_load_dwordx4 v[4:7], v0, s[8:11], 0 offen offset:16
	s_waitcnt vmcnt(0) lgkmcnt(0)
.LBB0_1:                                ; %outer
                                        ; =>This Loop Header: Depth=1
	v_accvgpr_write_b32 a0, v4
.LBB0_2:                                ;   Parent Loop BB0_1 Depth=1
	v_mfma_scale_f32_16x16x128_f8f6f4 a[0:3], v[4:11], v[12:19], a[0:3], v20, v21 op_sel_hi:[0,0,0] cbsz:4 blgp:4
	v_mfma_f32_16x16x32_bf16 a[0:3], v[4:7], v[8:11], a[0:3]
	s_waitcnt lgkmcnt(0)
	s_add_u32 s4, s4, 1
	s_cmp_lg_u32 s4, s5
	s_cbranch_scc1 .LBB0_2
; %bb.3:
	;;#ASMSTART
	v_pk_mul_f32 v[0:1], v[2:3], v[2:3] op_sel_hi:[1,1]
	s_nop 1 // a comment inside the asm block
	;;#ASMEND
	s_barrier
	v_accvgpr_read_b32 v1, a1
	s_sub_u32 s6, s6, 1
	s_cmp_lg_u32 s6, 0
	s_cbranch_scc0 .LBB0_1
; %bb.4:
	buffer_store_dwordx4 v[0:3], v0, s[8:11], 0 offen
	buffer_store_dword v0, v0, s[8:11], 0 offen
	buffer_store_short v0, v0, s[8:11], 0 offen
	buffer_store_byte v0, v0, s[8:11], 0 offen
	buffer_store_dwordx2 v[0:1], v0, s[8:11], 0 offen
	buffer_store_dwordx4 v[0:3], v0, s[8:11], 0 offen offset:64
	s_endpgm
.Lfunc_end0:
	.size	alpha, .Lfunc_end0-alpha
	.section	.rodata,"a",@progbits
	.p2align	6, 0x0
	.amdhsa_kernel alpha
		.amdhsa_group_segment_fixed_size 65536
		.amdhsa_private_segment_fixed_size 16
		.amdhsa_kernarg_size 16
		.amdhsa_next_free_vgpr 42
		.amdhsa_next_free_sgpr 16
		.amdhsa_accum_offset 24
	.end_amdhsa_kernel
	.text
	.set .Lhelper.numbered_sgpr, 16
	.set .Lalpha.num_vgpr, 21
	.set .Lalpha.num_agpr, 18
	.set .Lalpha.numbered_sgpr, max(12, .Lhelper.numbered_sgpr)
	.set .Lalpha.private_seg_size, 16
	.text
	.globl	beta
	.p2align	8
	.type	beta,@function
beta:
	s_cmp_eq_u32 s0, 0
	s_cbranch_scc1 .LBB1_2
; %bb.1:
	global_load_dword v1, v0, s[2:3]
	s_waitcnt vmcnt(0)
.LBB1_2:
	s_endpgm
.Lfunc_end1:
	.size	beta, .Lfunc_end1-beta
	.section	.rodata,"a",@progbits
	.amdhsa_kernel beta
		.amdhsa_group_segment_fixed_size 0
		.amdhsa_private_segment_fixed_size 0
		.amdhsa_next_free_vgpr 2
		.amdhsa_next_free_sgpr 4
		.amdhsa_accum_offset 4
	.end_amdhsa_kernel
	.text
	.set .Lbeta.num_vgpr, 2
	.set .Lbeta.num_agpr, 0
	.set .Lbeta.numbered_sgpr, 4
	.section	".note.GNU-stack","",@progbits
	.amdgpu_metadata
---
amdhsa.kernels:
  - .agpr_count:     18
    .group_segment_fixed_size: 65536
    .max_flat_workgroup_size: 512
    .name:           alpha
    .private_segment_fixed_size: 16
    .sgpr_count:     22
    .vgpr_count:     42
    .wavefront_size: 64
  - .agpr_count:     0
    .args:
      - .offset:         0
        .size:           8
        .value_kind:     global_buffer
    .group_segment_fixed_size: 0
    .max_flat_workgroup_size: 64
    .name:           beta
    .private_segment_fixed_size: 0
    .reqd_workgroup_size:
      - 64
      - 1
      - 1
    .sgpr_count:     105
    .vgpr_count:     2
    .wavefront_size: 64
amdhsa.target:   amdgcn-amd-amdhsa--gfx950
amdhsa.version:
  - 1
  - 2
...

	.end_amdgpu_metadata
