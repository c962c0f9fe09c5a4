// minfer info: the backends and the build; with -m DIR | --synthetic PRESET
// [--batch N] [--seq N] [--backend B] [--dtype D]: a model's architecture,
// what runs where, and the memory plan of a session.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

static double mb(int64_t bytes) { return (double)bytes / 1e6; }

static int backends(void) {
    printf("minfer %s\n", mf_version());
    printf("build: %s\n", mf_build_info());
    mf_backend *be = NULL;
    if (mf_backend_init("auto", &be) != MF_OK) {
        fprintf(stderr, "minfer: error: %s\n", mf_last_error());
        return 1;
    }
    printf("backend: %s (cuda device %s)\n", mf_backend_name(be), mf_cuda_available() ? "available" : "not available");
    mf_backend_free(be);
    return 0;
}

static void info_help(FILE *f) {
    fprintf(f, "usage: minfer info (-m DIR | --synthetic PRESET) [--batch N] [--seq N] [--backend B] [--dtype D]\n"
               "  Architecture, parameter count, dtype and the memory plan of a session of\n"
               "  --batch sequences (default 1) of --seq tokens (default min(max positions, 2048)).\n"
               "  Family, chat template, and what runs on which backend.\n"
               "  Presets: small, medium, large, tiny-gpt2, tiny-postnorm, llama-7b, tiny, tiny-geglu.\n"
               "  --dtype D: auto (default: CUDA bf16; CPU keeps a checkpoint's f16/bf16 weights), bf16, f16, f32\n");
}

int mf_cmd_info(int argc, char **argv) {
    if (argc == 0) return backends();
    mf_info_opts io;
    char err[MF_ARGS_ERR_CAP];
    const int done = mf_cli_parsed(mf_parse_info_args(argc, argv, &io, err), "info", err, info_help);
    if (done >= 0) return done;
    const mf_model_args mo = io.model;
    const int64_t batch = io.batch;
    int64_t seq = io.seq;
    mf_backend *be;
    mf_model *m;
    if (mf_cli_open_model(&mo, false, &be, &m)) return 1;
    mf_model_info in;
    mf_model_get_info(m, &in);
    if (!seq) seq = in.max_pos < 2048 ? in.max_pos : 2048;
    printf("model:        %s\n", in.source);
    printf("family:       %s%s%s: %s\n", in.family, in.hf_class[0] ? ", " : "", in.hf_class, in.family_about);
    printf("architecture: %s: %d layers, hidden %d, heads %d (kv %d, head_dim %d), ffn %d, vocab %d, max positions %lld\n",
           in.arch, in.n_layers, in.hidden, in.n_heads, in.n_kv_heads, in.head_dim, in.ffn, in.vocab,
           (long long)in.max_pos);
    printf("parameters:   %lld (%.2f M)\n", (long long)in.n_params, (double)in.n_params / 1e6);
    if (in.n_experts > 0) {
        printf("experts:      %d per layer, top-%d per token, expert ffn %d", in.n_experts, in.top_k, in.ffn);
        if (in.shared_ffn > 0) printf(", shared expert ffn %d", in.shared_ffn);
        printf("\n              active parameters per token: %lld (%.2f M) of %lld (%.1f%%)\n",
               (long long)in.n_active_params, (double)in.n_active_params / 1e6, (long long)in.n_params,
               100.0 * (double)in.n_active_params / (double)in.n_params);
    }
    if (in.kv_dtype == in.act_dtype)
        printf("dtype:        weights %s, activations and KV cache %s, on %s\n", mf_dtype_name(in.dtype),
               mf_dtype_name(in.act_dtype), in.backend);
    else
        printf("dtype:        weights %s, activations %s, KV cache %s, on %s\n", mf_dtype_name(in.dtype),
               mf_dtype_name(in.act_dtype), mf_dtype_name(in.kv_dtype), in.backend);
    const mf_tokenizer *tok = mf_model_tokenizer(m);
    if (tok)
        printf("tokenizer:    %lld tokens, bos %d, eos %d\n", (long long)mf_tokenizer_vocab_size(tok), in.bos_id, in.eos_id);
    else
        printf("tokenizer:    none (bos %d, eos %d)\n", in.bos_id, in.eos_id);
    printf("chat:         %s\n", in.chat_template ? "a chat template is present (minfer does not apply it: -p is the raw prompt)"
                                                   : "no chat template");
    if (in.sliding_window > 0)
        printf("attention:    sliding window: each token attends to its last %lld positions\n",
               (long long)in.sliding_window);
    // What runs where: the CPU computes every op in f32 (16-bit weights widened in
    // registers); CUDA in the chosen dtype.
    const char *attn = mo.attn ? mo.attn : "flash";
    const bool classic = !strcmp(attn, "classic");
    printf("backends:     cpu:  every op in f32 (weights f32, or f16/bf16 read as stored and widened in registers:\n"
           "                    --dtype), OpenBLAS GEMMs, attention %s%s\n",
           attn, strcmp(in.backend, "cpu") == 0 ? "   <- this run" : "");
    printf("              cuda: weights, activations and KV cache in bf16 (default), f16 or f32 (--dtype), f32 "
           "accumulation, attention %s (%s)%s\n",
           attn,
           classic             ? "QK^T GEMM -> softmax -> PV"
           : in.n_experts > 0 ? "online softmax over the KV cache; no CUDA Graphs: the experts read offsets back"
                              : "online softmax over the KV cache; decode steps as CUDA Graphs",
           strcmp(in.backend, "cuda") == 0 ? "   <- this run" : mf_cuda_available() ? "" : "   (no CUDA device here)");
    if (!strcmp(in.backend, "cpu")) { // minfer.c sets PASSIVE unless the user chose a policy
        const char *pol = getenv("OMP_WAIT_POLICY");
        printf("threads:      %d OpenMP threads, wait policy %s%s\n", omp_get_max_threads(), pol ? pol : "default",
               pol && !strcasecmp(pol, "passive") ? " (idle threads sleep: on a shared machine spinning ones "
                                                    "took the cores from the work)" : "");
    }
    mf_session_plan p;
    int rc = 0;
    if (mf_session_plan_memory(m, (int32_t)batch, seq, &p) != MF_OK) {
        rc = mf_cli_fail("info: memory plan");
    } else {
        printf("memory plan:  batch %lld x seq %lld\n", (long long)batch, (long long)seq);
        printf("  weights             %12.2f MB\n", mb(in.weight_bytes));
        printf("  KV cache per token  %12lld B   (K and V, all layers)\n", (long long)in.kv_bytes_per_token);
        printf("  KV cache            %12.2f MB\n", mb(p.kv_bytes));
        printf("  scratch             %12.2f MB  (steps of up to %lld tokens)\n", mb(p.scratch_bytes),
               (long long)p.step_tokens);
        printf("  total               %12.2f MB\n", mb(in.weight_bytes + p.kv_bytes + p.scratch_bytes));
    }
    mf_model_free(m);
    mf_backend_free(be);
    return rc;
}
