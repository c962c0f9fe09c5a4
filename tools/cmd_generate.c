// minfer generate -m DIR -p TEXT [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p P]
//                 [--repeat-penalty R] [--seed S] [--stop STR]... [--ignore-eos]
//                 [--bos | --no-bos] [--backend auto|cpu|cuda] [--dtype auto|bf16|f16|f32]
//
// The generated text goes to stdout as it is produced (then one newline);
// logs, the seed when chosen at random and a last line of statistics go to
// stderr. Errors: one "minfer: error: ..." line and a non-zero exit (2 for a
// bad option: the options are parsed by mf_parse_generate_args, cli_args.c).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "minfer/generate.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: minfer generate -m DIR -p TEXT [options]\n"
            "  Generates a continuation of TEXT and streams it to stdout; statistics on stderr.\n"
            "  -m DIR                Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json)\n"
            "  -p TEXT               the prompt\n"
            "  -n N                  tokens to generate at most (default 128)\n"
            "  --temp T              temperature, >= 0; 0 is greedy (default 0.8)\n"
            "  --top-k K             keep the K most likely tokens; 0 disables (default 40)\n"
            "  --top-p P             keep the most likely tokens up to probability P, in [0, 1]; 0 disables (default 0.95)\n"
            "  --min-p P             drop tokens below P x the most likely one's probability, in [0, 1]; 0 disables (default 0.05)\n"
            "  --repeat-penalty R    penalise tokens already in the context (HF semantics), >= 0; 1 or 0 disables (default 1)\n"
            "  --seed S              sampling seed, 0 .. 2^64-1 (default: random, printed on stderr)\n"
            "  --stop STR            stop when the text reaches STR (not printed); repeatable, up to %d\n"
            "  --ignore-eos          go on after the EOS token\n"
            "  --bos / --no-bos      put BOS before the prompt or not (default: as the tokenizer's add_bos_token says)\n"
            "  --backend B           auto (default), cpu or cuda\n"
            "  --dtype D             auto (default: CUDA bf16; CPU keeps a checkpoint's f16/bf16 weights),\n"
            "                        bf16, f16 or f32 (the CPU computes in f32: D is its weights' storage)\n"
            "  --kv-dtype D          the KV cache: auto (default: CUDA the activations' dtype, CPU f32), f32,\n"
            "                        f16 or bf16 (CPU: half the cache's memory; CUDA: its activation dtype only)\n"
            "  --mmap                CPU: use the checkpoint's weights in place from the file's mapping (fast\n"
            "                        load, shared pages) instead of copying them at load (q|k|v, gate|up stacked)\n"
            "  --no-graphs           launch every op of a decode step (default on CUDA: replay a\n"
            "                        recorded CUDA Graph per step)\n",
            MF_ARGS_MAX_STOP);
}

