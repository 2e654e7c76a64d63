/*
 * llama.cpp's teacher-forced logits for token ids that rml wrote, through llama.cpp's public
 * C API (llama.h) only: a peer for tools/fidelity.rs. Built and run by tools/fidelity.sh,
 * which links it against the static libraries of ../shared/peers/build_llamacpp.sh.
 *
 * Usage: llamacpp_logits [--kv f32|f16] [--fa on|off|auto] [--repack] [--step] [-t N]
 *                        MODEL.gguf IN.tokens OUT.f32 [IN.tokens OUT.f32 ...]
 *
 * Each IN.tokens holds u32 little-endian token ids. The ids go through the model in one batch
 * from position 0 with an empty KV cache, every position's logits requested; OUT.f32 receives
 * them as positions x vocab f32 little-endian (the layout tools/fidelity.rs reads).
 * --kv: element type of llama.cpp's KV cache (default f16, llama.cpp's own default; f32 for
 * its exact path). --fa: flash attention (default auto, llama.cpp's default; off with an f32
 * cache for the exact path). --repack: allow llama.cpp's extra buffer types (weight repacking,
 * AMX); off by default because on some AMX machines the repacked path dies with SIGILL.
 * --step: one llama_decode per token (as generation decodes) instead of one batch.
 * Exit status 1 with a message on any failure.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static int32_t *read_ids(const char *path, int32_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (bytes <= 0 || bytes % 4 != 0) { fclose(f); return NULL; }
    *n = (int32_t)(bytes / 4);
    int32_t *ids = malloc((size_t)bytes);
    uint8_t *raw = malloc((size_t)bytes);
    if (!ids || !raw || fread(raw, 1, (size_t)bytes, f) != (size_t)bytes) {
        free(ids); free(raw); fclose(f); return NULL;
    }
    for (int32_t i = 0; i < *n; i++) {
        uint32_t v = (uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 |
                     (uint32_t)raw[4 * i + 2] << 16 | (uint32_t)raw[4 * i + 3] << 24;
        ids[i] = (int32_t)v;
    }
    free(raw);
    fclose(f);
    return ids;
}

static int fail(const char *what, const char *detail) {
    fprintf(stderr, "llamacpp_logits: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    return 1;
}

int main(int argc, char **argv) {
    enum ggml_type kv = GGML_TYPE_F16;
    enum llama_flash_attn_type fa = LLAMA_FLASH_ATTN_TYPE_AUTO;
    int repack = 0, step = 0, threads = 2, a = 1;
    for (; a < argc && argv[a][0] == '-'; a++) {
        if (!strcmp(argv[a], "--kv") && a + 1 < argc) {
            a++;
            if (!strcmp(argv[a], "f32")) kv = GGML_TYPE_F32;
            else if (!strcmp(argv[a], "f16")) kv = GGML_TYPE_F16;
            else return fail("--kv takes f32 or f16, not", argv[a]);
        } else if (!strcmp(argv[a], "--fa") && a + 1 < argc) {
            a++;
            if (!strcmp(argv[a], "on")) fa = LLAMA_FLASH_ATTN_TYPE_ENABLED;
            else if (!strcmp(argv[a], "off")) fa = LLAMA_FLASH_ATTN_TYPE_DISABLED;
            else if (!strcmp(argv[a], "auto")) fa = LLAMA_FLASH_ATTN_TYPE_AUTO;
            else return fail("--fa takes on, off or auto, not", argv[a]);
        } else if (!strcmp(argv[a], "--repack")) {
            repack = 1;
        } else if (!strcmp(argv[a], "--step")) {
            step = 1;
        } else if (!strcmp(argv[a], "-t") && a + 1 < argc) {
            threads = atoi(argv[++a]);
            if (threads < 1) return fail("-t takes a positive thread count", NULL);
        } else {
            return fail("unknown option", argv[a]);
        }
    }
    if (argc - a < 3 || (argc - a - 1) % 2 != 0)
        return fail("usage: llamacpp_logits [--kv f32|f16] [--fa on|off|auto] [--repack] [--step] [-t N] "
                    "MODEL.gguf IN.tokens OUT.f32 [IN.tokens OUT.f32 ...]", NULL);
    const char *model_path = argv[a++];

    /* Every input first, so that one context holds the longest. */
    int pairs = (argc - a) / 2;
    int32_t **ids = calloc((size_t)pairs, sizeof *ids);
    int32_t *lens = calloc((size_t)pairs, sizeof *lens);
    int32_t longest = 0;
    for (int p = 0; p < pairs; p++) {
        ids[p] = read_ids(argv[a + 2 * p], &lens[p]);
        if (!ids[p]) return fail("cannot read token ids from", argv[a + 2 * p]);
        if (lens[p] > longest) longest = lens[p];
    }

    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.use_extra_bufts = repack != 0;
    struct llama_model *model = llama_model_load_from_file(model_path, mp);
    if (!model) return fail("cannot load", model_path);
    int32_t vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)longest;
    cp.n_batch = (uint32_t)longest;
    cp.n_ubatch = (uint32_t)longest;
    cp.n_seq_max = 1;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.type_k = kv;
    cp.type_v = kv;
    cp.flash_attn_type = fa;
    cp.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) return fail("cannot create a context for", model_path);

    struct llama_batch batch = llama_batch_init(longest, 0, 1);
    for (int p = 0; p < pairs; p++) {
        llama_memory_clear(llama_get_memory(ctx), true);
        FILE *out = fopen(argv[a + 2 * p + 1], "wb");
        if (!out) return fail("cannot write", argv[a + 2 * p + 1]);
        /* One batch of every position, or (--step) one batch per position. */
        int32_t width = step ? 1 : lens[p];
        for (int32_t first = 0; first < lens[p]; first += width) {
            batch.n_tokens = width;
            for (int32_t j = 0; j < width; j++) {
                batch.token[j] = ids[p][first + j];
                batch.pos[j] = first + j;
                batch.n_seq_id[j] = 1;
                batch.seq_id[j][0] = 0;
                batch.logits[j] = 1;
            }
            if (llama_decode(ctx, batch) != 0) return fail("llama_decode failed on", argv[a + 2 * p]);
            for (int32_t j = 0; j < width; j++) {
                const float *row = llama_get_logits_ith(ctx, j);
                if (!row) return fail("no logits at a position of", argv[a + 2 * p]);
                /* f32 little-endian: the host order on the x86-64 and AArch64 machines this runs on. */
                if (fwrite(row, sizeof(float), (size_t)vocab, out) != (size_t)vocab)
                    return fail("short write to", argv[a + 2 * p + 1]);
            }
        }
        if (fclose(out) != 0) return fail("cannot close", argv[a + 2 * p + 1]);
        printf("%s: %d positions x %d\n", argv[a + 2 * p + 1], lens[p], vocab);
    }
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    for (int p = 0; p < pairs; p++) free(ids[p]);
    free(ids);
    free(lens);
    return 0;
}
