// minfer score -m DIR (-p TEXT | --tokens 1,2,3) [--logits-out FILE.npy] [--backend B] [--dtype D]:
// the per-token negative log-likelihood of a text and its perplexity.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

// A (rows, cols) f32 .npy (format 1.0, header padded to 64 bytes).
static bool write_npy(const char *path, const float *x, int64_t rows, int64_t cols) {
    char h[256];
    int n = snprintf(h, sizeof h, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }", (long long)rows,
                     (long long)cols);
    int total = (10 + n + 1 + 63) / 64 * 64; // magic + len + dict + '\n'
    while (10 + n + 1 < total) h[n++] = ' ';
    h[n++] = '\n';
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(n & 0xff), (unsigned char)(n >> 8)};
    bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(h, 1, (size_t)n, f) == (size_t)n &&
              fwrite(x, sizeof(float), (size_t)(rows * cols), f) == (size_t)(rows * cols);
    return fclose(f) == 0 && ok;
}

static void print_token(const mf_tokenizer *tok, int32_t id) {
    const char *t = tok ? mf_tokenizer_token_text(tok, id) : NULL;
    if (!t) return;
    putchar(' ');
    for (const unsigned char *p = (const unsigned char *)t; *p; p++) {
        if (*p == '\n') fputs("\\n", stdout);
        else if (*p < 0x20) printf("\\x%02x", *p);
        else putchar(*p);
    }
}

static void score_help(FILE *f) {
    fprintf(f, "usage: minfer score -m DIR (-p TEXT | --tokens 1,2,3) [options]\n"
               "  Per-token negative log-likelihood of the text under the model, and the perplexity.\n"
               "  -m DIR               Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json)\n"
               "  -p TEXT              text, tokenized with the model's tokenizer\n"
               "  --tokens LIST        token ids instead of text, comma-separated\n"
               "  --bos / --no-bos     put BOS first (default: as the tokenizer's add_bos_token says)\n"
               "  --logits-out FILE    write the (T, vocab) f32 logits as .npy (row t: after tokens 0..t)\n"
               "  --backend B          auto (default), cpu or cuda\n"
               "  --dtype D            auto (default: CUDA bf16; CPU keeps a checkpoint's f16/bf16 weights),\n"
               "                       bf16, f16 or f32 (the CPU computes in f32: D is its weights' storage)\n");
}

int mf_cmd_score(int argc, char **argv) {
    mf_score_opts so;
    char err[MF_ARGS_ERR_CAP];
    const int done = mf_cli_parsed(mf_parse_score_args(argc, argv, &so, err), "score", err, score_help);
    if (done >= 0) return done;
    const mf_model_args mo = so.model;
    const char *text = so.text, *out = so.logits_out;
    const int bos = so.bos; // -1: the tokenizer's default

    mf_backend *be;
    mf_model *m;
    if (mf_cli_open_model(&mo, true, &be, &m)) {
        mf_score_opts_free(&so);
        return 1;
    }
    int rc = 1;
    mf_model_info info;
    mf_model_get_info(m, &info);
    const mf_tokenizer *tok = mf_model_tokenizer(m);
    int32_t *ids = NULL;
    int64_t T = 0;
    float *logits = NULL;
    mf_session *s = NULL;
    if (text) {
        if (!tok) {
            fprintf(stderr, "minfer: error: score: %s has no tokenizer.json (use --tokens)\n", info.source);
            goto done;
        }
        const bool add_bos = bos < 0 ? mf_tokenizer_default_add_bos(tok) : bos == 1;
        if (mf_tokenizer_encode(tok, text, strlen(text), add_bos, &ids, &T) != MF_OK) {
            mf_cli_fail("score: tokenizing");
            goto done;
        }
    } else {
        ids = so.ids, T = so.n_ids; // parsed with the options; freed below
        so.ids = NULL;
        if (bos == 1 && info.bos_id >= 0) { // --bos with --tokens: prepend it
            int32_t *b = malloc((size_t)(T + 1) * sizeof *b);
            if (!b) {
                fprintf(stderr, "minfer: error: score: out of memory for %lld token ids\n", (long long)T + 1);
                goto done;
            }
            b[0] = info.bos_id;
            memcpy(b + 1, ids, (size_t)T * sizeof *ids);
            free(ids);
            ids = b, T++;
        }
    }
    if (T < 1) {
        fprintf(stderr, "minfer: error: score: no tokens to score\n");
        goto done;
    }
    if (mf_session_create(m, 1, T, &s) != MF_OK) {
        mf_cli_fail("score: session");
        goto done;
    }
    logits = malloc((size_t)T * (size_t)info.vocab * sizeof *logits);
    if (!logits) {
        fprintf(stderr, "minfer: error: score: out of memory for %lld x %d logits\n", (long long)T, info.vocab);
        goto done;
    }
    const int32_t slot = 0;
    const int64_t off[2] = {0, T};
    double t0 = mf_cli_now();
    if (mf_session_forward(s, 1, &slot, ids, off, MF_LOGITS_ALL, logits) != MF_OK) {
        mf_cli_fail("score: forward");
        goto done;
    }
    const double secs = mf_cli_now() - t0;
    printf("%6s %8s %12s  token\n", "pos", "id", "nll");
    printf("%6d %8d %12s ", 0, ids[0], "-");
    print_token(tok, ids[0]);
    putchar('\n');
    double sum = 0;
    for (int64_t t = 1; t < T; t++) {
        const float *row = logits + (t - 1) * info.vocab;
        double mx = -INFINITY, z = 0;
        for (int32_t v = 0; v < info.vocab; v++) mx = fmax(mx, row[v]);
        for (int32_t v = 0; v < info.vocab; v++) z += exp((double)row[v] - mx);
        const double nll = -((double)row[ids[t]] - mx - log(z));
        sum += nll;
        printf("%6lld %8d %12.6f ", (long long)t, ids[t], nll);
        print_token(tok, ids[t]);
        putchar('\n');
    }
    if (T > 1)
        printf("tokens %lld, scored %lld, mean nll %.6f, perplexity %.4f\n", (long long)T, (long long)(T - 1),
               sum / (double)(T - 1), exp(sum / (double)(T - 1)));
    else
        printf("tokens 1: nothing to score (the first token has no prediction)\n");
    fprintf(stderr, "minfer: score: %lld tokens in %.1f ms on %s (%s)\n", (long long)T, 1e3 * secs, info.backend,
            mf_dtype_name(info.dtype));
    if (out && !write_npy(out, logits, T, info.vocab)) {
        fprintf(stderr, "minfer: error: score: cannot write %s\n", out);
        goto done;
    }
    if (out) fprintf(stderr, "minfer: score: wrote (%lld, %d) f32 logits to %s\n", (long long)T, info.vocab, out);
    rc = 0;
done:
    mf_session_free(s);
    mf_tokenizer_free_buffer(text ? ids : NULL);
    if (!text) free(ids);
    free(logits);
    mf_model_free(m);
    mf_backend_free(be);
    return rc;
}
