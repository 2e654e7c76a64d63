// llama.cpp's own int8 error on a fixture GGUF, teacher-forced as rml's tests are: prefill the
// reference's prompt in one batch, then decode the reference's own `generated` tokens one by
// one (step s feeds generated[s] at position n_prompt + s), whatever llama.cpp would have
// chosen. (The fixtures' `llamacpp_max_abs_diff_decode_logits_while_agreeing` only covers the
// steps before llama.cpp's greedy path left the reference's.)
//
// Settings as the fixtures' llama_greedy: CPU, n_ctx 256, F32 K/V cache, flash attention off,
// 1 thread, no weight repacking. Prints one line: max |llama.cpp - reference| over the prompt's logits, then that of
// each decode step. The reference logits are read from a little-endian f32 file holding the
// prefill rows then the decode rows (written by tests/data/tools/llamacpp_teacher_forced.sh).
//
// Build (the peers' static llama.cpp build):
//   g++ -O2 -std=c++17 -I$SRC/include -I$SRC/ggml/include llama_teacher_forced.cpp \
//       $B/src/libllama.a $B/ggml/src/libggml.a $B/ggml/src/libggml-cpu.a \
//       $B/ggml/src/libggml-base.a -fopenmp -lpthread -ldl -lm -o llama_teacher_forced
// Usage: llama_teacher_forced MODEL.gguf PROMPT_IDS GENERATED_IDS REF_LOGITS.f32
#include "llama.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static void quiet(enum ggml_log_level level, const char * text, void *) {
    if (level >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

static std::vector<llama_token> ids(char * s) {
    std::vector<llama_token> v;
    for (char * t = strtok(s, ","); t; t = strtok(nullptr, ",")) v.push_back(atoi(t));
    return v;
}

static float worst(const float * a, const float * b, int n) {
    float w = 0;
    for (int i = 0; i < n; i++) w = fmaxf(w, fabsf(a[i] - b[i]));
    return w;
}

int main(int argc, char ** argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPT_IDS GENERATED_IDS REF_LOGITS.f32\n", argv[0]);
        return 2;
    }
    std::vector<llama_token> prompt = ids(argv[2]);
    std::vector<llama_token> gen = ids(argv[3]);
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    // No weight repacking (llama-completion's -nr): on this machine the repacked AMX path dies
    // with SIGILL; the fixtures' prefill figures are reproduced without it (the .py checks).
    mp.use_extra_bufts = false;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    const int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
    const int n = (int) prompt.size(), steps = (int) gen.size() - 1;

    std::vector<float> ref((size_t) (n + steps) * nv);
    FILE * f = fopen(argv[4], "rb");
    if (!f || fread(ref.data(), sizeof(float), ref.size(), f) != ref.size()) {
        fprintf(stderr, "%s: expected %zu f32\n", argv[4], ref.size());
        return 1;
    }
    fclose(f);

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 256;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    cp.no_perf = true;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "context failed\n"); return 1; }

    llama_batch batch = llama_batch_init(256, 0, 1);
    for (int i = 0; i < n; i++) {
        batch.token[i] = prompt[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    batch.n_tokens = n;
    if (llama_decode(ctx, batch)) { fprintf(stderr, "prefill failed\n"); return 1; }
    float pw = 0;
    for (int i = 0; i < n; i++) pw = fmaxf(pw, worst(llama_get_logits_ith(ctx, i), &ref[(size_t) i * nv], nv));
    printf("%.6f", pw);
    for (int s = 0; s < steps; s++) {
        batch.token[0] = gen[s];
        batch.pos[0] = n + s;
        batch.n_seq_id[0] = 1;
        batch.seq_id[0][0] = 0;
        batch.logits[0] = 1;
        batch.n_tokens = 1;
        if (llama_decode(ctx, batch)) { fprintf(stderr, "decode failed\n"); return 1; }
        printf(" %.6f", worst(llama_get_logits_ith(ctx, 0), &ref[(size_t) (n + s) * nv], nv));
    }
    printf("\n");
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