// A seed nobody chose: the clock and the process id, mixed.
static uint64_t random_seed(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t z = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 32;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void on_text(int32_t seq, const char *text, size_t len, void *user) {
    (void)seq;
    *(bool *)user = true;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
}

int mf_cmd_generate(int argc, char **argv) {
    mf_generate_opts o;
    char err[MF_ARGS_ERR_CAP];
    const int done = mf_cli_parsed(mf_parse_generate_args(argc, argv, &o, err), "generate", err, help);
    if (done >= 0) return done;
    if (!o.seed_given) o.sp.seed = random_seed();

    mf_backend *be = NULL;
    mf_model *m = NULL;
    mf_session *s = NULL;
    int32_t *ids = NULL;
    mf_generate_result r = {0};
    int rc = 1;
    if (mf_backend_init(o.backend, &be) != MF_OK) {
        mf_cli_fail("generate: backend");
        goto done;
    }
    mf_model_opts mo = {.dtype = o.dtype, .dtype_auto = o.dtype_auto, .verbose = true, // flash: the engine's
                        .kv_dtype = o.kv_dtype, .mmap = o.mmap};
    if (mf_model_load(o.dir, be, &mo, &m) != MF_OK) {
        mf_cli_fail("generate: %s", o.dir);
        goto done;
    }
    mf_model_info info;
    if (mf_model_get_info(m, &info) != MF_OK) {
        mf_cli_fail("generate: model info");
        goto done;
    }
    const mf_tokenizer *tok = mf_model_tokenizer(m);
    if (!tok) {
        fprintf(stderr, "minfer: error: generate: %s has no tokenizer.json\n", o.dir);
        goto done;
    }

    // Tokenised once: the length sizes the session (the prompt and the new
    // tokens, the model's max_pos at most), the ids are what mf_generate runs.
    int64_t n_prompt = 0;
    if (mf_generate_encode_prompt(tok, o.prompt, o.bos, 0, &ids, &n_prompt) != MF_OK) {
        mf_cli_fail("generate: tokenizing the prompt");
        goto done;
    }
    int64_t max_seq = n_prompt + (o.n > 0 ? o.n : 1);
    if (info.max_pos > 0 && max_seq > info.max_pos) {
        if (n_prompt > info.max_pos) {
            fprintf(stderr, "minfer: error: generate: the prompt has %lld tokens, more than the model's %lld positions\n",
                    (long long)n_prompt, (long long)info.max_pos);
            goto done;
        }
        fprintf(stderr, "minfer: the model has %lld positions: at most %lld new tokens\n", (long long)info.max_pos,
                (long long)(info.max_pos - n_prompt + 1));
        max_seq = info.max_pos;
    }
    if (mf_session_create(m, 1, max_seq, &s) != MF_OK || (o.no_graphs && mf_session_set_graphs(s, false) != MF_OK)) {
        mf_cli_fail("generate: session");
        goto done;
    }

    const int32_t *prompt_ids[1] = {ids};
    mf_prompts pr = {.n = 1, .tokens = prompt_ids, .n_tokens = &n_prompt};
    mf_generate_params p = mf_generate_params_default();
    p.max_new_tokens = o.n;
    p.sampler = o.sp;
    p.stop = o.stop;
    p.n_stop = o.n_stop;
    p.ignore_eos = o.ignore_eos;
    p.on_text = on_text;
    bool streamed = false;
    p.user = &streamed;
    if (o.sp.temperature > 0.0f && !o.seed_given)
        fprintf(stderr, "minfer: seed %llu (random; --seed %llu repeats this run)\n", (unsigned long long)o.sp.seed,
                (unsigned long long)o.sp.seed);
    mf_status gs = mf_generate(s, &pr, &p, &r);
    if (gs == MF_OK || streamed) { // end the text's line
        fputc('\n', stdout);
        fflush(stdout);
    }
    if (gs != MF_OK) {
        fprintf(stderr, "minfer: error: %s\n", mf_last_error()); // the message starts with "generate: "
        goto done;
    }

    const mf_generate_stats *st = &r.stats;
    int64_t sess_bytes = mf_session_bytes(s);
    fprintf(stderr,
            "minfer: prompt %lld tokens, %.1f tokens/s | generated %lld tokens, %.1f tokens/s | time to first token "
            "%.1f ms | peak memory %.1f MB (weights %.1f + session %.1f) | %s, %s, finish: %s | picked on the "
            "device %lld of %lld tokens (%s), logits read back for %lld\n",
            (long long)st->prompt_tokens, st->prefill_tok_s, (long long)st->generated_tokens, st->decode_tok_s,
            st->ttft_s * 1e3, (double)(info.weight_bytes + sess_bytes) / 1e6, (double)info.weight_bytes / 1e6,
            (double)sess_bytes / 1e6, mf_backend_name(be), info.arch, mf_finish_reason_str(r.seqs[0].finish),
            (long long)st->device_picks, (long long)st->generated_tokens,
            o.sp.temperature == 0.0f || o.sp.top_k == 1 ? "argmax" : "top-k candidates", (long long)st->logit_reads);
    mf_session_stats ss;
    if (!strcmp(mf_backend_name(be), "cuda") && mf_session_get_stats(s, &ss) == MF_OK) // tests/emu/generate_cli.sh reads it
        fprintf(stderr, "minfer: decode graphs: %lld recorded, %lld replayed%s%s\n", (long long)ss.graphs_recorded,
                (long long)ss.graphs_replayed, ss.graphs_off[0] ? "; off: " : "", ss.graphs_off);
    rc = 0;
done:
    mf_generate_result_free(&r);
    mf_tokenizer_free_buffer(ids);
    mf_session_free(s);
    mf_model_free(m);
    mf_backend_free(be);
    return rc;
}
