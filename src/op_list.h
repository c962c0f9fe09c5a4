// Internal: the op list. Every op a backend implements is one line here, and
// everything that used to list the ops again is generated from it: the entries
// of struct mf_backend and their dispatch functions (backend.h, backend.c),
// the backends' prototypes and wiring (cpu/cpu.h, cpu/backend_cpu.c,
// cuda/common.cuh, cuda/backend_cuda.cu), and the profiler's op names.
//
// X(entry, args, name): entry is the struct mf_backend field and the backend
// functions' suffix (mf_cpu_<entry>, mf_cuda_<entry>); args its argument
// struct (minfer/ops.h); name the op in messages and in the profiler.
// MF_OPS: every backend implements them. MF_OPS_OPTIONAL: a backend may leave
// the entry NULL or decline (MF_ERR_UNSUPPORTED); src/ops/ then runs a
// generic version built from other ops.
//
// Adding an op: a line here; its args struct and mf_<op> in minfer/ops.h;
// src/ops/<op>.c (checks, then mf_dispatch_<entry>); src/cpu/<op>.c;
// src/cuda/<family>/<op>.cu; tests/cases_<op>.c with its line in tests/test_ops.c's
// TH_FAMILIES and tests/CMakeLists.txt.
#ifndef MF_OP_LIST_H
#define MF_OP_LIST_H

#define MF_OPS(X)                                        \
    X(gemm, mf_gemm_args, "gemm")                        \
    X(add_norm, mf_norm_args, "add_norm")                \
    X(embed, mf_embed_args, "embed")                     \
    X(add, mf_add_args, "add")                           \
    X(softmax, mf_softmax_args, "softmax")               \
    X(rope, mf_rope_args, "rope")                        \
    X(act, mf_act_args, "act")                           \
    X(copy_tensor, mf_copy_args, "copy")                 \
    X(attention, mf_attention_args, "attention")         \
    X(kv_write, mf_kv_write_args, "kv_write")            \
    X(argmax, mf_argmax_args, "argmax")                  \
    X(topk, mf_topk_args, "topk")                        \
    X(moe_router, mf_moe_router_args, "moe_router")      \
    X(moe_permute, mf_moe_permute_args, "moe_permute")   \
    X(moe_combine, mf_moe_combine_args, "moe_combine")

#define MF_OPS_OPTIONAL(X) X(moe_experts, mf_moe_experts_args, "moe_experts")

#endif // MF_OP_LIST_H
